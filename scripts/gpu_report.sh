#!/usr/bin/env bash
# The GPU figures of issue 11 in one command, for a machine with a real GPU (the `device`
# tool's NVIDIA machines): copy_buffer_to_buffer GB/s, fused elementwise GB/s against it,
# matmul GFLOP/s 1024..8192 (against an fp32 peak when given), tiny-jit microseconds against
# the raw-wgpu floor, the training steps against jax cpu on that machine, the whole bench
# (against IREE on the same GPU when its runtime and precompiled programs came along), and
# per-kernel GPU times of the StableHLO files in .gpu/ (against a previous build's CLI when
# .gpu/wgpu-hlo.old is there).
#
# Prepare here (once; the device machine has python3 with jax, flax, optax, pytest and
# pytest-xdist, but no Rust and no Vulkan loader; NVIDIA's Vulkan driver there needs
# glvnd's libraries as well as the loader):
#   cargo build --release --workspace && mkdir -p .gpu && strip --strip-debug -o .gpu/libpjrt_wgpu.so target/release/libpjrt_wgpu.so
#   printf '/.gl/\n/.gpu/\n/.iree/\n/.whl/\n' >> .git/info/exclude
#   mkdir -p .gl /tmp/amd64/partial; o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update; (cd .gl && apt-get $o download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2)
# for the correctness checks on the GPU as well (the conformance files and the JAX
# comparisons; ~70 s on an H200), the CLI and the conformance files (xz keeps them in the
# 64 MiB a call carries):
#   strip -o .gpu/wgpu-hlo target/release/wgpu-hlo
#   tar cf - -C .. shared/conformance/testdata shared/conformance/interpret | xz > .gpu/conformance.tar.xz
# for IREE on the GPU (its compiler is too large to carry: compile here, run there), with
# iree-base-compiler installed here:
#   python examples/bench_jax.py --iree-export .iree
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl iree-base-runtime==3.13.0
# for the host stacks of the transformer loop (py-spy, whose stacks name the plugin's
# functions because strip --strip-debug above keeps its symbols; 2026-11-30 they did not):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl py-spy==0.4.3
# for the Rust integration tests on the GPU as well (needs the conformance files above for
# math_accuracy; the binaries are ~9 MB each stripped, so carry a few):
#   mkdir -p /tmp/tb && cargo test --release --test jacobi --test math_accuracy --no-run --message-format=json \
#       | python3 -c 'import sys, json; [print(m["target"]["name"], m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["kind"] == ["test"]]' \
#       | while read n p; do strip -o /tmp/tb/$n $p; done && tar cf - -C /tmp/tb . | xz > .gpu/tests.tar.xz
# .gpu/libpjrt_wgpu.so.xz and .gpu/wgpu-hlo.xz (xz of the stripped files) are unpacked first,
# which keeps the library, the CLI, the tests and IREE's runtime within the 64 MiB.
# then run with carry [".gl", ".gpu"] (plus ".iree", ".whl"):
#   bash scripts/gpu_report.sh [--peak-tflops 67]
# (an H100 or H200 has 67 TFLOP/s of fp32). BENCH=0 leaves out the whole bench, ROUTES=0 the
# eigh/svd comparison of routes, CHECKS=0 the correctness checks. On an H200 it took ~110 s
# in all (2026-11-26), ~215 s with IREE and the per-kernel comparisons (2026-11-27).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$EGL" ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES="$EGL"
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$ICD" ]; then
    export VK_DRIVER_FILES="$ICD"
fi
for f in .gpu/libpjrt_wgpu.so .gpu/wgpu-hlo; do
    if [ -f "$f.xz" ] && [ ! -f "$f" ]; then xz -d -k "$f.xz" && chmod +x "$f"; fi
done
LIB="${WGPU_PJRT_LIBRARY_PATH:-$ROOT/.gpu/libpjrt_wgpu.so}"
[ -f "$LIB" ] || LIB="$ROOT/target/release/libpjrt_wgpu.so"
export WGPU_PJRT_LIBRARY_PATH="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" PYTHONUNBUFFERED=1
# Only the plugin: JAX's own CUDA plugin would otherwise take the GPU first.
export JAX_PLATFORMS="wgpu,cpu"
OUT_DIR="${OUT:-/tmp}"
PY="${PYTHON:-python3}"
"$PY" -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tail -1
if [ "${GPU_REPORT:-1}" != 0 ]; then
    "$PY" examples/bench_jax.py --gpu-report "$@" 2>&1 | tee "$OUT_DIR/gpu_report.txt"
fi
IREE=(--no-iree)
if [ -d .iree ] && ls .whl/iree_base_runtime-*.whl > /dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/iree-site .whl/iree_base_runtime-*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/iree-site" && IREE=(--iree-dir .iree)
fi
# jax's own CUDA backend on the same GPU, as a second column, where jax has one (CUDA=0: not).
CUDA_ARGS=()
if [ "${CUDA:-1}" != 0 ] && "$PY" -c "import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in ('jax_cuda13_plugin', 'jax_cuda12_plugin')))" 2>/dev/null; then
    CUDA_ARGS=(--cuda)
fi
with_cuda() {
    if [ ${#CUDA_ARGS[@]} -gt 0 ]; then
        JAX_PLATFORMS="wgpu,cpu,cuda" XLA_PYTHON_CLIENT_PREALLOCATE=false "$@"
    else
        "$@"
    fi
}
if [ "${BENCH:-1}" != 0 ]; then
    with_cuda "$PY" examples/bench_jax.py "${IREE[@]}" "${CUDA_ARGS[@]}" --budget "${BUDGET:-2}" 2>&1 | tee "$OUT_DIR/bench_jax.txt"
fi
# Where the training steps' time goes (host, kernels, the device's gaps), then the
# transformer loop's host stacks when py-spy came along as a wheel in .whl.
if [ "${STEPS:-1}" != 0 ]; then
    with_cuda timeout 240 "$PY" examples/step_profile.py 2>&1 | grep -v "^Platform" \
        | tee "$OUT_DIR/step_profile.txt"
    if ls .whl/py_spy-*.whl > /dev/null 2>&1 \
        && "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/pyspy .whl/py_spy-*.whl; then
        timeout 120 /tmp/pyspy/bin/py-spy record --native --format raw --rate 100 -o "$OUT_DIR/transformer.stacks" -- \
            "$PY" examples/step_profile.py --only transformer --steps 300 --wgpu-only > /dev/null 2>&1
        echo "py-spy: $(wc -l < "$OUT_DIR/transformer.stacks" 2>/dev/null) stacks in transformer.stacks"
    fi
fi
# eigh and svd by each route (Jacobi, the reductions, the default), the runs behind the GPU
# thresholds in src/codegen/op_kernels/{tridiagonal,bidiagonal}.rs (ROUTES=0: not).
if [ "${ROUTES:-1}" != 0 ]; then
    for r in "default:" "jacobi:0" "forced:1"; do
        WGPU_HLO_EIGH_TRIDIAGONAL=${r#*:} WGPU_HLO_SVD_BIDIAGONAL=${r#*:} timeout 90 \
            "$PY" examples/linalg_routes.py "${r%%:*}" eigh,svduv,svd 96 128 256 512 2>&1 | grep -v "^Platform"
    done | tee "$OUT_DIR/linalg_routes.txt"
fi
if [ "${EVERYDAY:-1}" != 0 ]; then
    timeout 240 "$PY" examples/bench_everyday.py --runs 5 2>&1 | tee "$OUT_DIR/bench_everyday.txt"
fi
# Per-kernel GPU times (timestamp queries) of the programs in .gpu/, this build against the
# previous one's CLI when it came along.
if [ -x .gpu/wgpu-hlo ]; then
    for f in .gpu/*.mlir; do
        [ -f "$f" ] || continue
        for cli in .gpu/wgpu-hlo.old .gpu/wgpu-hlo; do
            [ -x "$cli" ] || continue
            echo "== $f with $cli"
            timeout 120 "$cli" bench "$f" --runs 20 --per-kernel 2>&1 | grep -v "^compile\|^/" | head -8
        done
    done 2>&1 | tee "$OUT_DIR/per_kernel.txt"
fi
[ -f .gpu/conformance.tar.xz ] && tar xJf .gpu/conformance.tar.xz -C .gpu
if [ "${CHECKS:-1}" != 0 ] && [ -f .gpu/tests.tar.xz ]; then
    echo "== Rust integration tests"
    mkdir -p /tmp/wgpu-hlo-tests && tar xJf .gpu/tests.tar.xz -C /tmp/wgpu-hlo-tests
    export WGPU_HLO_CONFORMANCE="$ROOT/.gpu/shared/conformance"
    for t in /tmp/wgpu-hlo-tests/*; do
        echo "-- $(basename "$t")"
        timeout "${TEST_TIMEOUT:-300}" "$t" --nocapture --test-threads 4 2>&1
    done > "$OUT_DIR/rust_tests.txt"
    grep -E "^-- |^test result|panicked|over the bound" "$OUT_DIR/rust_tests.txt" | cut -c1-240
fi
if [ "${CHECKS:-1}" != 0 ] && [ -x .gpu/wgpu-hlo ] && [ -d .gpu/shared/conformance ]; then
    echo "== conformance on $(.gpu/wgpu-hlo devices | head -1)"
    .gpu/wgpu-hlo conformance .gpu/shared/conformance/testdata .gpu/shared/conformance/interpret \
        --jobs 6 --timeout 60 --verbose > "$OUT_DIR/conformance.txt" 2>&1
    grep -E "FAIL|^conformance:" "$OUT_DIR/conformance.txt" | cut -c1-240
    echo "== JAX tests against jax cpu (slow ones included)"
    JAX_WGPU_SLOW_TESTS=1 "$PY" -m pytest -q -n 6 -p no:cacheprovider python/tests \
        --ignore python/tests/test_torch_xla.py --ignore python/tests/test_tensorflow.py \
        --ignore python/tests/test_wheel.py -rfE > "$OUT_DIR/pytest.txt" 2>&1
    tail -5 "$OUT_DIR/pytest.txt"
fi
