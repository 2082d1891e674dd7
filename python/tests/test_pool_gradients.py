"""Pools whose windows equal their strides, and their gradients.

Forward (`passes::window_reductions`): windows that tile the input are a `reduce` over a
reshape, which fuses what computes the input (a ReLU). Gradients of average pools
(`passes::repeat_windows`): JAX writes them as a windowed sum over the gradient padded with
zeros between its elements, which holds one element per window and becomes a repeat of each
element. Each form against jax cpu (padding VALID and SAME, leftover rows, 1-D to 3-D pools,
max and sum, integers, bf16, two inputs, overlapping and gapped windows that stay windowed),
and the routes: no windowed reduction is left, and each fuses with its neighbour into one
kernel."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from conftest import compare_with_cpu  # noqa: E402


def arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def avg_pool(window, strides, padding):
    """flax's `nn.avg_pool`: a windowed sum over the spatial dimensions, divided by the size."""
    w = (1, *window, 1)
    s = (1, *strides, 1)
    size = float(np.prod(window))
    if not isinstance(padding, str):
        padding = ((0, 0), *padding, (0, 0))
    return lambda x: lax.reduce_window(x, np.array(0, x.dtype), lax.add, w, s, padding) / size


def pool_grad(window, strides, padding):
    pool = avg_pool(window, strides, padding)
    return jax.grad(lambda x: jnp.sum(jnp.sin(pool(x)) * 3.0))


def relu_pool_grad(window, strides, padding):
    """A pool of a ReLU, as in a CNN: its gradient selects the repeated gradient by the mask."""
    pool = avg_pool(window, strides, padding)
    return jax.grad(lambda x: jnp.sum(pool(jax.nn.relu(x)) ** 2))


CASES = {
    "2x2 VALID": (pool_grad((2, 2), (2, 2), "VALID"), arr(8, 28, 28, 16)),
    "2x2 VALID odd": (pool_grad((2, 2), (2, 2), "VALID"), arr(4, 15, 15, 4)),
    "2x2 SAME odd": (pool_grad((2, 2), (2, 2), "SAME"), arr(4, 15, 15, 4)),
    "3x3 VALID leftover": (pool_grad((3, 3), (3, 3), "VALID"), arr(4, 17, 17, 8)),
    "3x3 SAME": (pool_grad((3, 3), (3, 3), "SAME"), arr(4, 17, 16, 8)),
    "explicit padding": (pool_grad((2, 2), (2, 2), ((1, 0), (0, 1))), arr(2, 9, 10, 3)),
    "1x2 and 3x1": (pool_grad((1, 2), (1, 2), "VALID"), arr(2, 10, 12, 5)),
    "2x3 windows": (pool_grad((2, 3), (2, 3), "VALID"), arr(2, 10, 12, 5)),
    "ReLU then 2x2": (relu_pool_grad((2, 2), (2, 2), "VALID"), arr(8, 28, 28, 32)),
    "overlapping 3x3 stride 2": (pool_grad((3, 3), (2, 2), "VALID"), arr(4, 15, 15, 4)),
    "gapped 2x2 stride 3": (pool_grad((2, 2), (3, 3), "VALID"), arr(4, 15, 15, 4)),
    "1-D pool of 4": (
        jax.grad(lambda x: jnp.sum(lax.reduce_window(x, 0.0, lax.add, (1, 4, 1), (1, 4, 1), "VALID") ** 2)),
        arr(16, 1000, 3),
    ),
    "3-D pool 2x2x2": (
        jax.grad(
            lambda x: jnp.sum(jnp.cos(lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 2, 1), (1, 2, 2, 2, 1), "SAME")))
        ),
        arr(2, 9, 8, 7, 3),
    ),
    "bf16": (pool_grad((2, 2), (2, 2), "VALID"), arr(4, 16, 16, 8).astype(jnp.bfloat16)),
    "past the binding limit": (pool_grad((2, 2), (2, 2), "VALID"), arr(32, 128, 128, 64)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pool_gradients_match_cpu(gpu, name):
    f, x = CASES[name]
    compare_with_cpu(gpu, f, x, tol=2e-2 if "bf16" in name else 1e-5)


def test_flax_avg_pool_gradient_matches_cpu(gpu):
    nn = pytest.importorskip("flax.linen")
    x = arr(8, 28, 28, 8)
    f = jax.grad(lambda x: jnp.sum(jnp.tanh(nn.avg_pool(x, (2, 2), (2, 2)))))
    compare_with_cpu(gpu, f, x, tol=1e-5)


def wgsl_heads(path):
    return [open(p).read().split("\n", 2)[1] for p in glob.glob(os.path.join(path, "*.wgsl"))]


@pytest.mark.parametrize("off", [False, True])
def test_a_pools_gradient_is_a_repeat_fused_with_its_reader(gpu, tmp_path, monkeypatch, off):
    """The gradient of a 2x2 pool of a ReLU, given the pool's gradient: one kernel (the repeat,
    the mask and the select). It was a padded copy, a windowed sum and the select; with
    `WGPU_HLO_REPEAT_WINDOWS=0` the windowed sum is back."""
    pool = avg_pool((2, 2), (2, 2), "VALID")

    def f(x, g):
        return jax.vjp(lambda x: pool(jax.nn.relu(x)), x)[1](g)[0]

    x, g = arr(8, 28, 28, 32), arr(8, 14, 14, 32, seed=1)
    if off:
        monkeypatch.setenv("WGPU_HLO_REPEAT_WINDOWS", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, x, g, tol=1e-6)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = wgsl_heads(tmp_path)
    windowed = [h for h in heads if "reduce_window" in h]
    if off:
        assert windowed, heads
    else:
        assert not windowed and len(heads) == 1, heads


def pool(op, init, window, strides, padding="VALID"):
    def f(x):
        return jax.lax.reduce_window(x, np.array(init, x.dtype), op, window, strides, padding)

    return f


FORWARD = {
    "max 2x2 of a ReLU": (lambda x: pool(lax.max, -np.inf, (1, 2, 2, 1), (1, 2, 2, 1))(jax.nn.relu(x)), arr(8, 28, 28, 32)),
    "sum 2x2": (pool(lax.add, 0, (1, 2, 2, 1), (1, 2, 2, 1)), arr(8, 28, 28, 32)),
    "max 3x3 with remainders": (pool(lax.max, -np.inf, (1, 3, 3, 1), (1, 3, 3, 1)), arr(4, 17, 16, 5)),
    "sum 2x3 with remainders": (pool(lax.add, 0, (1, 2, 3, 1), (1, 2, 3, 1)), arr(4, 15, 17, 6)),
    "max SAME stays": (pool(lax.max, -np.inf, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"), arr(4, 15, 15, 4)),
    "overlapping max stays": (pool(lax.max, -np.inf, (1, 3, 3, 1), (1, 2, 2, 1)), arr(4, 15, 15, 4)),
    "1-D sum of 4": (pool(lax.add, 0, (1, 4), (1, 4)), arr(64, 1000)),
    "3-D max 2x2x2": (pool(lax.max, -np.inf, (1, 2, 2, 2, 1), (1, 2, 2, 2, 1)), arr(2, 8, 9, 10, 3)),
    "NCHW max": (pool(lax.max, -np.inf, (1, 1, 2, 2), (1, 1, 2, 2)), arr(4, 8, 28, 28)),
    "int32 max": (pool(lax.max, np.iinfo(np.int32).min, (1, 2, 2, 1), (1, 2, 2, 1)), (np.arange(4 * 16 * 16 * 4, dtype=np.int32) * 7919 % 1009).reshape(4, 16, 16, 4)),
    "bf16 sum": (pool(lax.add, 0, (1, 2, 2, 1), (1, 2, 2, 1)), arr(4, 16, 16, 8).astype(jnp.bfloat16)),
    "with NaN and inf": (
        pool(lax.max, -np.inf, (1, 2, 2, 1), (1, 2, 2, 1)),
        np.where(arr(2, 8, 8, 4) > 1.0, np.nan, np.where(arr(2, 8, 8, 4, seed=1) > 1.0, np.inf, arr(2, 8, 8, 4, seed=2))).astype(np.float32),
    ),
    "flax max_pool gradient": (
        jax.grad(lambda x: jnp.sum(jnp.sin(pool(lax.max, -np.inf, (1, 2, 2, 1), (1, 2, 2, 1))(x)))),
        arr(4, 16, 16, 8),
    ),
    "past the binding limit": (pool(lax.add, 0, (1, 2, 2, 1), (1, 2, 2, 1)), arr(32, 128, 128, 64)),
}


@pytest.mark.parametrize("name", list(FORWARD))
def test_pools_match_cpu(gpu, name):
    f, x = FORWARD[name]
    compare_with_cpu(gpu, f, x, tol=2e-2 if "bf16" in name else 1e-5)


def test_two_input_windows_match_cpu(gpu):
    """A variadic reduce_window (value and index of each window's maximum)."""
    x = arr(4, 16, 16, 8)
    idx = np.arange(x.size, dtype=np.int32).reshape(x.shape)

    def body(a, b):
        (av, ai), (bv, bi) = a, b
        take = av >= bv
        return jnp.where(take, av, bv), jnp.where(take, ai, bi)

    def f(x, i):
        return jax.lax.reduce_window((x, i), (np.float32(-np.inf), np.int32(0)), body, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    compare_with_cpu(gpu, f, x, idx, tol=0)


@pytest.mark.parametrize("off", [False, True])
def test_a_pool_of_a_relu_is_one_reduction(gpu, tmp_path, monkeypatch, off):
    """A 2x2 max pool of a ReLU: one reduction kernel computing the ReLU where it reads it.
    With `WGPU_HLO_WINDOW_REDUCES=0` the ReLU is written and a windowed kernel reads it."""
    def f(x):  # a function of its own: one compiled in another test is not dumped again
        return pool(lax.max, -np.inf, (1, 2, 2, 1), (1, 2, 2, 1))(jax.nn.relu(x))

    if off:
        monkeypatch.setenv("WGPU_HLO_WINDOW_REDUCES", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, arr(8, 28, 28, 32), tol=0)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = wgsl_heads(tmp_path)
    if off:
        assert len(heads) == 2 and any("reduce_window" in h for h in heads), heads
    else:
        assert len(heads) == 1 and "reduce_window" not in heads[0], heads
