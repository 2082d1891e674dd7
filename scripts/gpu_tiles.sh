#!/usr/bin/env bash
# The GPU dot's workgroup tiles (WGPU_HLO_GPU_TILE=BMxBNxBK) compared on a real GPU: kernel
# GPU time (timestamp queries, `wgpu-hlo bench --per-kernel`) and TFLOP/s per shape, for the
# default choice, each forced tile, and a previous build's CLI when given.
#   bash scripts/gpu_tiles.sh [CLI [OLD_CLI]]     (CLI defaults to .gpu/wgpu-hlo; RUNS=5)
# On a device-tool machine carry .gl and .gpu as for scripts/gpu_report.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$ICD" ] && export VK_DRIVER_FILES="$ICD"
CLI="${1:-.gpu/wgpu-hlo}"
OLD="${2:-}"
D=$(mktemp -d)
mk() { # name m k n [batch]
    local m=$2 k=$3 n=$4 bt=${5:-}
    if [ -z "$bt" ]; then
        cat > "$D/$1.mlir" <<M
func.func @main(%a: tensor<${m}x${k}xf32>, %b: tensor<${k}x${n}xf32>) -> tensor<${m}x${n}xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<${m}x${k}xf32>, tensor<${k}x${n}xf32>) -> tensor<${m}x${n}xf32>
  return %0 : tensor<${m}x${n}xf32>
}
M
    else
        cat > "$D/$1.mlir" <<M
func.func @main(%a: tensor<${bt}x${m}x${k}xf32>, %b: tensor<${bt}x${k}x${n}xf32>) -> tensor<${bt}x${m}x${n}xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<${bt}x${m}x${k}xf32>, tensor<${bt}x${k}x${n}xf32>) -> tensor<${bt}x${m}x${n}xf32>
  return %0 : tensor<${bt}x${m}x${n}xf32>
}
M
    fi
    echo "$1 $((2 * m * k * n * ${bt:-1}))"
}
{
    mk mm1024 1024 1024 1024
    mk mm2048 2048 2048 2048
    mk mm4096 4096 4096 4096
    mk mm8192 8192 8192 8192
    mk batched 128 128 128 64
    mk wide4096k256 4096 256 4096
    mk skinny256k4096 256 4096 256
    mk t512x512x2048 512 512 2048
} > "$D/shapes.txt"
run() { # label cli tile
    while read -r name flops; do
        out=$(WGPU_HLO_GPU_TILE=$3 timeout 120 "$2" bench "$D/$name.mlir" --runs "${RUNS:-5}" --per-kernel 2>&1)
        gpu=$(echo "$out" | sed -n 's/.*GPU time.*, \([0-9.]*\) ms in all.*/\1/p')
        if [ -n "$gpu" ]; then
            tf=$(awk -v f="$flops" -v t="$gpu" 'BEGIN { printf "%.2f", f / (t * 1e9) }')
            echo "$1 $name gpu_ms=$gpu TFLOPs=$tf kernels: $(echo "$out" | grep -E '^ +[0-9.]+ ms' | awk '{print $5"="$1}' | tr '\n' ' ')"
        else
            echo "$1 $name FAILED: $(echo "$out" | tail -3 | tr '\n' ' ')"
        fi
    done < "$D/shapes.txt"
}
"$CLI" devices | head -2
[ -n "$OLD" ] && run old "$OLD" ""
for t in default 64x64x16 64x64x8 128x64x8 128x64x16 128x128x8 128x128x16; do
    tt=$t
    [ "$t" = default ] && tt=""
    run "$t" "$CLI" "$tt"
done
rm -rf "$D"
