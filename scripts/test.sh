#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (incl. the conformance runner on
# ../shared/conformance against its committed baseline), then the JAX tests through the plugin.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
echo "== cargo test (release profile: dependencies are built once for tests, CLI and plugin)"
cargo test --workspace --release
echo "== conformance (from tests/conformance.rs)"
cat target/conformance/summary.txt 2>/dev/null || echo "(conformance files not found: skipped)"
echo "== pytest (JAX on wgpu vs cpu)"
"$VENV/bin/python" -m pytest -q python/tests
# PyTorch/XLA and TensorFlow through the same plugin, each in its own venv (created once from
# PyPI: ~12 min and ~7 GB for torch + torch_xla with its CUDA wheels, ~3 min for tensorflow).
# WGPU_HLO_FRAMEWORK_TESTS=0 leaves them out.
if [ "${WGPU_HLO_FRAMEWORK_TESTS:-1}" != 0 ]; then
    echo "== PyTorch/XLA and TensorFlow on wgpu (scripts/test_frameworks.sh)"
    bash scripts/test_frameworks.sh
fi
