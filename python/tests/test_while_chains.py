"""Loop kernels whose invocations carry several elements side by side (`while_kernel::chains`:
on a CPU adapter, a loop with a scalar predicate over at least 4096 elements of state, a
multiple of 4, runs four elements an invocation, each a chain of its own). Every result against
jax cpu: states of one and two dimensions, states that swap, integer states, values from
outside read at the element and broadcast along rows, positions (`iota`) in the body,
scalar states next to the tensors, sizes that leave the last workgroup short or do not divide
into chains, launches cut short by a small loop budget, and other chain counts. The dump's
kernel header tells whether a kernel ran by chains."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu, cpu_kernel_class


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def chained(gpu, tmp_path, monkeypatch, f, *args, tol=2e-6):
    """Checks `jit(f)` against cpu; returns how many of its kernels ran by chains."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, *args, tol=tol)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    n = 0
    for p in glob.glob(os.path.join(tmp_path, "*.wgsl")):
        with open(p) as fh:
            n += "side by side" in fh.readline()
    return n


def expect_chains(gpu, count, want=True):
    assert count == (1 if want and cpu_kernel_class(gpu) else 0)


@pytest.fixture(params=["one launch", "many launches"])
def budget(request, monkeypatch):
    if request.param == "many launches":
        monkeypatch.setenv("WGPU_HLO_MAX_LOOP", "16")
    return request.param


@pytest.mark.parametrize("n", [-3, 0, 1, 5, 200])
def test_traced_bound(gpu, tmp_path, monkeypatch, budget, n):
    # jax cpu may fuse the multiply and add (one rounding): 200 steps drift apart ~1e-5.
    f = lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 0.999 + 0.001, x)
    count = chained(gpu, tmp_path, monkeypatch, f, normal(1 << 16), np.int32(n), tol=5e-5)
    expect_chains(gpu, count)


def test_two_dimensional_states_that_swap(gpu, tmp_path, monkeypatch, budget):
    def f(a, b):
        return lax.fori_loop(0, 37, lambda i, c: (c[1], c[0] * 0.5 + c[1] * 0.25), (a, b))

    count = chained(gpu, tmp_path, monkeypatch, f, normal((64, 128)), normal((64, 128), 1))
    expect_chains(gpu, count)


def test_integer_state_and_values_from_outside(gpu, tmp_path, monkeypatch, budget):
    w = 0.9 * np.cos(np.arange(8192, dtype=np.float32))
    k = np.random.default_rng(3).integers(0, 1000, 8192).astype(np.int32)

    def f(x, k, w):
        def body(i, c):
            x, k = c
            return x * w + jnp.float32(0.01) * k.astype(jnp.float32), (k * 7 + i) % 1009

        return lax.fori_loop(0, 50, body, (x, k))

    count = chained(gpu, tmp_path, monkeypatch, f, normal(8192) * 0.1, k, w, tol=1e-5)
    expect_chains(gpu, count)


def test_broadcasts_and_positions_in_the_body(gpu, tmp_path, monkeypatch, budget):
    # A vector from outside broadcast along the rows, and each element's column (|r| < 1:
    # rounding differences shrink, not grow).
    rows = 0.9 * np.cos(np.arange(48, dtype=np.float32))
    def f(x, r):
        def body(i, c):
            return jnp.tanh(c * r[:, None] + lax.broadcasted_iota(jnp.float32, c.shape, 1) * 1e-3)

        return lax.fori_loop(0, 20, body, x)

    count = chained(gpu, tmp_path, monkeypatch, f, normal((48, 256)), rows, tol=1e-5)
    expect_chains(gpu, count)


def test_scalar_states_beside_the_elements(gpu, tmp_path, monkeypatch, budget):
    def f(x):
        def cond(c):
            return c[0] < 1000.0

        def body(c):
            s, t, x = c
            return s * 1.5 + 1.0, t + 1, x * 0.9 + s * 1e-4

        return lax.while_loop(cond, body, (jnp.float32(1.0), jnp.int32(0), x))

    expect_chains(gpu, chained(gpu, tmp_path, monkeypatch, f, normal(1 << 14)))


@pytest.mark.parametrize("size", [4100, 4098, 4092])
def test_sizes(gpu, tmp_path, monkeypatch, size):
    # 4100: a short last workgroup; 4098: not a multiple of four; 4092: below 4096.
    f = lambda x: lax.fori_loop(0, 40, lambda i, c: jnp.sin(c) + 0.5, x)
    count = chained(gpu, tmp_path, monkeypatch, f, normal(size), tol=1e-5)
    expect_chains(gpu, count, want=size == 4100)


@pytest.mark.parametrize("k", ["1", "2", "8"])
def test_other_chain_counts(gpu, tmp_path, monkeypatch, k):
    monkeypatch.setenv("WGPU_HLO_WHILE_CHAINS", k)
    f = lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 0.999 + i * 1e-4, x)
    count = chained(gpu, tmp_path, monkeypatch, f, normal(1 << 13), np.int32(100))
    # Set explicitly, the count applies to any adapter.
    assert count == (0 if k == "1" else 1)


def test_loops_whose_elements_stop_on_their_own_keep_one(gpu, tmp_path, monkeypatch):
    def each_sqrt(a):
        def body(c):
            lo, hi = c
            mid = (lo + hi) / 2
            return jnp.where(mid * mid > a, lo, mid), jnp.where(mid * mid > a, mid, hi)

        return lax.while_loop(lambda c: c[1] - c[0] > 1e-6 * c[1], body, (jnp.float32(0), a + 1))[0]

    x = np.abs(normal(8192)) * 100
    expect_chains(gpu, chained(gpu, tmp_path, monkeypatch, jax.vmap(each_sqrt), x), want=False)


def test_long_bodies_keep_one_element(gpu, tmp_path, monkeypatch):
    # `jnp.interp` into 1000 points in a loop: its search, copied eleven times into the
    # body, makes the loop hundreds of ops long, past `CHAINS_MAX_OPS`: one element an
    # invocation (four copies of such a body took llvmpipe seconds to compile).
    xp = np.linspace(-3, 3, 1000).astype(np.float32)

    def f(x, xp, fp):
        return lax.fori_loop(0, 10, lambda i, c: jnp.interp(c, xp, fp) * 2 + 0.1 * c, x)

    count = chained(gpu, tmp_path, monkeypatch, f, normal(8192) * 3, xp, np.sin(xp), tol=1e-5)
    expect_chains(gpu, count, want=False)
    # Asked for, they still apply (a new function: the first one's executable is cached).
    monkeypatch.setenv("WGPU_HLO_WHILE_CHAINS", "4")
    g = lambda x, xp, fp: f(x, xp, fp)
    count = chained(gpu, tmp_path / "forced", monkeypatch, g, normal(8192) * 3, xp, np.sin(xp),
                    tol=1e-5)
    assert count == 1
