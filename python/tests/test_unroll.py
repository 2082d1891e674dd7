"""Counted loops with small bodies run several iterations a trip (`src/passes/unroll.rs`):
`fori_loop`, `scan` (stacked outputs, reversed, with the counter in the body), counting down,
nested loops, trip counts with and without small factors — every result against jax cpu,
which runs the loops as written."""

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


def compare(gpu, f, *args, tol=2e-6):
    compare_with_cpu(gpu, f, *args, tol=tol)


X = np.linspace(-1, 1, 64, dtype=np.float32)


@pytest.mark.parametrize("trips", [1, 2, 7, 12, 97, 1000])
def test_fori_loop(gpu, trips):
    # 97 is prime (no factor: the loop stays as written); the body reads the counter.
    f = lambda x: lax.fori_loop(0, trips, lambda i, c: jnp.cos(c) * 0.5 + i * 1e-3, x)
    compare(gpu, f, X)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_stacks_outputs(gpu, reverse):
    def f(x):
        def step(c, t):
            c = jnp.sin(c) * 0.9 + t
            return c, (c.sum(), c[:3] * t)

        return lax.scan(step, x, jnp.linspace(0, 1, 48), reverse=reverse)

    compare(gpu, f, X)


def test_counting_down_and_nested(gpu):
    def f(x):
        def outer(c):
            i, v = c
            w = lax.fori_loop(0, 16, lambda j, u: u * 0.99 + j * 1e-3, v)
            return i - 2, w + i.astype(jnp.float32) * 1e-2

        return lax.while_loop(lambda c: c[0] > 0, outer, (jnp.int32(40), x))

    compare(gpu, f, X)


def test_loop_with_int64_counter(gpu):
    with jax.enable_x64(True):
        compare(gpu, lambda x: lax.fori_loop(jnp.int64(0), jnp.int64(24),
                                             lambda i, c: c * 1.01 + i, x), X.astype(np.float64))


def test_unrolled_loops_launch_less(tmp_path):
    # The dump of a 1000-step fori_loop: a counted loop of 125 trips (8 steps each), and the
    # same numbers with WGPU_HLO_UNROLL=0 (1000 trips).
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from jax import lax
        x = jax.device_put(np.linspace(-1, 1, 64, dtype=np.float32), jax.devices("wgpu")[0])
        f = lambda x: lax.fori_loop(0, 1000, lambda i, c: jnp.cos(c) * 0.5 + i * 1e-3, x)
        print(repr(np.asarray(jax.jit(f)(x)).tolist()))
    """)
    outs, trips = [], []
    for unroll in ["1", "0"]:
        dump = tmp_path / f"dump{unroll}"
        # The loop runs whole in one kernel unless those are off.
        env = dict(os.environ, WGPU_HLO_DUMP=str(dump), WGPU_HLO_UNROLL=unroll,
                   WGPU_HLO_WHILE_KERNELS="0")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.strip().splitlines()[-1])
        text = "".join(p.read_text() for p in dump.glob("*program.txt"))
        trips.append(re.findall(r"trip count: (\d+)", text))
    assert trips == [["125"], ["1000"]]
    assert outs[0] == outs[1]


@pytest.mark.parametrize("rows", [32, 20])
def test_stacked_updates_combined_or_clamped(gpu, rows):
    # Updates of two rows at a counter stepping by 2, 16 steps, unrolled 8 a trip. With 32
    # rows the 8 updates of a trip are adjacent and become one (JAX's negative-index wrap of
    # the counter, `select(i < 0, i + 32, i)`, is dropped: the counter is never negative);
    # with 20 rows the later updates clamp (they overwrite the last rows), so each stays an
    # update of its own. Both as jax cpu computes them.
    def f(x):
        def body(c):
            i, v, s = c
            v = jnp.sin(v) + 0.5
            s = lax.dynamic_update_slice(s, v[:4].reshape(2, 2), (i, 0))
            return i + 2, v, s

        return lax.while_loop(lambda c: c[0] < 32, body, (0, x, jnp.zeros((rows, 2))))[2]

    compare(gpu, f, X)
