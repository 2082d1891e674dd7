"""Reductions with too few outputs to fill the device (a full `sum`, a few long rows) run
as partials over chunks of each row and a fold. On CPU adapters the partials stage reads
each chunk as a row of the subgroup row reduction (lanes over consecutive elements, four at
a time, combined through shuffles): it used a workgroup of 256 invocations per chunk, one
element each, combined through workgroup memory and barriers, which lavapipe emulates at a
high cost (`jnp.sum` of 2^24 elements: 31 ms, now 10; jax cpu 3)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from conftest import compare_with_cpu, cpu_kernel_class

CPU = jax.devices("cpu")[0]


def data(shape, seed=3):
    return (np.random.default_rng(seed).standard_normal(shape) + 1.5).astype(np.float32)


SIZES = [(1 << 22,), (3 * (1 << 20) + 5,), (4, 1 << 20), (3, 700001), (2, 3, 262144)]


@pytest.mark.parametrize("shape", SIZES, ids=str)
@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "mean_square", "int_sum"])
def test_few_long_rows(gpu, shape, op):
    x = data(shape)
    axis = None if len(shape) == 1 else -1
    if op == "int_sum":
        x = (x * 7).astype(np.int32)
    f = {
        "sum": lambda x: jnp.sum(x, axis),
        "max": lambda x: jnp.max(x, axis),
        "min": lambda x: jnp.min(x, axis),
        "argmax": lambda x: jnp.argmax(x, axis),
        "mean_square": lambda x: jnp.mean(x * x, axis),
        "int_sum": lambda x: jnp.sum(x, axis),
    }[op]
    compare_with_cpu(gpu, f, x, tol=2e-6)


def test_full_sum_partials_are_subgroup_rows(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("the subgroup row reduction of split stages is the CPU adapter class's")
    x = data((1 << 22,))
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, jnp.sum, x, tol=1e-6)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = [open(p).readline() for p in sorted(glob.glob(os.path.join(tmp_path, "*.wgsl")))]
    partials = [h for h in heads if "_partials" in h]
    assert partials and "subgroup per row" in partials[0], heads


@pytest.mark.parametrize("max_loop", [None, "1024", "64"])
def test_folds_of_many_partials_sum_with_compensation(gpu, monkeypatch, max_loop):
    # The folds of an f32 sum's partials add them with compensation (Neumaier): a sequential
    # fold of thousands of partials rounded at the scale of the total at every step. The sum
    # of 2^22 values around 1 was 1.4e-7 to 2e-7 off (1-2 ulp; 8 ulp for 2^26 values over the
    # binding limit), jax cpu 4e-8; now within half an ulp. A low loop budget
    # (`WGPU_HLO_MAX_LOOP`) makes tens of thousands of partials and several fold stages.
    if max_loop:
        monkeypatch.setenv("WGPU_HLO_MAX_LOOP", max_loop)
    rng = np.random.default_rng(3)
    x = (1 + 0.5 * rng.standard_normal(1 << 22)).astype(np.float32)
    exact = x.astype(np.float64).sum()
    got = float(jax.jit(jnp.sum)(jax.device_put(x, gpu)))
    assert abs(got - exact) <= 6e-8 * abs(exact), (got, exact)
    # What the compensation must not change: infinities, NaN, overflow and the sign of zero.
    for special, want in [
        (lambda v: v.at[12345].set(np.inf), np.inf),
        (lambda v: v.at[7].set(np.inf).at[3000000].set(-np.inf), np.nan),
        (lambda v: v.at[100].set(np.nan), np.nan),
        (lambda v: np.full_like(v, 3e38), np.inf),
        (lambda v: np.full_like(v, -0.0), -0.0),
        (lambda v: np.full_like(v, 0.0), 0.0),
    ]:
        v = np.asarray(special(jax.device_put(x, CPU)))
        got = np.float32(jax.jit(jnp.sum)(jax.device_put(v, gpu)))
        cpu = np.float32(jax.jit(jnp.sum)(jax.device_put(v, CPU)))
        assert np.array_equal(got, want, equal_nan=True), (got, want)
        assert np.signbit(got) == np.signbit(cpu) or np.isnan(want)
