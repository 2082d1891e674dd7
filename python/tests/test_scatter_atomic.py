"""Scatters of many windows into a 32-bit integer result whose update computation is one add,
maximum or minimum fold each update element in with a WGSL atomic (`scatter::atomic` in
`src/codegen/op_kernels/scatter.rs`). Integer addition (wrapping), maximum and minimum do not
depend on the order the atomics land in, so every result must equal jax cpu's bit for bit, on
every run: random places, indices out of bounds (dropped), every update on one index, sums
that wrap, uint32, windows of rows, points of two indices, updates computed in the same jit,
and segment maxima and minima. Few places and many updates keep the per-chunk partials on CPU
adapters (`privatized`, bincount), which are checked here too."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(23)
N = 1 << 18
I = RNG.integers(0, N, N).astype(np.int32)
I_OOB = I.copy()
I_OOB[::7] = -3
I_OOB[::11] = N + 5
XI = RNG.integers(-1000, 1000, N).astype(np.int32)
BIG = RNG.integers(2**30, 2**31 - 1, N).astype(np.int32)
ROWS = RNG.integers(-50, 50, (30000, 6)).astype(np.int32)
ROW_IDS = RNG.integers(0, 4000, 30000).astype(np.int32)

CASES = {
    "add": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (XI, I)),
    "add_into_input": (lambda x, i, y: y.at[i].add(x), (XI, I, XI[::-1].copy())),
    "out_of_bounds": (lambda x, i: jnp.ones_like(x).at[i].add(x, mode="drop"), (XI, I_OOB)),
    "one_index": (lambda x, i: jnp.zeros_like(x).at[i * 0 + 17].add(x), (XI, I)),
    "wrapping": (lambda x, i: jnp.zeros(1000, jnp.int32).at[i % 1000].add(x), (BIG, I)),
    "uint32": (lambda x, i: jnp.zeros(N, jnp.uint32).at[i].add(x.astype(jnp.uint32)), (XI, I)),
    "max": (lambda x, i: jnp.full(N // 2, -7, jnp.int32).at[i // 2].max(x), (XI, I)),
    "min_uint32": (lambda x, i: jnp.full(N // 3, 2**32 - 1, jnp.uint32).at[i // 3].min(
        x.astype(jnp.uint32)), (XI, I)),
    "rows": (lambda r, i: jnp.zeros((4000, 6), jnp.int32).at[i].add(r), (ROWS, ROW_IDS)),
    "points": (lambda x, i: jnp.zeros((300, 500), jnp.int32).at[i % 300, i % 500].add(x),
               (XI, I)),
    "updates_fused": (lambda x, i: jnp.zeros_like(x).at[i].add(x * 3 - (x >> 2)), (XI, I)),
    "segment_max": (lambda x, i: jax.ops.segment_max(x, i % 5000, 5000), (XI, I)),
    "segment_min": (lambda x, i: jax.ops.segment_min(x, i % 70000, 70000), (XI, I)),
    "bincount": (lambda x, i: jnp.bincount(i % 256, length=256), (XI, I)),
    "bincount_wide": (lambda x, i: jnp.bincount(i % 100000, length=100000), (XI, I)),
}


# Few places, many updates: the per-chunk partials on CPU adapters.
PRIVATE = {"bincount", "wrapping"}


def run(f, args, device):
    # A new function object each time: JAX's cache would hand back an earlier executable.
    return np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put(args, device)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_atomic_scatter_equals_cpu(gpu, case, tmp_path, monkeypatch):
    f, args = CASES[case]
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = [run(f, args, gpu) for _ in range(2)]
    monkeypatch.delenv("WGPU_HLO_DUMP")
    want = run(f, args, jax.devices("cpu")[0])
    for g in got:
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
    wgsl = "".join(open(p).read() for p in glob.glob(os.path.join(str(tmp_path), "*.wgsl")))
    atomic = any(f"{a}(&out0" in wgsl for a in ("atomicAdd", "atomicMax", "atomicMin"))
    assert atomic == (case not in PRIVATE or not cpu_kernel_class(gpu)), case


def test_atomic_scatter_turns_off(gpu, tmp_path, monkeypatch):
    """`WGPU_HLO_SCATTER_ATOMIC=0` keeps the sorting paths, with the same result."""
    f, args = CASES["add"]
    monkeypatch.setenv("WGPU_HLO_SCATTER_ATOMIC", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(f, args, gpu)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    wgsl = "".join(open(p).read() for p in glob.glob(os.path.join(str(tmp_path), "*.wgsl")))
    assert "atomicAdd(&out0" not in wgsl
    np.testing.assert_array_equal(got, run(f, args, jax.devices("cpu")[0]))
