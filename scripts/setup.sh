#!/usr/bin/env bash
# Prepares a machine for wgpu-hlo: a Vulkan driver (Mesa's lavapipe when none is installed),
# a Python venv with jax and the jax-wgpu plugin built from this checkout.
# Sourced by scripts/main_job.sh and scripts/test.sh; idempotent.
#   WGPU_HLO_VENV   venv directory (default: .venv in the repository)
#   JAX_VERSION     jax/jaxlib version (default: 0.12.0.1 on Python >= 3.12, else 0.10.2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${WGPU_HLO_VENV:-$ROOT/.venv}"

log() { echo "[setup] $*" >&2; }

have_vulkan_icd() {
    local d
    for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
        if compgen -G "$d/*.json" >/dev/null 2>&1; then return 0; fi
    done
    [ -n "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]
}

ensure_vulkan() {
    if have_vulkan_icd && ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
        return 0
    fi
    log "no Vulkan driver found: installing Mesa (lavapipe) and the Vulkan loader"
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
}

find_python() {
    local c
    for c in python3.12 python3.13 /root/.pyenv/versions/3.12*/bin/python3.12 \
             "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    # jax 0.10.x still supports Python 3.11.
    for c in python3.11 python3; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}

ensure_venv() {
    local py
    if [ ! -x "$VENV/bin/python" ]; then
        py="$(find_python)" || { log "no Python >= 3.11 found"; return 1; }
        log "creating $VENV with $py"
        "$py" -m venv "$VENV"
    fi
    local minor
    minor="$("$VENV/bin/python" -c 'import sys; print(sys.version_info[1])')"
    local jaxv="${JAX_VERSION:-}"
    if [ -z "$jaxv" ]; then
        if [ "$minor" -ge 12 ]; then jaxv=0.12.0.1; else jaxv=0.10.2; fi
    fi
    if ! "$VENV/bin/python" -c "import jax, sys; sys.exit(jax.__version__ != '$jaxv')" 2>/dev/null; then
        log "installing jax==$jaxv into $VENV"
        "$VENV/bin/pip" install -q --upgrade pip
        "$VENV/bin/pip" install -q "jax==$jaxv" "jaxlib==$jaxv" numpy pytest ml_dtypes absl-py
    fi
    # Ecosystem libraries the tests train real models with (the compilation-cache test uses a
    # flax/optax step); jax stays pinned.
    if [ "$minor" -ge 12 ] && ! "$VENV/bin/python" -c "import flax, optax" 2>/dev/null; then
        log "installing flax and optax into $VENV"
        "$VENV/bin/pip" install -q flax optax "jax==$jaxv" "jaxlib==$jaxv"
    fi
}

install_plugin() {
    log "building and installing the jax-wgpu plugin (cargo build --release -p pjrt-wgpu)"
    "$VENV/bin/pip" install -q "$ROOT/python"
}

ensure_vulkan
ensure_venv
install_plugin
export WGPU_HLO_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
# Mesa's window-system code complains without it; compute needs no display.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
