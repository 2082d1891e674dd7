"""Floating-point division is IEEE's, correctly rounded, in every kind of kernel.

A note of an earlier stop said that 30 % of `x / 300.0` differ from jax cpu by one ULP and
blamed Mesa for turning the constant divisor into a product with its reciprocal. It is the
other way round: jax cpu's compiler does that (its quotients differ from numpy's float32
division in 29 % of cases), while lavapipe divides. These tests hold wgpu to IEEE, so that a
driver or a rewrite of the library's `wh_div_f32` that starts folding is caught.

Each quotient is checked bit for bit against numpy's float32 division of the operands the
kernel saw (where those are the backend's own results, as after a dot, it returns them too)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

RNG = np.random.default_rng(23)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run(gpu, f, *args):
    put = [jax.device_put(a, gpu) for a in args]
    return jax.tree_util.tree_map(np.asarray, jax.jit(f)(*put))


def exact(got, want):
    want = np.asarray(want, np.float32)
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad == 0, f"{bad} of {got.size} quotients differ from IEEE's"


@pytest.mark.parametrize("divisor", [300.0, 255.0, 3.0, 7.0, 0.1, 1e-3, 6.02e23])
def test_elementwise_by_a_constant(gpu, divisor):
    x = rand(1 << 16, scale=100.0)
    got = run(gpu, lambda a: a / divisor, x)
    exact(got, x / np.float32(divisor))


def test_constant_over_elements(gpu):
    x = rand(1 << 16, scale=10.0)
    got = run(gpu, lambda a: 300.0 / a, x)
    exact(got, np.float32(300.0) / x)


def test_grouped_rows_by_a_constant(gpu):
    # Rows of four: a loop kernel computes a vec4 an invocation on CPU adapters.
    x = rand(256, 1024, scale=50.0)
    got = run(gpu, lambda a: (a / 7.0).T, x)
    exact(got, (x / np.float32(7.0)).T)


def test_means(gpu):
    # The row sums come back too: the quotient is checked against the sums the backend made.
    x = rand(512, 300)
    s, m = run(gpu, lambda a: (jnp.sum(a, axis=1), jnp.mean(a, axis=1)), x)
    exact(m, s / np.float32(300.0))


def test_mean_of_all(gpu):
    x = rand(3000)
    s, m = run(gpu, lambda a: (jnp.sum(a), jnp.mean(a)), x)
    exact(m, s / np.float32(3000.0))


def test_dot_epilogue(gpu):
    a, b = rand(128, 96), rand(96, 160)
    d, q = run(gpu, lambda x, y: (x @ y, (x @ y) / 300.0), a, b)
    exact(q, d / np.float32(300.0))


def test_dot_prologue(gpu):
    # A permutation as the other operand: each product sums one term, so the dot is exact
    # whatever its order of summation, and its result is the quotients, permuted.
    a = rand(64, 256, scale=30.0)
    perm = RNG.permutation(256)
    p = np.eye(256, dtype=np.float32)[perm].T
    got = run(gpu, lambda x, y: (x / 255.0) @ y, a, p)
    exact(got, (a / np.float32(255.0))[:, perm])


def test_inside_a_scan(gpu):
    x = rand(1000, scale=100.0)

    def f(v):
        def step(c, _):
            c = c / 3.0 + 1.0
            return c, c[:4]
        return lax.scan(step, v, None, length=5)

    got_c, got_ys = run(gpu, f, x)
    c, ys = x, []
    for _ in range(5):
        c = c / np.float32(3.0) + np.float32(1.0)
        ys.append(c[:4])
    exact(got_c, c)
    exact(got_ys, np.stack(ys))


def test_special_values(gpu):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, -1.0], np.float32)
    for divisor in (300.0, 0.0, -0.0, np.inf, 1e38):
        got = run(gpu, lambda a: a / divisor, x)
        with np.errstate(all="ignore"):
            want = x / np.float32(divisor)
        assert np.array_equal(np.isnan(got), np.isnan(want)), divisor
        ok = ~np.isnan(want)
        exact(got[ok], want[ok])
