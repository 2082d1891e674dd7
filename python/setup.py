"""Builds `libpjrt_wgpu.so` from the Rust workspace one directory up and ships it inside the
`jax_plugins.wgpu` package. Nothing prebuilt is downloaded: `cargo` must be on PATH.

Environment:
  CARGO              cargo executable (default: `cargo`)
  CARGO_TARGET_DIR   where cargo builds (default: the workspace's `target/`)
  WGPU_PJRT_PROFILE  cargo profile, `release` (default) or `dev`
"""

import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

HERE = pathlib.Path(__file__).resolve().parent
WORKSPACE = HERE.parent
LIBRARY = "libpjrt_wgpu.so"


def build_library() -> pathlib.Path:
    """Runs cargo for the plugin crate and returns the built shared library."""
    if not (WORKSPACE / "pjrt" / "Cargo.toml").exists():
        raise RuntimeError(
            f"the Rust workspace was not found at {WORKSPACE}; build from a checkout of "
            "wgpu-hlo (pip install ./python)"
        )
    profile = os.environ.get("WGPU_PJRT_PROFILE", "release")
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "-p", "pjrt-wgpu", "--lib", "--profile", profile]
    subprocess.run(cmd, cwd=WORKSPACE, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))
    out_dir = "debug" if profile == "dev" else profile
    lib = target / out_dir / LIBRARY
    if not lib.exists():
        raise RuntimeError(f"cargo finished but {lib} does not exist")
    return lib


class BuildPyWithLibrary(build_py):
    """`build_py` that also builds and copies the plugin library into the package."""

    def run(self):
        super().run()
        lib = build_library()
        dest = pathlib.Path(self.build_lib) / "jax_plugins" / "wgpu" / LIBRARY
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest)


class PlatformWheel(bdist_wheel):
    """Tags the wheel `py3-none-<platform>`: the library is native but uses no Python ABI, so
    one wheel serves every Python version."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """Marks the wheel as platform-specific: it contains a native library."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
