"""Scatter-adds of many updates into a small result (segment sums, histograms, bincounts): on
CPU adapters each chunk of updates is added into its own partial result and the partials are
folded (`scatter::privatized`); elsewhere the windows are sorted. Results against jax cpu:
integers exactly, floats to rounding (sums associate by chunk). Out-of-range indices are
dropped as on cpu, windows of several elements and points of two indices are placed as on
cpu, and the dump names the kernels that ran."""

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
}


@pytest.mark.parametrize("name", list(CASES))
def test_many_updates_into_few_elements(gpu, name):
    f = jax.jit(CASES[name])
    x, i = data()
    got = np.asarray(f(*jax.device_put((x, i), gpu)))
    want = np.asarray(f(*jax.device_put((x, i), jax.devices("cpu")[0])))
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.integer):
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
