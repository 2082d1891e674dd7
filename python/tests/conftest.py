"""Shared fixtures of the JAX tests."""

from __future__ import annotations

import glob
import os

import pytest


@pytest.fixture(scope="module")
def gpu():
    """The `wgpu` device (the suite is skipped without the plugin)."""
    # Imported here so that the framework tests (test_torch_xla.py, test_tensorflow.py) run in
    # venvs without jax.
    jax = pytest.importorskip("jax")
    try:
        return jax.devices("wgpu")[0]
    except RuntimeError as e:  # pragma: no cover - the suite needs the plugin
        pytest.skip(f"no wgpu device: {e}")


def cpu_kernel_class(gpu) -> bool:
    """True when the plugin picks CPU-adapter kernels for `gpu`: `WGPU_HLO_ADAPTER_CLASS`
    (cpu/gpu) if set, else whether the adapter is a CPU rasterizer (llvmpipe)."""
    import os

    cls = os.environ.get("WGPU_HLO_ADAPTER_CLASS", "").strip().lower()
    if cls in ("cpu", "gpu"):
        return cls == "cpu"
    return "llvmpipe" in str(getattr(gpu, "device_kind", "")).lower()


def compare_with_cpu(gpu, f, *args, tol):
    """`jit(f)` on `gpu` against jax cpu, leaf by leaf: same shapes and dtypes, values within
    `tol` (relative and absolute)."""
    import jax
    import numpy as np

    def on(device):
        put = [jax.device_put(a, device) for a in args]
        return jax.tree_util.tree_map(np.asarray, jax.jit(f)(*put))

    def check(a, b):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

    jax.tree_util.tree_map(check, on(gpu), on(jax.devices("cpu")[0]))


def dumped_kernels(dump_dir):
    """The kernels of a dump (`WGPU_HLO_DUMP`: one `.wgsl` per kernel), less those that only
    transpose a dot's operand: on CPU adapters large dots read operands written transposed
    (`passes::dot_layout`), a kernel apart from the dot and its epilogue."""
    n = 0
    for path in glob.glob(os.path.join(dump_dir, "*.wgsl")):
        with open(path) as f:
            n += "// fuses: stablehlo.transpose\n" not in f.read()
    return n
