"""TensorFlow NextPluggableDevice `WGPU` on the wgpu PJRT plugin.

`python -m tensorflow_wgpu install [DIR]` puts two libraries where TensorFlow loads plugins from
(`site-packages/tensorflow-plugins/` of the running interpreter by default, or DIR, e.g. one named
by `TF_PLUGGABLE_DEVICE_LIBRARY_PATH`):

* `libpjrt_wgpu.so`, the plugin itself: TensorFlow finds `TFNPD_InitPlugin` and `GetPjrtApi` in
  it and registers the `WGPU` device;
* `libwgpu_tf_client_factory.so`, compiled here from `client_factory.cc` against the installed
  TensorFlow's headers (a C++ compiler is needed, as for a TensorFlow custom op): it registers
  the PJRT client factory for `WGPU`, which pip TensorFlow lacks for any plugin device (see that
  file).

Then, in a new process, with `TF_XLA_FLAGS=--tf_xla_use_device_api=true` (TensorFlow's switch
for compiling `jit_compile=True` functions through PJRT on a device),
`with tf.device("/device:WGPU:0"):` runs on wgpu. TensorFlow sends HLO protos
(`PJRT_Program.format = "hlo"`), so programs run once the library has the HLO proto frontend;
tensors move to and from the device either way.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

DEVICE_TYPE = "WGPU"
TF_XLA_FLAGS = "--tf_xla_use_device_api=true"
"""What `TF_XLA_FLAGS` must contain for `jit_compile=True` functions on `WGPU`."""

FACTORY_SOURCE = pathlib.Path(__file__).resolve().parent / "client_factory.cc"
FACTORY_LIBRARY = "libwgpu_tf_client_factory.so"
PLUGIN_LIBRARY = "libpjrt_wgpu.so"


def plugin_dir() -> pathlib.Path:
    """`tensorflow-plugins/` in this interpreter's site-packages (what `import tensorflow` scans)."""
    return pathlib.Path(sysconfig.get_paths()["platlib"]) / "tensorflow-plugins"


def _tf_build_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the installed TensorFlow, asked in a child process: importing
    TensorFlow here would load the plugins directory we are about to write."""
    code = (
        "import tensorflow as tf, json;"
        "print(json.dumps([tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()]))"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"cannot import tensorflow to read its build flags:\n{out.stderr[-2000:]}")
    import json

    compile_flags, link_flags = json.loads(out.stdout.strip().splitlines()[-1])
    return compile_flags, link_flags


def build_client_factory(dest: pathlib.Path, cxx: str | None = None) -> pathlib.Path:
    """Compiles `client_factory.cc` against the installed TensorFlow into `dest`."""
    compile_flags, link_flags = _tf_build_flags()
    libdir = next((f[2:] for f in link_flags if f.startswith("-L")), None)
    if libdir is None:
        raise RuntimeError(f"no -L in TensorFlow's link flags {link_flags}")
    cxx = cxx or os.environ.get("CXX", "g++")
    out = dest / FACTORY_LIBRARY
    cmd = [cxx, "-shared", "-fPIC", "-O2", *compile_flags, str(FACTORY_SOURCE), "-o", str(out),
           *link_flags, "-l:libtensorflow_cc.so.2", f"-Wl,-rpath,{libdir}"]
    subprocess.run(cmd, check=True)
    return out


def install(dest: os.PathLike | str | None = None, library: os.PathLike | str | None = None) -> pathlib.Path:
    """Installs the plugin and the client factory into `dest` (default: `plugin_dir()`)."""
    from jax_plugins.wgpu import library_path

    dest = pathlib.Path(dest) if dest is not None else plugin_dir()
    dest.mkdir(parents=True, exist_ok=True)
    lib = pathlib.Path(library) if library is not None else library_path()
    if not lib.exists():
        raise FileNotFoundError(f"{lib} does not exist: build it (cargo build --release -p pjrt-wgpu --lib) or set WGPU_PJRT_LIBRARY_PATH")
    with tempfile.TemporaryDirectory() as tmp:
        built = build_client_factory(pathlib.Path(tmp))
        shutil.copy2(built, dest / FACTORY_LIBRARY)
    shutil.copy2(lib, dest / PLUGIN_LIBRARY)
    return dest


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] != "install" or len(argv) > 2:
        print("usage: python -m tensorflow_wgpu install [DIR]", file=sys.stderr)
        return 2
    dest = install(argv[1] if len(argv) == 2 else None)
    print(f"installed {PLUGIN_LIBRARY} and {FACTORY_LIBRARY} into {dest}")
    print(f"run TensorFlow with TF_XLA_FLAGS={TF_XLA_FLAGS} and tf.device('/device:{DEVICE_TYPE}:0')")
    return 0
