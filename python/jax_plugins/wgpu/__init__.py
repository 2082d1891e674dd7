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


def _quiet_headless() -> None:
    """Keeps a headless process quiet, as `wgpu_hlo::runtime::quiet_headless_env` does for the
    CLI: without `XDG_RUNTIME_DIR`, Mesa's implicit device-select Vulkan layer makes libwayland
    print `error: XDG_RUNTIME_DIR is invalid or not set` when the device is created. The layer
    only reorders devices (the plugin ranks adapters itself), so it is switched off unless the
    user asked it for a device (`MESA_VK_DEVICE_SELECT`) or set `NODEVICE_SELECT` already."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    if os.environ.get("MESA_VK_DEVICE_SELECT") or os.environ.get("NODEVICE_SELECT"):
        return
    os.environ["NODEVICE_SELECT"] = "1"


def _enable_compilation_cache() -> None:
    """Opts `wgpu` into JAX's persistent compilation cache (`jax_compilation_cache_dir`).

    JAX caches executables only for the platforms named in a list local to
    `jax._src.compilation_cache.is_cache_used` (tpu, gpu, cpu, neuron) that also support
    executable serialization. The plugin serializes its compiled programs
    (`PJRT_Executable_Serialize`: kernels and step program, keyed by plugin build and adapter),
    so it wraps `is_cache_used` to answer for `wgpu` exactly as JAX answers for those: the cache
    is used when it is enabled. Other platforms go to JAX's own function unchanged.
    """
    try:
        from jax._src import compilation_cache as cc
    except ImportError as e:
        logger.debug("no jax._src.compilation_cache (%s); wgpu executables are not cached", e)
        return
    original = getattr(cc, "is_cache_used", None)
    enabled = getattr(cc, "_is_cache_enabled", None)
    if original is None or enabled is None:
        logger.debug(
            "this JAX has no compilation_cache.is_cache_used/_is_cache_enabled; wgpu "
            "executables are not cached"
        )
        return
    if getattr(original, "_wgpu_opt_in", False):
        return

    def is_cache_used(backend):
        if getattr(backend, "platform", None) == PLATFORM:
            return bool(enabled())
        return original(backend)

    is_cache_used._wgpu_opt_in = True  # type: ignore[attr-defined]
    is_cache_used.__wrapped__ = original  # type: ignore[attr-defined]
    is_cache_used.__doc__ = original.__doc__
    cc.is_cache_used = is_cache_used


def _loaded_library():
    """The plugin library JAX loaded (the `wgpu` backend is created first if it is not yet)."""
    import ctypes

    import jax

    jax.devices(PLATFORM)  # the plugin's client, and so its device, exist from here on
    if _named_in_pjrt_env():
        spec = os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "")
        entries = (e.partition(os.path.pathsep) for e in spec.split(","))
        path = next(p for n, _, p in entries if n.strip() == PLATFORM)
    else:
        path = str(library_path())
    return ctypes.CDLL(path)  # the library JAX loaded: dlopen hands back the same one


def copy_bandwidth_gbs(nbytes: int = 1 << 28, runs: int = 10) -> float:
    """The device's own copy bandwidth, in GB/s of bytes read plus bytes written: `runs`
    `copy_buffer_to_buffer` of `nbytes` between two device buffers in one submission, on the
    plugin's own device. A memory-bound kernel's GB/s (bytes in plus bytes out over its time)
    is measured against it.

    Raises RuntimeError with the plugin's message when the measurement fails."""
    import ctypes

    fn = _loaded_library().wgpu_pjrt_copy_bandwidth_gbs
    fn.argtypes = [
        ctypes.c_uint64,
        ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_double),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    fn.restype = ctypes.c_int32
    out = ctypes.c_double(0.0)
    err = ctypes.create_string_buffer(1024)
    if fn(max(4, int(nbytes)), max(1, int(runs)), ctypes.byref(out), err, len(err)) != 0:
        raise RuntimeError(f"copy bandwidth: {err.value.decode(errors='replace')}")
    return float(out.value)


def raw_wgpu_floor_ms(runs: int = 200) -> float:
    """The raw-wgpu floor, in milliseconds: the median over `runs` of one empty compute
    dispatch plus a 4-byte buffer map round trip through wgpu alone, on the plugin's own
    device (the `wgpu` backend is created first if it is not yet). What a jitted call costs
    beyond this is the plugin's and JAX's per-call overhead.

    Raises RuntimeError with the plugin's message when the measurement fails."""
    import ctypes

    fn = _loaded_library().wgpu_pjrt_raw_wgpu_floor_ms
    fn.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int32
    out = ctypes.c_double(0.0)
    err = ctypes.create_string_buffer(1024)
    if fn(max(1, int(runs)), ctypes.byref(out), err, len(err)) != 0:
        raise RuntimeError(f"raw-wgpu floor: {err.value.decode(errors='replace')}")
    return float(out.value)


def initialize() -> None:
    """Registers the `wgpu` PJRT plugin and its JAX-side hooks (donation, lowering rules)."""
    from jax._src import xla_bridge

    _quiet_headless()

    from . import ann, callbacks, host_ops, lowerings

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
    _enable_compilation_cache()
    lowerings.register(PLATFORM)
    ann.register(PLATFORM)
    host_ops.register_solvers(PLATFORM)
    callbacks.register(PLATFORM)
