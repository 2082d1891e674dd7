#!/usr/bin/env bash
# The main job: train a small MLP with JAX on the best GPU wgpu finds (lavapipe otherwise),
# then the same on cpu, and compare.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
cargo build --release -q --bin wgpu-hlo
./target/release/wgpu-hlo devices
exec "$VENV/bin/python" examples/mlp_train.py "$@"
