#!/usr/bin/env bash
# Optional: PyTorch/XLA and TensorFlow on the wgpu plugin (python/tests/test_torch_xla.py,
# python/tests/test_tensorflow.py). Each framework gets its own venv (they pin different
# protobuf/numpy/... than jax), created once under $FRAMEWORK_VENVS (default .venvs/ in the
# checkout) from PyPI; the plugin library is the one cargo builds here.
#
#   scripts/test_frameworks.sh            # both
#   scripts/test_frameworks.sh torch      # one of: torch tensorflow
#
# Cost, measured on the 2-core CI machine: creating the torch venv (torch 2.9.0 with its CUDA
# wheels + torch_xla 2.9.0, ~7 GB) ~12 min, the TensorFlow venv (tensorflow 2.21.0, ~2 GB)
# ~3 min; the tests themselves ~1 min (torch) and ~1.5 min (TF, incl. building the client
# factory with g++). Needs python3.12 (torch_xla publishes cp312 wheels) and, for TF, a C++
# compiler.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENVS="${FRAMEWORK_VENVS:-$ROOT/.venvs}"
find_py312() {  # a python3.12 that runs (a pyenv shim may exist and refuse to)
  local c
  for c in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys' >/dev/null 2>&1; then
      command -v "$c"; return 0
    fi
  done
}
PY="${FRAMEWORK_PYTHON:-$(find_py312)}"
TORCH_VERSION="${TORCH_VERSION:-2.9.0}"      # torch_xla X.Y.Z wants torch X.Y.Z
TF_VERSION="${TF_VERSION:-2.21.0}"
WHICH=("${@:-torch tensorflow}")
WHICH=(${WHICH[*]})

if [ -z "$PY" ]; then
  echo "python3.12 not found (set FRAMEWORK_PYTHON)" >&2
  exit 1
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

echo "== cargo build (plugin library)"
cargo build --release -p pjrt-wgpu --lib
LIB="$ROOT/target/release/libpjrt_wgpu.so"

make_venv() {  # name, packages...
  local dir="$VENVS/$1"; shift
  if [ ! -x "$dir/bin/python" ] || [ ! -f "$dir/.installed" ]; then
    echo "== creating $dir: $*"
    local t0=$SECONDS
    # An install that fails (no package index, a download cut short, past INSTALL_TIMEOUT
    # seconds) is reported and that framework's tests are left out: it says nothing about the
    # plugin. Test failures still fail the run.
    if ! { "$PY" -m venv "$dir" &&
           timeout "${INSTALL_TIMEOUT:-2400}" "$dir/bin/pip" install -q --upgrade pip &&
           timeout "${INSTALL_TIMEOUT:-2400}" "$dir/bin/pip" install -q "$@" pytest; }; then
      echo "!! could not install $* into $dir: its tests are left out" >&2
      return 1
    fi
    echo "$*" > "$dir/.installed"
    echo "   took $((SECONDS - t0)) s"
  fi
}

run_tests() {  # venv name, test file, extra env...
  local dir="$VENVS/$1" file="$2"; shift 2
  echo "== pytest $file ($dir)"
  env "$@" PYTHONPATH="$ROOT/python" WGPU_PJRT_LIBRARY_PATH="$LIB" \
    "$dir/bin/python" -m pytest -q -rs "python/tests/$file"
}

for fw in "${WHICH[@]}"; do
  case "$fw" in
    torch)
      make_venv torch "torch==$TORCH_VERSION" "torch_xla==$TORCH_VERSION" || continue
      # The entry point (torch_xla.plugins -> torch_xla_wgpu) comes from the installed metadata;
      # --no-deps: the torch venv needs no jax.
      "$VENVS/torch/bin/pip" install -q --no-deps "$ROOT/python"
      run_tests torch test_torch_xla.py
      ;;
    tensorflow)
      make_venv tensorflow "tensorflow==$TF_VERSION" || continue
      run_tests tensorflow test_tensorflow.py
      ;;
    *)
      echo "unknown framework $fw (torch, tensorflow)" >&2
      exit 2
      ;;
  esac
done
