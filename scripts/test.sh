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
