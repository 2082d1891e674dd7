"""Scatters of many updates into a small result (segment sums, maxima and minima, integer
products, histograms, bincounts): on CPU adapters each chunk of updates is folded into its own
partial result filled with the computation's identity and the partials are folded
(`scatter::privatized`); elsewhere the windows are sorted. Results against jax cpu: integers,
maxima and minima exactly, float sums to rounding (they associate by chunk). Maxima and minima
of floats are also the same bits as the one-pass plain kernel's, NaN payloads and zeros' signs
included. Out-of-range indices are dropped as on cpu, windows of several elements and points of
two indices are placed as on cpu, and the dump names the kernels that ran."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy

N = 1 << 20


def data():
    r = np.random.default_rng(3)
    x = r.standard_normal(N).astype(np.float32)
    i = r.integers(0, N, size=N).astype(np.int32)
    return x, i


CASES = {
    "segment_sum": lambda x, i: jax.ops.segment_sum(x, i % 1000, 1000),
    "segment_sum int": lambda x, i: jax.ops.segment_sum((x * 100).astype(jnp.int32), i % 1000, 1000),
    "segment_sum uint": lambda x, i: jax.ops.segment_sum((jnp.abs(x) * 100).astype(jnp.uint32), i % 777, 777),
    "out of range dropped": lambda x, i: jax.ops.segment_sum(x, i % 4200 - 50, 4096),
    "bincount": lambda x, i: jnp.bincount(i % 256, length=256),
    "histogram weights": lambda x, i: jnp.zeros(100).at[jnp.clip((x * 20 + 50).astype(jnp.int32), 0, 99)].add(x * x),
    "into a nonzero input": lambda x, i: jnp.linspace(-1, 1, 2048).at[i % 2048].add(x),
    "rows of four": lambda x, i: jnp.zeros((256, 4)).at[i[: N // 4] % 256].add(x.reshape(-1, 4)),
    "points of two indices": lambda x, i: jnp.ones((32, 48)).at[i % 32, (i // 32) % 48].add(x),
    "segment_mean": lambda x, i: jax.ops.segment_sum(x, i % 300, 300) / jnp.maximum(
        jax.ops.segment_sum(jnp.ones_like(x), i % 300, 300), 1),
    "segment_max": lambda x, i: jax.ops.segment_max(x, i % 1000, 1000),
    "segment_min": lambda x, i: jax.ops.segment_min(x, i % 1000, 1000),
    "segment_max int": lambda x, i: jax.ops.segment_max((x * 1000).astype(jnp.int32), i % 999, 999),
    "segment_min uint": lambda x, i: jax.ops.segment_min((jnp.abs(x) * 100).astype(jnp.uint32), i % 500, 500),
    "segment_prod int": lambda x, i: jax.ops.segment_prod(i % 5 + 1, i % 1000, 1000),
    "segment_prod uint wraps": lambda x, i: jax.ops.segment_prod((i % 9).astype(jnp.uint32) + 1, i % 300, 300),
    "max into a nonzero input": lambda x, i: ((jnp.arange(2048.0) - 1024) / 256).at[i % 2048].max(x),
    "min rows of four": lambda x, i: jnp.zeros((256, 4)).at[i[: N // 4] % 256].min(x.reshape(-1, 4)),
    "segment_max of an empty segment": lambda x, i: jax.ops.segment_max(x, i % 600, 601),
}


@pytest.mark.parametrize("name", list(CASES))
def test_many_updates_into_few_elements(gpu, name):
    f = jax.jit(CASES[name])
    x, i = data()
    got = np.asarray(f(*jax.device_put((x, i), gpu)))
    want = np.asarray(f(*jax.device_put((x, i), jax.devices("cpu")[0])))
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.integer) or "max" in name or "min" in name:
        np.testing.assert_array_equal(got, want)
    else:
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=5e-6)


def test_segment_sum_runs_privatized(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    x, i = data()
    # A function of its own: one compiled before would come from JAX's cache, undumped.
    f = jax.jit(lambda x, i: jax.ops.segment_sum(x * 2.0, i % 500, 500))
    jax.block_until_ready(f(*jax.device_put((x, i), gpu)))
    names = " ".join(os.path.basename(p) for p in glob.glob(os.path.join(tmp_path, "*.wgsl")))
    if cpu_kernel_class(gpu):
        assert "_private" in names and "radix" not in names, names
    else:
        assert "_private" not in names, names


@pytest.mark.parametrize("n", [1_000_003, 262_147, 65_541])
def test_counts_not_a_multiple_of_four(gpu, n):
    """Chunks read their windows' indices and updates four at a time (CPU adapters): counts
    that leave a last group part-filled, in the last chunk only, still add every window once,
    and drop the out-of-range ones."""
    r = np.random.default_rng(n)
    x = r.standard_normal(n).astype(np.float32)
    i = r.integers(-40, 1040, size=n).astype(np.int32)
    f = jax.jit(lambda x, i: (
        jax.ops.segment_sum((x * 100).astype(jnp.int32), i, 1000),
        jnp.bincount(jnp.abs(i) % 300, length=300),
        jax.ops.segment_sum(x, i, 1000),
    ))
    got = [np.asarray(v) for v in f(*jax.device_put((x, i), gpu))]
    want = [np.asarray(v) for v in f(*jax.device_put((x, i), jax.devices("cpu")[0]))]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    scale = float(np.max(np.abs(want[2])))
    np.testing.assert_allclose(got[2] / scale, want[2] / scale, rtol=0, atol=5e-6)


def test_private_chunks_read_groups_of_four(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("the privatized scatter serves CPU adapters")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    x, i = data()
    f = jax.jit(lambda x, i: jax.ops.segment_sum(x * 3.0, i % 700, 700))
    jax.block_until_ready(f(*jax.device_put((x, i), gpu)))
    private = [p for p in glob.glob(os.path.join(tmp_path, "*.wgsl")) if p.endswith("_private.wgsl")]
    assert private
    text = open(private[0]).read()
    assert "read four at a time" in text.splitlines()[0], text[:300]


def nan_zero_data(n=N, seed=11):
    """Floats with NaNs of distinct payloads (some negative) and zeros of both signs."""
    r = np.random.default_rng(seed)
    x = r.standard_normal(n).astype(np.float32)
    bits = x.view(np.uint32)
    at = r.choice(n, 3000, replace=False)
    bits[at] = (0x7FC00000 + np.arange(1, 3001, dtype=np.uint32)) | np.where(
        np.arange(3000) % 3 == 0, np.uint32(0x80000000), np.uint32(0))
    x[r.choice(n, 5000, replace=False)] = 0.0
    x[r.choice(n, 5000, replace=False)] = -0.0
    return x, r.integers(0, 1000, size=n).astype(np.int32)


FOLDS = {
    "segment_max": lambda x, i: jax.ops.segment_max(x, i, 1000),
    "segment_min": lambda x, i: jax.ops.segment_min(x, i, 1000),
    # Segments of only zeros and NaNs: the sign of a zero and which NaN is kept show.
    "max of zeros and NaNs": lambda x, i: jnp.zeros(40).at[i % 40].max(
        jnp.where(jnp.isnan(x) | (x == 0), x, 0.0)),
    "min of zeros and NaNs": lambda x, i: jnp.full(40, 0.0).at[i % 40].min(
        jnp.where(jnp.isnan(x) | (x == 0), x, -0.0)),
}


@pytest.mark.parametrize("name", list(FOLDS))
def test_float_maxima_keep_the_plain_kernels_bits(gpu, name, monkeypatch):
    """A maximum or minimum folded by chunks is the one-pass fold's, bit for bit: the sign of
    a zero (+0 above -0) and the NaN the update order keeps. Against the same scatter compiled
    with `WGPU_HLO_SCATTER_PRIVATE=0` (the windows walked in order), and against jax cpu up to
    NaN payloads."""
    x, i = nan_zero_data()
    args = jax.device_put((x, i), gpu)
    got = np.asarray(jax.jit(FOLDS[name])(*args))
    monkeypatch.setenv("WGPU_HLO_SCATTER_PRIVATE", "0")
    # A function of its own, so that it compiles again with the variable set.
    plain = np.asarray(jax.jit(lambda x, i: FOLDS[name](x, i))(*args))
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    want = np.asarray(jax.jit(FOLDS[name])(*jax.device_put((x, i), jax.devices("cpu")[0])))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))


def test_segment_max_runs_privatized(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    x, i = data()
    f = jax.jit(lambda x, i: (jax.ops.segment_max(x * 2.0, i % 500, 500),
                              jax.ops.segment_min(i * 3, i % 700, 700)))
    jax.block_until_ready(f(*jax.device_put((x, i), gpu)))
    names = " ".join(os.path.basename(p) for p in glob.glob(os.path.join(tmp_path, "*.wgsl")))
    if cpu_kernel_class(gpu):
        assert names.count("_private") == 2 and "_walk" not in names, names
    else:
        assert "_private" not in names, names
