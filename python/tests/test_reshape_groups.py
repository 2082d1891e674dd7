"""Reshapes inside fused kernels read their operand dimension group by dimension group
(`codegen::expr::reshape_groups`): a split dimension is a quotient and remainder, merged ones a
sum of products, others pass through. Chains of reshapes, broadcasts, transposes and slices
in one kernel against jax cpu, over shapes with dimensions of 1, groups that only line up
together ([6, 4] as [4, 6]), innermost dimensions that are and are not multiples of 4."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from conftest import compare_with_cpu  # noqa: E402


def arr(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def repeat2(x, axes):
    for a in axes:
        x = jnp.repeat(x, 2, axis=a)
    return x


CASES = {
    "repeat along two dims": (lambda x, y: jnp.sin(repeat2(x, (1, 2))) * y, (arr(4, 7, 9, 12), arr(4, 14, 18, 12))),
    "repeat, odd channels": (lambda x, y: repeat2(x, (1, 2)) + y, (arr(3, 5, 6, 3), arr(3, 10, 12, 3))),
    "repeat the innermost": (lambda x, y: repeat2(x, (2,)) - y, (arr(8, 5, 6), arr(8, 5, 12))),
    "split and merge": (lambda x: jnp.exp(x.reshape(6, 4, 5, 2)).reshape(24, 10) * 2.0, (arr(2, 3, 4, 10),)),
    "[6, 4] as [4, 6]": (lambda x, y: x.reshape(4, 6) * y, (arr(6, 4), arr(4, 6))),
    "dims of 1": (lambda x, y: jnp.tanh(x.reshape(1, 6, 1, 4, 1)) + y, (arr(6, 4), arr(1, 6, 1, 4, 1))),
    "transpose then reshape": (lambda x, y: jnp.transpose(x, (1, 0, 2)).reshape(6, 40) * y, (arr(2, 3, 40), arr(6, 40))),
    "reshape then transpose": (lambda x, y: jnp.transpose(x.reshape(4, 6, 8), (2, 0, 1)) + y, (arr(24, 8), arr(8, 4, 6))),
    "broadcast into a merged dim": (lambda x: jnp.cos(jnp.broadcast_to(x[:, None, :], (16, 3, 20)).reshape(48, 20)), (arr(16, 20),)),
    "slice of a reshape": (lambda x: (x.reshape(10, 12, 8)[2:9:2, 1:11, :] * 3.0).reshape(4, 80), (arr(120, 8),)),
    "pixel shuffle": (
        lambda x: jnp.sin(x.reshape(2, 6, 6, 2, 2, 8).transpose(0, 1, 3, 2, 4, 5).reshape(2, 12, 12, 8)),
        (arr(2, 6, 6, 32),),
    ),
    "scalar to many": (lambda x, y: x.reshape(1, 1) * y, (arr(1), arr(5, 7))),
    "rows of 3": (lambda x, y: x.reshape(30, 3) + y.reshape(30, 3), (arr(90), arr(10, 9))),
    "big repeat": (lambda x, y: jnp.where(y > 0, repeat2(x, (1, 2)), 0.0), (arr(8, 56, 56, 64), arr(8, 112, 112, 64))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reshapes_in_fused_kernels_match_cpu(gpu, name):
    f, args = CASES[name]
    compare_with_cpu(gpu, f, *args, tol=1e-5)


def test_a_repeat_reads_each_element_by_two_quotients(gpu, tmp_path, monkeypatch):
    """`jnp.repeat` along two dimensions, as the gradient of a 2 x 2 average pool reads it:
    the kernel divides each of the two repeated coordinates by 2, not the whole offset by
    every extent of the operand."""
    import glob
    import os

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, lambda x: repeat2(x, (1, 2)), arr(4, 28, 28, 64), tol=0)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    (path,) = glob.glob(os.path.join(tmp_path, "*.wgsl"))
    wgsl = open(path).read()
    assert "/ 2u)" in wgsl and "/ 1568u" not in wgsl, wgsl
