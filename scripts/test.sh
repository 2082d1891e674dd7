#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (incl. the conformance runner on
# ../shared/conformance against its committed baseline), then the JAX tests through the plugin.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# CI builds without the release profile's line tables: each of the ~40 test binaries links all
# of wgpu, 59 MB with line tables and 12 MB without, so this keeps ~2 GB off a CI disk that
# also holds the ~9 GB of framework venvs (a CI run once failed with "No space left on device"
# while linking). Local runs keep the line tables that the main job's build has.
if [ "${CI:-}" = true ]; then
    export CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-false}"
fi
# A native crash names its thread and library, not only the Python frame it interrupted.
export WGPU_HLO_CRASH_REPORT="${WGPU_HLO_CRASH_REPORT:-1}"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
echo "== cargo test (release profile: dependencies are built once for tests, CLI and plugin)"
cargo test --workspace --release
echo "== conformance (from tests/conformance.rs)"
cat target/conformance/summary.txt 2>/dev/null || echo "(conformance files not found: skipped)"
echo "== pytest (JAX on wgpu vs cpu)"
"$VENV/bin/python" -m pytest -q python/tests
# CPU adapters read kernel inputs of 4096 words or more through textures; with `all` every
# eligible input is, so the small programs of the conformance files and of the JAX comparisons
# run through them too.
echo "== texture reads on every eligible input (WGPU_HLO_TEXTURE_READS=all)"
WGPU_HLO_TEXTURE_READS=all cargo test --release --test conformance --test texture_reads
cat target/conformance/summary.txt 2>/dev/null || true
WGPU_HLO_TEXTURE_READS=all "$VENV/bin/python" -m pytest -q python/tests/test_jax_vs_cpu.py \
    python/tests/test_conv.py python/tests/test_matmul_kernels.py python/tests/test_row_fusion.py \
    python/tests/test_while_kernels.py
# CPU adapters with subgroups run small Jacobi decompositions by blocks of a subgroup's
# columns; the per-pair rounds they replaced still serve adapters without subgroups.
echo "== Jacobi without the block sweeps (WGPU_HLO_JACOBI_BLOCKS=0)"
WGPU_HLO_JACOBI_BLOCKS=0 cargo test --release --test jacobi
# Past 64 columns CPU adapters run eigh by reduction to tridiagonal form, and svd without
# U and V by reduction to bidiagonal form: every test once more that way (small and odd
# orders included), and once by Jacobi only.
echo "== eigh and values-only svd by tridiagonal/bidiagonal reduction everywhere, and by Jacobi only"
WGPU_HLO_EIGH_TRIDIAGONAL=1 WGPU_HLO_SVD_BIDIAGONAL=1 cargo test --release --test jacobi
WGPU_HLO_EIGH_TRIDIAGONAL=0 WGPU_HLO_SVD_BIDIAGONAL=0 cargo test --release --test jacobi
# What adapters without f64 (Metal, many mobile GPUs) get: eigh's QL iteration in f32, svd by
# Jacobi only.
echo "== without f64 (WGPU_HLO_F64=0), eigh by tridiagonal reduction everywhere"
WGPU_HLO_F64=0 WGPU_HLO_EIGH_TRIDIAGONAL=1 cargo test --release --test jacobi --test linalg
# Cholesky's column kernels, which the tiled plan replaced and which remain its fallback where
# workgroup memory cannot hold a block of 8 columns.
echo "== cholesky by the column kernels (WGPU_HLO_CHOLESKY=workgroup, =columns)"
WGPU_HLO_CHOLESKY=workgroup cargo test --release --test linalg cholesky
WGPU_HLO_CHOLESKY=columns cargo test --release --test linalg cholesky
# LU's one-workgroup kernels and JAX-level panels, which the tiled plan replaced by default
# and which remain reachable (the panels take LU states past 128 MiB).
echo "== LU by the one-workgroup kernels (WGPU_HLO_LU=workgroup) and by JAX-level panels (=blocked)"
WGPU_HLO_LU=workgroup "$VENV/bin/python" -m pytest -q python/tests/test_linalg_sizes.py -k "lu or solve"
WGPU_HLO_LU=blocked "$VENV/bin/python" -m pytest -q python/tests/test_linalg_sizes.py -k "lu or solve"
# The kernel shapes a GPU gets (workgroup-memory tiles instead of CPU register blocks), run on
# this adapter against the same references, so CI checks code no GPU here would otherwise run.
echo "== GPU kernel choices on this adapter (WGPU_HLO_ADAPTER_CLASS=gpu)"
WGPU_HLO_ADAPTER_CLASS=gpu cargo test --release --test conformance --test conv_gemm \
    --test dot_tiled --test reduce_rows --test jacobi --test linalg --test big_tensors \
    --test conv_split --test loop_bound --test horizontal --test prologue
cat target/conformance/summary.txt 2>/dev/null || true
WGPU_HLO_ADAPTER_CLASS=gpu "$VENV/bin/python" -m pytest -q python/tests/test_jax_vs_cpu.py \
    python/tests/test_conv.py python/tests/test_matmul_kernels.py python/tests/test_linalg_sizes.py \
    python/tests/test_row_fusion.py python/tests/test_kernel_counts.py python/tests/test_epilogue.py \
    python/tests/test_top_k_select.py python/tests/test_scatter_payload.py \
    python/tests/test_hoist_dots.py python/tests/test_dot_layout.py python/tests/test_quad_groups.py \
    python/tests/test_merged_updates.py python/tests/test_while_kernels.py \
    python/tests/test_scatter_index_prologue.py python/tests/test_user_sweep_semantics.py
# PyTorch/XLA and TensorFlow through the same plugin, each in its own venv (created once from
# PyPI: ~12 min and ~7 GB for torch + torch_xla with its CUDA wheels, ~3 min for tensorflow).
# WGPU_HLO_FRAMEWORK_TESTS=0 leaves them out.
if [ "${WGPU_HLO_FRAMEWORK_TESTS:-1}" != 0 ]; then
    echo "== PyTorch/XLA and TensorFlow on wgpu (scripts/test_frameworks.sh)"
    bash scripts/test_frameworks.sh
fi
