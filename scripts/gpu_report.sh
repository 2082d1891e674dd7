#!/usr/bin/env bash
# The GPU figures of issue 11 in one command, for a machine with a real GPU (the `device`
# tool's NVIDIA machines): copy_buffer_to_buffer GB/s, fused elementwise GB/s against it,
# matmul GFLOP/s 1024..8192 (against an fp32 peak when given), tiny-jit microseconds against
# the raw-wgpu floor, and the training steps against jax cpu on that machine.
#
# Prepare here (once; the device machine has python3 with jax, flax and optax, but no Rust
# and no Vulkan loader):
#   cargo build --release -p pjrt-wgpu --lib && mkdir -p .gpu && strip -o .gpu/libpjrt_wgpu.so target/release/libpjrt_wgpu.so
#   echo /.gl/ >> .git/info/exclude; echo /.gpu/ >> .git/info/exclude
#   mkdir -p .gl /tmp/amd64/partial; o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update; (cd .gl && apt-get $o download libvulkan1)
# then run with carry [".gl", ".gpu"]:  bash scripts/gpu_report.sh [--peak-tflops 67]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$ICD" ]; then
    export VK_DRIVER_FILES="$ICD"
fi
LIB="${WGPU_PJRT_LIBRARY_PATH:-$ROOT/.gpu/libpjrt_wgpu.so}"
[ -f "$LIB" ] || LIB="$ROOT/target/release/libpjrt_wgpu.so"
export WGPU_PJRT_LIBRARY_PATH="$LIB" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" PYTHONUNBUFFERED=1
# Only the plugin: JAX's own CUDA plugin would otherwise take the GPU first.
export JAX_PLATFORMS="wgpu,cpu"
OUT_DIR="${OUT:-/tmp}"
PY="${PYTHON:-python3}"
"$PY" -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tail -1
"$PY" examples/bench_jax.py --gpu-report "$@" 2>&1 | tee "$OUT_DIR/gpu_report.txt"
"$PY" examples/bench_jax.py --no-iree --budget 2 2>&1 | tee "$OUT_DIR/bench_jax.txt"
