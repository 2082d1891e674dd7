"""Builds `libpjrt_wgpu.so` from the Rust workspace one directory up and ships it inside the
`jax_plugins.wgpu` package. Nothing prebuilt is downloaded: `cargo` must be on PATH.

Environment:
  CARGO              cargo executable (default: `cargo`)
  CARGO_TARGET_DIR   where cargo builds (default: the workspace's `target/`)
  WGPU_PJRT_PROFILE  cargo profile, `release` (default) or `dev`
  WGPU_PJRT_STRIP    `0` keeps the library's debug line tables in the package (default: they are
                     stripped with `strip --strip-debug` when `strip` is on PATH; ~56 -> ~10 MB)

The wheel is tagged `py3-none-manylinux_2_N_<arch>`, N being the newest glibc symbol version
the library needs (read from the library itself), so pip installs it on any Linux with that
glibc or newer; no Rust toolchain is needed to install it.
"""

import os
import pathlib
import platform
import re
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

_BUILT: list[pathlib.Path] = []
"""The library copied into the package by this build (read by the wheel's tag)."""


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
        strip = shutil.which("strip")
        if os.environ.get("WGPU_PJRT_STRIP", "1") != "0" and strip:
            subprocess.run([strip, "--strip-debug", str(dest)], check=True)
        _BUILT.append(dest)


def glibc_needed(lib: pathlib.Path) -> tuple[int, int] | None:
    """The newest `GLIBC_2.N` symbol version the ELF library names (its version-needs strings),
    or None when it names none."""
    found = [(int(a), int(b)) for a, b in re.findall(rb"GLIBC_(\d+)\.(\d+)", lib.read_bytes())]
    return max(found) if found else None


def manylinux_tag(plat: str) -> str:
    """`linux_<arch>` -> `manylinux_<glibc major>_<minor>_<arch>` from the built library."""
    if not plat.startswith("linux_") or not _BUILT:
        return plat
    needed = glibc_needed(_BUILT[-1])
    if needed is None:
        return plat
    arch = plat[len("linux_"):] or platform.machine()
    return f"manylinux_{needed[0]}_{needed[1]}_{arch}"


class PlatformWheel(bdist_wheel):
    """Tags the wheel `py3-none-manylinux_2_N_<arch>`: the library is native but uses no Python
    ABI, so one wheel serves every Python version."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", manylinux_tag(plat)


class BinaryDistribution(Distribution):
    """Marks the wheel as platform-specific: it contains a native library."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
