"""Loops whose trip count is computed when they start (`passes::trip_count::counter_tests`):
a `fori_loop` to a traced bound, counters that start at computed values, conjunctions of
counter tests (equinox's and diffrax's loops). The runtime reads those values back once and
runs the body that many times instead of reading the predicate after every iteration; where
a counter would leave its type's range it reads the predicate as before. Every result
against jax cpu, which runs the loops as written."""

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


def compare(gpu, f, *args):
    compare_with_cpu(gpu, f, *args, tol=2e-6)


def body(i, c):
    return jnp.cos(c) * 0.5 + i.astype(jnp.float32) * 1e-2


@pytest.mark.parametrize("n", [0, 1, 5, 37, -3])
def test_fori_loop_to_a_traced_bound(gpu, n):
    compare(gpu, lambda x, n: lax.fori_loop(0, n, body, x), X, np.int32(n))
    # From a traced start too, counting by 3.
    compare(gpu, lambda x, a, n: lax.fori_loop(a, n, body, x), X, np.int32(2), np.int32(n))


@pytest.mark.parametrize("start", [0, 1])
def test_two_counters_one_starting_at_a_computed_value(gpu, start):
    # diffrax's Runge-Kutta stages: a stage counter starting at 0 or 1 (first same as last)
    # beside a step counter, both below 7, the tests wrapped as equinox writes them.
    def f(x, s):
        i0 = jnp.where(s > 0, 1, 0).astype(jnp.int32)

        def cond(c):
            i, j, _ = c
            return jnp.any(i < 7) & jnp.not_equal(j < 7, False)

        def step(c):
            i, j, v = c
            return i + 1, j + 1, body(i, v) + j.astype(jnp.float32)

        return lax.while_loop(cond, step, (i0, jnp.int32(0), x))

    compare(gpu, f, X, np.int32(start))


def test_counting_down_from_a_computed_start(gpu):
    def f(x, a):
        return lax.while_loop(lambda c: c[0] > 0, lambda c: (c[0] - 3, body(c[0], c[1])), (a, x))

    for a in [0, 1, 3, 10, 31]:
        compare(gpu, f, X, np.int32(a))


def test_bounds_the_body_changes_are_read_back(gpu):
    # i < n with n stepping down too: not a bound; the predicate is read each iteration.
    def f(x, n):
        return lax.while_loop(lambda c: c[0] < c[1],
                              lambda c: (c[0] + 1, c[1] - 1, body(c[0], c[2])), (0, n, x))

    compare(gpu, f, X, np.int32(11))


def test_counters_near_their_type_limits(gpu):
    # int32 to its largest value, and a uint32 counter that wraps past 2^32 - 1 to stop at 3
    # (not computable at the start: the predicate is read back, 8 iterations as on cpu).
    big = np.int32(2**31 - 4)
    compare(gpu, lambda x, a: lax.fori_loop(a, np.int32(2**31 - 1), body, x), X, big)

    def wraps(x, a):
        return lax.while_loop(lambda c: c[0] != np.uint32(3),
                              lambda c: (c[0] + np.uint32(1), jnp.cos(c[1]) * 0.5), (a, x))

    compare(gpu, wraps, X, np.uint32(2**32 - 5))


def test_int64_counters(gpu):
    with jax.enable_x64(True):
        compare(gpu, lambda x, n: lax.fori_loop(jnp.int64(0), n, body, x),
                X.astype(np.float64), np.int64(13))


def test_trips_are_computed_at_the_start(tmp_path):
    # The dump of `fori_loop(0, n)` with a traced n says so, and the loop's results do not
    # change with WGPU_HLO_DUMP (which runs nothing differently).
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from jax import lax
        d = jax.devices("wgpu")[0]
        x = jax.device_put(np.linspace(-1, 1, 16, dtype=np.float32), d)
        f = jax.jit(lambda x, n: lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * 0.5, x))
        print(repr(np.asarray(f(x, jax.device_put(np.int32(40), d))).tolist()))
    """)
    dump = tmp_path / "dump"
    env = dict(os.environ, WGPU_HLO_DUMP=str(dump))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    text = "".join(p.read_text() for p in dump.glob("*program.txt"))
    assert re.findall(r"trip count: ([a-z ]+)", text) == ["computed at the start from "], text
