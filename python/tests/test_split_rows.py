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
