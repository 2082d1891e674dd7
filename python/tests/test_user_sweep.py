"""User programs of the 2026-12-06 sweep against jax cpu in the same process: ODE solving
with its adjoint gradient, a KV-cache decoding loop, `associative_scan` recurrences,
checkpointed gradients, segment reductions, multi-key sorts, and the same kinds of programs
with `jax_enable_x64` (f64 solve and Cholesky, int64 / uint64 arithmetic, complex128 FFTs).
None of them was wrong when the sweep ran; they stay here so that none becomes wrong."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_odeint_and_its_adjoint_gradient(gpu):
    from jax.experimental.ode import odeint

    def lorenz(y, t, s, r, b):
        return jnp.stack([s * (y[1] - y[0]), y[0] * (r - y[2]) - y[1], y[0] * y[1] - b * y[2]])

    compare_with_cpu(
        gpu, lambda y0: odeint(lorenz, y0, jnp.linspace(0, 1.0, 20), 10.0, 28.0, 8 / 3),
        np.ones(3, np.float32), tol=1e-3)

    def damped(k):
        ys = odeint(lambda y, t, k: jnp.stack([y[1], -k * y[0] - 0.1 * y[1]]),
                    jnp.array([1.0, 0.0]), jnp.linspace(0, 3, 10), k)
        return ys[-1, 0]

    compare_with_cpu(gpu, jax.grad(damped), np.float32(2.0), tol=1e-4)


def test_kv_cache_decoding_loop(gpu):
    d, steps = 64, 128
    wq, wk, wv = (rand(d, d, seed=s) / 8 for s in (1, 2, 3))

    def decode(x0):
        def step(c, t):
            x, kc, vc = c
            kc = lax.dynamic_update_slice(kc, (x @ wk)[None], (t, 0))
            vc = lax.dynamic_update_slice(vc, (x @ wv)[None], (t, 0))
            s = jnp.where(jnp.arange(steps) <= t, kc @ (x @ wq) / 8, -jnp.inf)
            x = jnp.tanh(jax.nn.softmax(s) @ vc + x)
            return (x, kc, vc), x

        init = (x0, jnp.zeros((steps, d)), jnp.zeros((steps, d)))
        return lax.scan(step, init, jnp.arange(steps))[1]

    compare_with_cpu(gpu, decode, rand(d), tol=1e-4)


def test_associative_scans_and_running_extrema(gpu):
    a = (0.9 + 0.1 * np.tanh(rand(8192, seed=4))).astype(np.float32)

    def recurrence(a, b):
        return lax.associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b))[1]

    compare_with_cpu(gpu, recurrence, a, rand(8192, seed=5), tol=1e-4)
    x = rand(100000, seed=6)
    compare_with_cpu(gpu, lambda x: (lax.associative_scan(jnp.add, x), lax.cummax(x),
                                     lax.cummin(x, reverse=True)), x, tol=1e-4)


def test_checkpointed_gradients(gpu):
    w = rand(256, 256, seed=7) / 16

    def deep(x):
        f = jax.checkpoint(lambda x: jnp.tanh(x @ w))
        for _ in range(6):
            x = f(x)
        return jnp.sum(x ** 2)

    compare_with_cpu(gpu, jax.grad(deep), rand(128, 256, seed=8), tol=1e-4)
    scanned = jax.grad(lambda x: jnp.sum(lax.scan(
        jax.checkpoint(lambda c, _: (jnp.sin(c @ w), None)), x, None, length=10)[0]))
    compare_with_cpu(gpu, scanned, rand(32, 256, seed=9), tol=1e-4)


def test_segment_reductions_and_multi_key_sorts(gpu):
    x = rand(200000, seed=10)
    ids = np.random.default_rng(11).integers(0, 500, 200000).astype(np.int32)
    compare_with_cpu(gpu, lambda x, i: (jax.ops.segment_max(x, i, 500),
                                        jax.ops.segment_min(x, i, 500),
                                        jax.ops.segment_prod(1 + x / 1e4, i, 500)),
                     x, ids, tol=1e-5)
    compare_with_cpu(gpu, lambda a, b: jnp.lexsort((a, b)), ids[:100000] % 13,
                     ids[100000:] % 17, tol=0)
    compare_with_cpu(gpu, lambda k, v: lax.sort((k, v), num_keys=1, is_stable=True),
                     ids % 50, x, tol=0)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def test_x64_programs(gpu, x64):
    rng = np.random.default_rng(12)
    a = rng.standard_normal((200, 200))
    spd = a @ a.T / 200 + np.eye(200)
    compare_with_cpu(gpu, jnp.linalg.solve, spd, rng.standard_normal(200), tol=1e-10)
    compare_with_cpu(gpu, jnp.linalg.cholesky, spd, tol=1e-12)
    big = rng.integers(-2**40, 2**40, 100000)
    compare_with_cpu(gpu, lambda i: (i * 3037000493 + 7, i // 97, i % 1000003, i >> 5,
                                     jnp.cumsum(i)), big, tol=0)
    compare_with_cpu(gpu, lambda i: (jnp.sort(i), jnp.argsort(i)),
                     rng.integers(-2**50, 2**50, 100000), tol=0)
    u = rng.integers(0, 2**63, 100000, dtype=np.uint64)
    compare_with_cpu(gpu, lambda u: (u * np.uint64(0x9E3779B97F4A7C15)) ^ (u >> np.uint64(31)),
                     u, tol=0)
    z = rng.standard_normal(4096) + 1j * rng.standard_normal(4096)
    compare_with_cpu(gpu, jnp.fft.fft, z, tol=1e-9)
