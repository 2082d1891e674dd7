"""`while` loops over little data run as guarded steps (`passes::guarded`): an iteration that
may not happen, each state value `select(cond, next, state)`. Loops that run at most 8
iterations (diffrax's stage loops) become that many steps with no loop; a `fori_loop` to a
traced bound runs 8 iterations a trip and then 7 guarded steps; a loop whose predicate depends
on the data (Newton's iteration, rejection sampling) runs 3 guarded steps after each iteration
and reads its predicate back a quarter as often. Every result against jax cpu, which runs the
loops as written, at trip counts around each multiple of the factor, and exact where the
loop computes integers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu

X = np.linspace(-1, 1, 16, dtype=np.float32)


@pytest.fixture(autouse=True, params=["whole", "guarded"])
def loop_form(request, monkeypatch):
    """Every loop twice: elementwise loops run whole in one kernel (`passes::whole_loops`),
    and with those kernels off as guarded steps, the form other loops still take."""
    if request.param == "guarded":
        monkeypatch.setenv("WGPU_HLO_WHILE_KERNELS", "0")
    return request.param


def compare(gpu, f, *args):
    compare_with_cpu(gpu, f, *args, tol=2e-6)


def body(i, c):
    return jnp.cos(c) * 0.5 + i.astype(jnp.float32) * 1e-2


@pytest.mark.parametrize("n", [-3, 0, 1, 6, 7, 8, 9, 15, 16, 17, 23, 200])
def test_fori_loop_to_a_traced_bound(gpu, n):
    # The counter comes back too: it must be exactly n (or 0 when n < 0).
    f = lambda x, n: lax.fori_loop(0, n, lambda i, c: (c[0] + 1, body(i, c[1])), (0, x))
    compare(gpu, f, X, np.int32(n))


@pytest.mark.parametrize("a,n", [(5, 4), (5, 13), (-20, 3), (2**31 - 12, 2**31 - 1),
                                 (-(2**31), -(2**31) + 9)])
def test_fori_loop_between_traced_bounds(gpu, a, n):
    # Near the ends of int32 too: `n - 7` must not wrap round into a loop that runs.
    f = lambda x, a, n: lax.fori_loop(a, n, lambda i, c: (c[0] + 1, body(i, c[1])), (0, x))
    compare(gpu, f, X, np.int32(a), np.int32(n))


@pytest.mark.parametrize("n", [-(2**31), -(2**31) + 5, 3])
def test_counting_down_to_a_traced_bound(gpu, n):
    def f(x, a, n):
        return lax.while_loop(lambda c: c[0] > n,
                              lambda c: (c[0] - 1, body(c[0], c[1])), (a, x))

    compare(gpu, f, X, np.int32(n + 11), np.int32(n))


@pytest.mark.parametrize("start", [0, 1])
def test_stage_loops_with_bounded_starts(gpu, start):
    # A counter starting at 0 or 1, run to 7, inside a fori_loop: no loop left inside, and the
    # outer loop unrolled in turn.
    def f(x, s):
        def step(i, y):
            i0 = jnp.where((i + s) % 2 > 0, 1, 0).astype(jnp.int32)
            stage = lambda c: (c[0] + 1, c[1] + jnp.sin(c[1]) * 1e-2 + c[0].astype(jnp.float32))
            return lax.while_loop(lambda c: c[0] < 7, stage, (i0, y))[1]

        return lax.fori_loop(0, 20, step, x)

    compare(gpu, f, X, np.int32(start))


def test_bounded_starts_from_clamps_and_minimums(gpu):
    def f(x, a):
        lo = jnp.clip(a, 2, 5)
        hi = jnp.minimum(a, 9)
        return lax.while_loop(lambda c: (c[0] < 8) & (c[1] < hi),
                              lambda c: (c[0] + 1, c[1] + 1, body(c[0], c[2])), (lo, a - 3, x))

    for a in [-7, 0, 3, 4, 6, 30]:
        compare(gpu, f, X, np.int32(a))


@pytest.mark.parametrize("scale", [0.5, 1.0, 10.0, 1e4])
def test_newton_to_a_tolerance(gpu, scale):
    # The predicate reads the data: iterations vary with the start; the count comes back.
    def f(a):
        body = lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1)
        cond = lambda c: jnp.any(jnp.abs(c[0] * c[0] - a) > 1e-6 * a) & (c[1] < 100)
        return lax.while_loop(cond, body, (a * scale, 0))

    compare(gpu, f, np.abs(X) + 0.5)


@pytest.mark.parametrize("x0", [1, 2, 3, 6, 7, 27, 97])
def test_collatz_steps_exactly(gpu, x0):
    # Integers only: every iteration count from 0 (x0 = 1) to 118 (x0 = 97), exact.
    def f(x):
        return lax.while_loop(lambda c: c[0] != 1,
                              lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1),
                                         c[1] + 1), (x, 0))

    compare(gpu, f, np.int32(x0))


def test_rejection_sampling(gpu):
    # jax.random.gamma samples by rejection: a while loop per element, vmapped.
    key = jax.random.key(3)
    f = lambda k, a: jax.random.gamma(k, a, (256,))
    compare_with_cpu(gpu, f, key, np.float32(0.7), tol=2e-5)
    f = lambda k: jax.random.poisson(k, 3.5, (256,))
    compare_with_cpu(gpu, f, key, tol=0)


def test_the_plans_in_the_dump(tmp_path, loop_form):
    # A bounded stage loop leaves no loop; a fori_loop to a traced n and Newton's loop run
    # whole in one kernel each, or without those kernels the fori_loop becomes a loop of 8 and
    # guarded steps, its trips computed at the start either way, and Newton's loop reads its
    # predicate after each iteration.
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from jax import lax
        d = jax.devices("wgpu")[0]
        x = jax.device_put(np.linspace(0.5, 1, 16, dtype=np.float32), d)
        s = jax.device_put(np.int32(1), d)
        n = jax.device_put(np.int32(40), d)
        g = lambda x, s: lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, jnp.sin(c[1])),
                                        (jnp.where(s > 0, 1, 0).astype(jnp.int32), x))[1]
        print(np.asarray(jax.jit(g)(x, s)).sum())
        g = lambda x, n: lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * 0.5, x)
        print(np.asarray(jax.jit(g)(x, n)).sum())
        g = lambda a: lax.while_loop(lambda c: jnp.any(jnp.abs(c * c - a) > 1e-6 * a),
                                     lambda c: 0.5 * (c + a / c), a * 10)
        print(np.asarray(jax.jit(g)(x)).sum())
    """)
    dump = tmp_path / "dump"
    env = dict(os.environ, WGPU_HLO_DUMP=str(dump))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    trips = []
    for p in sorted(dump.glob("*program.txt")):
        trips.append(re.findall(r"trip count: ([a-z ]+)", p.read_text()))
    # Whole in one kernel, Newton's loop reads a flag a launch writes, not its predicate.
    newton = "flag read back" if loop_form == "whole" else "read back"
    assert trips == [[], ["computed at the start from "], [newton]], trips
    whole = ["while in kernel" in p.read_text() for p in sorted(dump.glob("*program.txt"))]
    assert whole == [False] + [loop_form == "whole"] * 2, whole


@pytest.mark.parametrize("length", [11, 13, 37, 97])
def test_scans_whose_length_no_factor_divides(gpu, length):
    # Counted at compile time, no unroll factor up to 8 divides the length: a loop of 8 copies
    # runs the whole trips, the rest follow as plain copies (the fori_loop); scans stacking
    # outputs, or reducing, stay as written.
    def f(x):
        def step(c, t):
            c = jnp.cos(c) * 0.5 + t * 1e-2
            return c, (c[:4] * 2.0, c.max())
        return lax.scan(step, x, jnp.arange(length, dtype=jnp.float32))

    compare(gpu, f, X)
    # Reversed, and a fori_loop from 3 whose counter comes back.
    g = lambda x: lax.scan(lambda c, t: (jnp.sin(c) + t, c * t), x,
                           jnp.arange(length, dtype=jnp.float32), reverse=True)
    compare(gpu, g, X)
    h = lambda x: lax.fori_loop(3, 3 + length, lambda i, c: (c[0] + i, body(i, c[1])), (0, x))
    compare(gpu, h, X)
