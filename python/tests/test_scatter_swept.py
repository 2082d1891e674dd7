"""Scatters with many update windows on CPU adapters run by blocks of the result
(`scatter::swept` in `src/codegen/op_kernels/scatter.rs`): narrow windows are bucketed by block
with one radix pass and each invocation walks its own bucket; windows of 8 elements or more are
walked by every block. Either way each element's updates apply one at a time in update order,
so results equal jax cpu's bit for bit for any update computation (sums included) where the
updates are the program's inputs (updates computed in the jit differ from cpu's by their own
rounding; the sorted path GPUs take folds long runs by chunks, so they compare to rounding).
Cases: random places, indices out of bounds, every update on one index (one bucket holds all), max, multiply,
set (the last update wins), integers, 64-bit floats, points of two indices (some out of
bounds), rows (windows of 8 and 128 elements), updates computed in the same jit, and a loop bound low enough that the
walks take many launches (`WGPU_HLO_MAX_LOOP`)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(11)
N = 1 << 17
X = RNG.standard_normal(N).astype(np.float32)
I = RNG.integers(0, N, N).astype(np.int32)
I_OOB = I.copy()
I_OOB[::7] = -3
I_OOB[::11] = N + 5
XI = RNG.integers(-1000, 1000, N).astype(np.int32)
ROWS = RNG.standard_normal((20000, 8)).astype(np.float32)
ROW_IDS = RNG.integers(0, 5000, 20000).astype(np.int32)
EMB = RNG.standard_normal((3000, 128)).astype(np.float32)
EMB_IDS = RNG.integers(0, 40000, 3000).astype(np.int32)

CASES = {
    "add": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (X, I)),
    "add_into_input": (lambda x, i, y: y.at[i].add(x), (X, I, X[::-1].copy())),
    "out_of_bounds": (lambda x, i: jnp.ones_like(x).at[i].add(x, mode="drop"), (X, I_OOB)),
    "one_index": (lambda x, i: jnp.zeros_like(x).at[i * 0 + 17].add(x), (X, I)),
    "max": (lambda x, i: jnp.full(N // 2, -1.0, jnp.float32).at[i // 2].max(x), (X, I)),
    "multiply": (lambda x, i: jnp.ones(N // 4, jnp.float32).at[i // 4].multiply(1 + x * 1e-2),
                 (X, I)),
    "set": (lambda x, i: jnp.zeros(N // 8, jnp.float32).at[i // 8].set(x), (X, I)),
    "int32": (lambda x, i: jnp.zeros_like(x).at[i % 5000].add(x), (XI, I)),
    "float64": (lambda x, i: jnp.zeros(N, jnp.float64).at[i].add(x.astype(jnp.float64) / 3),
                (X, I)),
    "points": (lambda x, i: jnp.zeros((300, 400), jnp.float32).at[i % 300, i % 400].add(x),
               (X, I)),
    "updates_fused": (lambda x, i: jnp.zeros_like(x).at[i].add(jnp.sin(x) * 2), (X, I)),
    "points_out_of_bounds": (
        lambda x, i: jnp.ones((300, 400), jnp.float32).at[i % 311 - 5, i % 401].add(x, mode="drop"),
        (X, I)),
    "int32_points": (lambda x, i: jnp.zeros((70, 90), jnp.int32).at[i % 70, i % 90].add(x),
                     (XI, I)),
    "rows_of_8": (lambda r, i: jnp.zeros((5000, 8), jnp.float32).at[i].add(r), (ROWS, ROW_IDS)),
    "embedding_gradient": (lambda e, i: jnp.zeros((40000, 128), jnp.float32).at[i].add(e),
                           (EMB, EMB_IDS)),
}


def run(f, args, device):
    # A new function object each time: JAX's cache would hand back an earlier executable.
    return np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put(args, device)))


def wgsl_of(dump):
    return "".join(open(p).read() for p in glob.glob(os.path.join(dump, "*.wgsl")))


# Updates computed in the jit: their own rounding differs from cpu's by an ulp here and there.
COMPUTED = {"float64", "multiply", "updates_fused"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_swept_scatter_matches_cpu(gpu, case, tmp_path, monkeypatch):
    f, args = CASES[case]
    # 32-bit integer sums fold through atomics otherwise (test_scatter_atomic.py).
    monkeypatch.setenv("WGPU_HLO_SCATTER_ATOMIC", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(f, args, gpu)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    want = run(f, args, jax.devices("cpu")[0])
    assert got.dtype == want.dtype and got.shape == want.shape
    # The sorted path (GPUs) folds long runs by chunks: sums associate differently.
    if case in COMPUTED or not cpu_kernel_class(gpu):
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=2e-5)
    else:
        np.testing.assert_array_equal(got, want)
    swept = "blocks of" in wgsl_of(str(tmp_path))
    assert swept == cpu_kernel_class(gpu), case


@pytest.mark.parametrize("case", ["add", "one_index", "embedding_gradient", "max"])
def test_walks_split_over_many_launches(gpu, case, tmp_path, monkeypatch):
    """A loop bound of 1000: 131072 windows take 140 and more walk launches, each updating the
    result of the one before in place (one bucket holds every window of `one_index`)."""
    if not cpu_kernel_class(gpu):
        pytest.skip("the swept scatter is for CPU adapters")
    f, args = CASES[case]
    monkeypatch.setenv("WGPU_HLO_MAX_LOOP", "1000")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(f, args, gpu)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    monkeypatch.delenv("WGPU_HLO_MAX_LOOP")
    assert "blocks of" in wgsl_of(str(tmp_path)), case
    want = run(f, args, jax.devices("cpu")[0])
    np.testing.assert_array_equal(got, want)
