"""PyTorch/XLA device plugin for wgpu: `PJRT_DEVICE=WGPU` runs PyTorch/XLA on `libpjrt_wgpu.so`.

torch_xla finds this module through the `torch_xla.plugins` entry point (`wgpu`, upper-cased to
the device type `WGPU`) and instantiates `WgpuPlugin`, whose `library_path()` is the same plugin
library the JAX package ships. The module imports neither torch nor torch_xla until `WgpuPlugin`
is asked for, so it stays importable (and its helpers usable) without them.

Programs: torch_xla sends HLO protos (`PJRT_Program.format = "hlo"`) unless
`XLA_STABLEHLO_COMPILE=1`, with which it converts them to StableHLO and sends MLIR bytecode.
StableHLO is the plugin's first and best-tested input, so the plugin sets
`XLA_STABLEHLO_COMPILE=1` unless the variable is already set; `XLA_STABLEHLO_COMPILE=0` sends HLO
protos instead (this needs a library built with the HLO proto frontend).
"""

from __future__ import annotations

import logging
import os
import pathlib

logger = logging.getLogger(__name__)

DEVICE_TYPE = "WGPU"
"""The torch_xla device type (`PJRT_DEVICE=WGPU`)."""


def library_path() -> pathlib.Path:
    """The plugin library, found as the JAX package finds it (`WGPU_PJRT_LIBRARY_PATH` first)."""
    from jax_plugins.wgpu import library_path as jax_library_path

    return jax_library_path()


def _make_plugin_class():
    from torch_xla.experimental import plugins

    class WgpuPlugin(plugins.DevicePlugin):
        """One wgpu adapter, one local process."""

        def __init__(self):
            super().__init__()
            # torch_xla reads the variable when it compiles, so setting it here (before the
            # first compile) takes effect.
            os.environ.setdefault("XLA_STABLEHLO_COMPILE", "1")

        def library_path(self) -> str:
            path = library_path()
            if not path.exists():
                raise FileNotFoundError(
                    f"{path} does not exist: reinstall jax-wgpu (pip install ./python builds it) "
                    "or set WGPU_PJRT_LIBRARY_PATH"
                )
            return str(path)

        def physical_chip_count(self) -> int:
            return 1

        def client_create_options(self) -> dict:
            return {}

        def requires_xla_coordinator(self) -> bool:
            return False

    return WgpuPlugin


def __getattr__(name: str):
    # PEP 562: `WgpuPlugin` is built on first access, which is when torch_xla loads the entry
    # point; plain `import torch_xla_wgpu` needs no torch.
    if name == "WgpuPlugin":
        cls = _make_plugin_class()
        globals()["WgpuPlugin"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
