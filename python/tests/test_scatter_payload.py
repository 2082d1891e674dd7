"""Sorted scatters of one-element windows over every dimension of a 32-bit result sort the
updates themselves with their indices (`carries_updates` in
`src/codegen/op_kernels/scatter.rs`), then fold each run from the sorted values instead of
gathering every update through the permutation. Each run folds in the original update order
either way, so results must equal those with the payload off (`WGPU_HLO_SCATTER_PAYLOAD=0`) to
the bit, and jax cpu's to rounding: random places, indices out of bounds (dropped), long runs
of one index (the chunked fold), max and multiply, int32 and uint32, two-dimensional points,
and updates computed in the same jit. CPU adapters scatter by blocks of the result instead
(`swept`, tested in test_scatter_swept.py), and 32-bit integer sums, maxima and minima fold
through atomics (`atomic`, tested in test_scatter_atomic.py), so these tests turn both off
(`WGPU_HLO_SCATTER_SWEEP=0`, `WGPU_HLO_SCATTER_ATOMIC=0`)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(3)
N = 1 << 17
X = RNG.standard_normal(N).astype(np.float32)
I = RNG.integers(0, N, N).astype(np.int32)
I_OOB = I.copy()
I_OOB[::7] = -3
I_OOB[::11] = N + 5
XI = RNG.integers(-100, 100, N).astype(np.int32)
FEW_I = RNG.integers(0, 300, 60000).astype(np.int32)
R = RNG.integers(0, 300, 50000).astype(np.int32)
Q = RNG.integers(0, 200, 50000).astype(np.int32)

CASES = {
    "add_random": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (X, I)),
    "add_out_of_bounds": (lambda x, i: jnp.ones_like(x).at[i].add(x, mode="drop"), (X, I_OOB)),
    # 60000 windows into 300 places: runs of ~200 and past one invocation's loop bound.
    "add_long_runs": (lambda x, i: jnp.zeros(500, jnp.float32).at[i].add(x),
                      (X[:60000], FEW_I)),
    "max": (lambda x, i: jnp.full(20000, -1.0, jnp.float32).at[i % 20000].max(x),
            (X[:30000], I[:30000])),
    "multiply": (lambda x, i: jnp.ones(20000, jnp.float32).at[i % 20000].multiply(1 + x * 1e-3),
                 (X[:30000], I[:30000])),
    "int32": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (XI, I)),
    "uint32": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (XI.astype(np.uint32), I)),
    "two_d": (lambda v, r, q: jnp.zeros((300, 200), jnp.float32).at[r, q].add(v),
              (X[:50000], R, Q)),
    "updates_fused": (lambda x, i: jnp.zeros_like(x).at[i].add(jnp.sin(x) * 2), (X, I)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_payload_sort_matches_permutation_sort(gpu, case, tmp_path, monkeypatch):
    f, args = CASES[case]
    got = []
    for payload in ("1", "0"):
        dump = str(tmp_path / f"payload{payload}")
        monkeypatch.setenv("WGPU_HLO_DUMP", dump)
        monkeypatch.setenv("WGPU_HLO_SCATTER_PAYLOAD", payload)
        monkeypatch.setenv("WGPU_HLO_SCATTER_SWEEP", "0")
        monkeypatch.setenv("WGPU_HLO_SCATTER_ATOMIC", "0")
        # A new function object each time: JAX's cache would hand back the first executable.
        got.append(np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu))))
        monkeypatch.delenv("WGPU_HLO_DUMP")
        monkeypatch.delenv("WGPU_HLO_SCATTER_PAYLOAD")
        wgsl = "".join(open(p).read() for p in glob.glob(os.path.join(dump, "*.wgsl")))
        assert ("updates sorted with their indices" in wgsl) == (payload == "1"), case
    np.testing.assert_array_equal(got[0], got[1])
    want = np.asarray(jax.jit(f)(*jax.device_put(args, jax.devices("cpu")[0])))
    assert got[0].dtype == want.dtype
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got[0], want)


SEG_X = RNG.standard_normal((100000, 4)).astype(np.float32)
SEG_IDS = RNG.integers(0, 1000, 100000).astype(np.int32)

MONOIDS = {
    "segment_max": lambda x, i: jax.ops.segment_max(x[:, 0], i, 1000),
    "segment_min": lambda x, i: jax.ops.segment_min(x[:, 0], i, 1000),
    "segment_prod": lambda x, i: jax.ops.segment_prod(1 + x[:, 0] * 1e-3, i, 1000),
    "segment_max_rows": lambda x, i: jax.ops.segment_max(x, i, 1000),
    "segment_max_int": lambda x, i: jax.ops.segment_max((x[:, 0] * 100).astype(jnp.int32), i,
                                                        1000),
    "segment_min_uint": lambda x, i: jax.ops.segment_min(
        (jnp.abs(x[:, 0]) * 100).astype(jnp.uint32), i, 1000),
}


@pytest.mark.parametrize("case", sorted(MONOIDS))
@pytest.mark.parametrize("payload", ["1", "0"])
def test_long_runs_of_max_min_multiply(gpu, case, payload, monkeypatch):
    """100k windows into 1000 places: runs pass one invocation's loop bound, so they fold by
    chunks whose partials start from the computation's identity (`monoid_identity`); these
    were refused with RESOURCE_EXHAUSTED on lavapipe before (only adds were chunked)."""
    f = MONOIDS[case]
    monkeypatch.setenv("WGPU_HLO_SCATTER_PAYLOAD", payload)
    monkeypatch.setenv("WGPU_HLO_SCATTER_SWEEP", "0")
    monkeypatch.setenv("WGPU_HLO_SCATTER_ATOMIC", "0")
    got = np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put((SEG_X, SEG_IDS), gpu)))
    want = np.asarray(jax.jit(f)(*jax.device_put((SEG_X, SEG_IDS), jax.devices("cpu")[0])))
    assert got.dtype == want.dtype and got.shape == want.shape
    if case == "segment_prod":
        np.testing.assert_allclose(got, want, rtol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


SET_X = RNG.standard_normal(200000).astype(np.float32)
SET_I = RNG.integers(0, 1000, 200000).astype(np.int32)

SETS = {
    "spread": lambda x, i: jnp.zeros(100000).at[i * 100].set(x),
    "duplicates": lambda x, i: jnp.zeros(1000).at[i].set(x),
    "rows": lambda x, i: jnp.zeros((1000, 4)).at[i].set(jnp.stack([x, -x, x * 2, x + 1], 1)),
    "few": lambda x, i: jnp.zeros(50).at[i[:300] % 50].set(x[:300]),
    "int32": lambda x, i: jnp.zeros(1000, jnp.int32).at[i].set(
        i * 7 + jnp.arange(200000, dtype=jnp.int32)),
    "points": lambda x, i: jnp.zeros((100, 10)).at[i % 100, i % 10].set(x),
    "out_of_bounds": lambda x, i: jnp.ones(900).at[i].set(x, mode="drop"),
}


@pytest.mark.parametrize("case", sorted(SETS))
@pytest.mark.parametrize("payload", ["1", "0"])
def test_set_takes_the_last_update(gpu, case, payload, monkeypatch):
    """`x.at[i].set(v)` with 200k updates, most indices repeated: the last update of each index
    wins, as on cpu, bit for bit; each run is written by its last window, with no walk, so
    there is no loop bound to pass (such sets were refused with RESOURCE_EXHAUSTED before)."""
    f = SETS[case]
    monkeypatch.setenv("WGPU_HLO_SCATTER_PAYLOAD", payload)
    monkeypatch.setenv("WGPU_HLO_SCATTER_SWEEP", "0")
    monkeypatch.setenv("WGPU_HLO_SCATTER_ATOMIC", "0")
    got = np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put((SET_X, SET_I), gpu)))
    want = np.asarray(jax.jit(f)(*jax.device_put((SET_X, SET_I), jax.devices("cpu")[0])))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


NARROW_X = RNG.standard_normal(100000)
NARROW_IDS = RNG.integers(0, 1000, 100000).astype(np.int32)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8", "int16", "uint8", "bool"])
@pytest.mark.parametrize("op", ["add", "max", "min", "set"])
def test_narrow_scatters_run_in_32_bits(gpu, dtype, op):
    """100k updates into 1000 places of a narrow type (`passes::narrow_scatters`): these were
    refused with RESOURCE_EXHAUSTED on lavapipe before (runs past the loop bound, and narrow
    results cannot fold in place). Maxima, minima, sets and integer sums (wrapping) give cpu's
    bits; float sums are rounded once from f32, closer to the exact sums than cpu's rounding
    after every update."""
    if dtype == "bool" and op != "set":
        pytest.skip("booleans widen only for sets")
    dt = jnp.dtype(dtype)
    floating = jnp.issubdtype(dt, jnp.floating)
    if floating:
        x = NARROW_X.astype(dt)
    elif dt.kind == "b":
        x = NARROW_X > 0.3
    else:
        x = (NARROW_X * 60).astype(np.int64).astype(dt)
    fs = {
        "add": lambda v, i: jax.ops.segment_sum(v, i, 1000),
        "max": lambda v, i: jax.ops.segment_max(v, i, 1000),
        "min": lambda v, i: jax.ops.segment_min(v, i, 1000),
        "set": lambda v, i: jnp.zeros(1000, v.dtype).at[i].set(v),
    }
    f = fs[op]
    got = np.asarray(jax.jit(f)(*jax.device_put((x, NARROW_IDS), gpu)))
    want = np.asarray(jax.jit(f)(*jax.device_put((x, NARROW_IDS), jax.devices("cpu")[0])))
    assert got.dtype == want.dtype
    if op == "add" and floating:
        exact = np.zeros(1000)
        np.add.at(exact, NARROW_IDS, x.astype(np.float64))
        err = np.abs(got.astype(np.float64) - exact)
        # One rounding of the f32 sum to the narrow type.
        assert (err <= np.abs(exact) * float(jnp.finfo(dt).eps) + 1e-6).all()
        assert err.max() <= np.abs(want.astype(np.float64) - exact).max()
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float64", "int64", "uint64"])
@pytest.mark.parametrize("op", ["add", "max", "min", "prod"])
def test_long_runs_of_64_bit_types(gpu, dtype, op):
    """The same chunked folds for 64-bit results (where the adapter has f64 / i64): 100k
    updates into 1000 places; max/min/integer results equal jax cpu's bits."""
    fs = {
        "add": lambda v, i: jax.ops.segment_sum(v, i, 1000),
        "max": lambda v, i: jax.ops.segment_max(v, i, 1000),
        "min": lambda v, i: jax.ops.segment_min(v, i, 1000),
        "prod": lambda v, i: jax.ops.segment_prod(
            v % 3 + 1 if jnp.issubdtype(v.dtype, jnp.integer) else 1 + v * 1e-3, i, 1000),
    }
    with jax.enable_x64(True):
        dt = jnp.dtype(dtype)
        x = NARROW_X.astype(dt) if dt.kind == "f" else (np.abs(NARROW_X) * 1e12).astype(dt)
        f = fs[op]
        try:
            got = np.asarray(jax.jit(f)(*jax.device_put((x, NARROW_IDS), gpu)))
        except Exception as e:  # an adapter without SHADER_F64 / SHADER_INT64
            if "is not supported on adapter" in str(e):
                pytest.skip(str(e)[:200])
            raise
        want = np.asarray(jax.jit(f)(*jax.device_put((x, NARROW_IDS), jax.devices("cpu")[0])))
    assert got.dtype == want.dtype
    if dt.kind == "f" and op in ("add", "prod"):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)
