"""Dots over long contractions as accurate as jax cpu's, and spread over the device.

One accumulator summing a long contraction in sequence loses precision as it grows. Before
the dot kernels summed in blocks, `X.T @ X` of a non-centred 100000 x 64 was 4.1e-6 off on
lavapipe (relative to the largest result) where jax cpu, which accumulates in blocks, was
3.3e-7; `a @ b` of two 2^20-vectors was 1.8e-6 off (cpu 3.9e-8) and ran in one team of 8
lanes. Each case here compares both backends' errors against a float64 reference in the
same process."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import jax

from conftest import cpu_kernel_class


def rel_err(got, want):
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


CASES = {
    # name: (operand shapes, function, offset added to the data: non-centred data makes the
    # sums large against each product, the hard case for sequential sums)
    "vdot_2^20": ([(1 << 20,), (1 << 20,)], lambda a, b: a @ b, 0.0),
    "gram_100000x64": ([(100000, 64)], lambda x: x.T @ x, 1.0),
    "skinny_8x200000x8": ([(8, 200000), (200000, 8)], lambda a, b: a @ b, 0.0),
    "matvec_64x100000": ([(64, 100000), (100000,)], lambda a, b: a @ b, 0.0),
    "vecmat_65536x256": ([(65536,), (65536, 256)], lambda a, b: a @ b, 0.0),
    "batched_8x64x20000x64": ([(8, 64, 20000), (8, 20000, 64)], lambda a, b: a @ b, 0.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_long_contraction_is_as_accurate_as_cpu(gpu, name):
    shapes, f, offset = CASES[name]
    rng = np.random.default_rng(7)
    args = [(rng.random(s) + offset).astype(np.float32) for s in shapes]
    want = f(*[a.astype(np.float64) for a in args])
    cpu = jax.devices("cpu")[0]
    errs = {}
    for dev in (gpu, cpu):
        got = jax.jit(f)(*[jax.device_put(a, dev) for a in args])
        errs[dev.platform] = rel_err(got, want)
    # The CPU adapter's kernels sum in blocks of 1024 steps (and in chunks spread over the
    # device); the GPU class's tiled kernels keep one accumulator per result over a chunk, as
    # GPU BLAS does, so they get a looser bound.
    factor = 3.0 if cpu_kernel_class(gpu) else 8.0
    assert errs["wgpu"] <= factor * errs["cpu"] + 2e-7, errs


@pytest.mark.parametrize("as_dot", [False, True])
def test_vector_dot_is_split_over_the_device(gpu, tmp_path, monkeypatch, as_dot):
    """A dot product of two long vectors runs as partial sums over chunks of the contraction
    and a fold, not in one team of lanes: as a reduction (`passes::vector_dots`), or kept a
    dot (`WGPU_HLO_VECTOR_DOTS=0`) by the matrix-vector kernel's partial sums."""
    if as_dot:
        monkeypatch.setenv("WGPU_HLO_VECTOR_DOTS", "0")
    n = 1 << 20
    a = np.linspace(-1, 1, n, dtype=np.float32)
    b = np.cos(np.arange(n, dtype=np.float32))
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = jax.jit(lambda x, y: x @ y)(jax.device_put(a, gpu), jax.device_put(b, gpu))
    got = float(got)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    want = float(a.astype(np.float64) @ b.astype(np.float64))
    assert abs(got - want) <= 1e-6 * float(np.abs(a.astype(np.float64) * b).sum())
    heads = [open(p).readline() for p in sorted(glob.glob(os.path.join(tmp_path, "*.wgsl")))]
    partials = [h for h in heads if "_partials" in h]
    if as_dot:
        assert partials and "matrix-vector" in partials[0] and "partial sums" in partials[0], heads
    else:
        assert partials and "reduce" in partials[0], heads
    assert any("_fold" in h for h in heads), heads
