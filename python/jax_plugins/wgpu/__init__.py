"""JAX plugin for the `wgpu` platform: registers `libpjrt_wgpu.so` with JAX.

JAX imports this module through the `jax_plugins` entry point and calls `initialize()` once,
before any backend is created.
"""

from __future__ import annotations

import logging
import os
import pathlib

logger = logging.getLogger(__name__)

PLATFORM = "wgpu"
"""The JAX platform name (`PJRT_Client_PlatformName` of the library)."""

PRIORITY = 400
"""Backend priority, as JAX's own plugins use: above `cpu`, so `wgpu` is the default backend
when installed; choose with `JAX_PLATFORMS=cpu` / `jax.devices("cpu")` otherwise."""

LIBRARY_NAME = "libpjrt_wgpu.so"


def library_path() -> pathlib.Path:
    """The plugin library: `$WGPU_PJRT_LIBRARY_PATH` if set, else the one installed in this
    package, else (running from a source checkout) the one cargo built, release first."""
    override = os.environ.get("WGPU_PJRT_LIBRARY_PATH")
    if override:
        return pathlib.Path(override)
    here = pathlib.Path(__file__).resolve().parent
    installed = here / LIBRARY_NAME
    if installed.exists():
        return installed
    workspace = here.parents[2]
    targets = [pathlib.Path(os.environ["CARGO_TARGET_DIR"])] if "CARGO_TARGET_DIR" in os.environ else []
    targets.append(workspace / "target")
    for target in targets:
        for profile in ("release", "debug"):
            built = target / profile / LIBRARY_NAME
            if built.exists():
                return built
    return installed


def _named_in_pjrt_env() -> bool:
    """True when `PJRT_NAMES_AND_LIBRARY_PATHS` already names `wgpu`: JAX loads that library
    itself after the plugin modules are initialized, and loading it twice would fail."""
    spec = os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "")
    for entry in spec.split(","):
        name, sep, _ = entry.partition(os.path.pathsep)
        if sep and name.strip() == PLATFORM:
            return True
    return False


def _enable_donation() -> None:
    """Lets JAX emit buffer donation (`tf.aliasing_output`) for `wgpu` computations."""
    from jax._src.interpreters import mlir

    platforms = getattr(mlir, "_platforms_with_donation", None)
    if platforms is None:
        logger.warning("this JAX has no _platforms_with_donation; donation stays off for wgpu")
    elif PLATFORM not in platforms:
        platforms.append(PLATFORM)


def initialize() -> None:
    """Registers the `wgpu` PJRT plugin and its JAX-side hooks (donation, lowering rules)."""
    from jax._src import xla_bridge

    from . import callbacks, lowerings

    if _named_in_pjrt_env():
        logger.debug("wgpu is named in PJRT_NAMES_AND_LIBRARY_PATHS; JAX loads it from there")
    else:
        path = library_path()
        if not path.exists():
            raise FileNotFoundError(
                f"{path} does not exist: reinstall jax-wgpu (pip install ./python builds it) or "
                "set WGPU_PJRT_LIBRARY_PATH"
            )
        xla_bridge.register_plugin(PLATFORM, priority=PRIORITY, library_path=str(path))
    _enable_donation()
    lowerings.register(PLATFORM)
    callbacks.register(PLATFORM)
