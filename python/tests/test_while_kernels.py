"""`while` loops that run whole inside one kernel (`passes::whole_loops`,
`codegen::while_kernel`): each invocation carries its element of the loop state through every
iteration and computes the counters, bounds and predicate itself. Every result against jax
cpu: trip counts known at compile time, computed when the loop starts, and found by a
predicate on the data; states that swap, start from one value, or are read inside the loop;
scalars of every width; loops inside other loops and branches; and launches cut short by a
small loop budget (`WGPU_HLO_MAX_LOOP`), so that a loop runs over several launches."""

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

from conftest import compare_with_cpu, cpu_kernel_class

X = np.linspace(-1, 1, 64, dtype=np.float32)
W = np.cos(np.arange(64, dtype=np.float32))


def compare(gpu, f, *args, tol=2e-6):
    compare_with_cpu(gpu, f, *args, tol=tol)


@pytest.fixture(autouse=True, params=["one launch", "many launches"])
def budget(request, monkeypatch):
    """Each test twice: with the default loop budget, and with 16 iterations a launch at
    most (loops then run over several launches, the next from the state the last wrote)."""
    if request.param == "many launches":
        monkeypatch.setenv("WGPU_HLO_MAX_LOOP", "16")
    return request.param


@pytest.fixture
def serial_budget(budget, monkeypatch):
    """For loops that reduce their state (one invocation loops over the 64 elements several
    times an iteration): a budget of a few iterations a launch."""
    if budget == "many launches":
        monkeypatch.setenv("WGPU_HLO_MAX_LOOP", "600")


def step(i, c):
    return jnp.cos(c) * 0.5 + i.astype(jnp.float32) * 1e-3


@pytest.mark.parametrize("n", [-5, 0, 1, 15, 16, 17, 200, 1000])
def test_fori_loop_to_a_traced_bound(gpu, n):
    f = lambda x, n: lax.fori_loop(0, n, lambda i, c: (c[0] + 1, step(i, c[1])), (0, x))
    compare(gpu, f, X, np.int32(n))


@pytest.mark.parametrize("n", [1, 37, 100, 1000])
def test_fori_loop_counted_at_compile_time(gpu, n):
    compare(gpu, lambda x: lax.fori_loop(0, n, step, x), X)


@pytest.mark.parametrize("x0", [1, 7, 27, 97, 871])
def test_collatz_steps_exactly(gpu, x0):
    # A predicate on the data: every iteration count up to 178 (x0 = 871), exact.
    def f(x):
        return lax.while_loop(lambda c: c[0] != 1,
                              lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1),
                                         c[1] + 1), (x, 0))

    compare(gpu, f, np.int32(x0))


def test_states_that_swap_and_start_alike(gpu):
    # Fibonacci on vectors: the body swaps its states, which both start from x.
    f = lambda x, n: lax.fori_loop(0, n, lambda i, c: (c[1], c[0] + c[1] * 0.5), (x, x))
    compare(gpu, f, X, np.int32(21), tol=1e-5)


def test_values_from_outside_read_inside(gpu):
    # x is the initial state and is read in every iteration too; w at other elements.
    def f(x, w, n):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + x * w[::-1] + w[i % 64], x)

    compare(gpu, f, X, W, np.int32(50), tol=1e-5)


def test_scalar_states_of_every_width(gpu):
    # A bool, a uint8 and an int16 counter, a float16 and a float32 scalar beside the vector.
    def f(x, n):
        def body(c):
            i, flag, b, h, s, v = c
            return (i + 1, ~flag, (b + 3).astype(jnp.uint8), (h * 1.5).astype(jnp.float16),
                    s + v.sum() * 0 + 0.25, jnp.where(flag, v * 0.9, v + 0.1))

        init = (jnp.int16(0), jnp.bool_(True), jnp.uint8(250), jnp.float16(0.5), jnp.float32(0),
                x)
        return lax.while_loop(lambda c: c[0] < n.astype(jnp.int16), body, init)

    # (v.sum() reduces the vector: that loop stays on the host; the same without it runs whole.)
    compare(gpu, f, X, np.int32(9))

    def g(x, n):
        def body(c):
            i, flag, b, h, s, v = c
            return (i + 1, ~flag, (b + 3).astype(jnp.uint8), (h * 1.5).astype(jnp.float16),
                    s + 0.25, jnp.where(flag, v * 0.9, v + 0.1))

        init = (jnp.int16(0), jnp.bool_(True), jnp.uint8(250), jnp.float16(0.5), jnp.float32(0),
                x)
        return lax.while_loop(lambda c: c[0] < n.astype(jnp.int16), body, init)

    compare(gpu, g, X, np.int32(9))


def test_int64_and_float64_loops(gpu):
    with jax.enable_x64(True):
        f = lambda x, n: lax.fori_loop(jnp.int64(0), n, lambda i, c: c * 1.01 + i, x)
        compare(gpu, f, X.astype(np.float64), np.int64(40), tol=1e-12)


def test_integer_vectors(gpu):
    # An integer state of 1000 elements, a linear congruential generator: exact.
    f = lambda s, n: lax.fori_loop(0, n, lambda i, s: s * 1664525 + 1013904223, s)
    compare(gpu, f, np.arange(1000, dtype=np.uint32), np.int32(77), tol=0)


def test_loops_inside_loops_and_branches(gpu):
    # An inner loop whose length the data decides, inside a fori_loop on the host; a loop in
    # one arm of a cond.
    def f(x, n):
        def outer(i, c):
            inner = lax.while_loop(lambda d: d[0] < i % 5 + 3,
                                   lambda d: (d[0] + 1, jnp.sin(d[1]) + 0.1), (0, c))
            return inner[1] * 0.9

        y = lax.fori_loop(0, n, outer, x)
        return lax.cond(n > 3, lambda: lax.fori_loop(0, n, step, y), lambda: y)

    compare(gpu, f, X, np.int32(6), tol=1e-5)


def test_a_large_state(gpu):
    # 2^18 elements, 30 iterations: the per-launch work bound splits it (lavapipe).
    x = np.linspace(-3, 3, 1 << 18, dtype=np.float32)
    compare(gpu, lambda x, n: lax.fori_loop(0, n, step, x), x, np.int32(30), tol=1e-5)


def test_grad_through_a_loop(gpu):
    # The gradient of a fori_loop to a compile-time bound (a scan backwards, in JAX).
    def loss(w, x):
        return lax.fori_loop(0, 20, lambda i, c: jnp.tanh(c * w + 0.1), x).sum()

    compare(gpu, jax.grad(loss), W, X, tol=1e-5)


def run_dumped(tmp_path, code):
    """Runs `code` in a fresh process with `WGPU_HLO_DUMP` set; the dump's directory."""
    dump = tmp_path / "dump"
    env = dict(os.environ, WGPU_HLO_DUMP=str(dump))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return dump


def test_the_dump_shows_the_loop_kernel(tmp_path, budget):
    # The program lists the loop as one kernel; its WGSL holds the loop.
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from jax import lax
        d = jax.devices("wgpu")[0]
        x = jax.device_put(np.linspace(0.5, 1, 16, dtype=np.float32), d)
        n = jax.device_put(np.int32(40), d)
        g = lambda x, n: lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * 0.5, x)
        print(np.asarray(jax.jit(g)(x, n)).sum())
    """)
    dump = run_dumped(tmp_path, code)
    program = "".join(p.read_text() for p in dump.glob("*program.txt"))
    m = re.search(r"while in kernel (while_\d+) .* \((\d+) iterations a launch", program)
    assert m, program
    if budget == "many launches":
        assert int(m.group(2)) <= 16, program
    wgsl = (next(dump.glob(f"*{m.group(1)}.wgsl"))).read_text()
    assert "for (var wh_k" in wgsl


@pytest.mark.parametrize("scale", [10.0, 1.0, 1e4])
def test_a_predicate_to_a_tolerance(gpu, scale, serial_budget):
    # Newton's iteration until every element is within the tolerance (`jnp.any` reduces the
    # state: one invocation computes every element), or 100 iterations.
    def f(a):
        body = lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1)
        cond = lambda c: jnp.any(jnp.abs(c[0] * c[0] - a) > 1e-6 * a) & (c[1] < 100)
        return lax.while_loop(cond, body, (a * scale, 0))

    compare(gpu, f, np.abs(X) + 0.5)


def test_reductions_in_the_body(gpu, serial_budget):
    # Each iteration renormalizes by the sum and tracks the max and an integer count, until
    # the max is small or n iterations have run.
    def f(x, n):
        def body(c):
            i, v, m, k = c
            w = jnp.exp(jnp.sin(v * 3.0))
            w = w / w.sum()
            return i + 1, w, w.max(), k + (w > 1.0 / 64).astype(jnp.int32).sum()

        return lax.while_loop(lambda c: (c[0] < n) & (c[2] > 0.02), body,
                              (0, x, jnp.float32(1), jnp.int32(0)))

    compare(gpu, f, X, np.int32(30), tol=1e-5)
    compare(gpu, f, X, np.int32(3), tol=1e-5)


def test_all_and_min_in_the_predicate(gpu, serial_budget):
    # Integers halved until all are below 10 or the least is 0: exact.
    def f(x):
        return lax.while_loop(lambda v: jnp.all(v >= 10) & (v.min() > 0),
                              lambda v: v // 2 + (v % 3), x)

    compare(gpu, f, (np.arange(1, 65, dtype=np.int32) * 977) % 5000 + 11, tol=0)


def test_rejection_sampling(gpu):
    # jax.random.gamma and poisson: a while loop per element, vmapped (its predicate an `any`).
    key = jax.random.key(3)
    compare_with_cpu(gpu, lambda k, a: jax.random.gamma(k, a, (256,)), key, np.float32(0.7),
                     tol=2e-5)
    compare_with_cpu(gpu, lambda k: jax.random.poisson(k, 3.5, (256,)), key, tol=0)


@pytest.mark.parametrize("length", [1, 5, 12, 50, 300])
def test_scans_stacking_outputs(gpu, length):
    # lax.scan's stacked outputs (a trajectory and a computed value per step), with xs read
    # at the step; forwards and reversed. Each invocation writes its column of each row.
    ts = np.linspace(0, 1, length, dtype=np.float32)

    def f(x, ts):
        def step(c, t):
            c2 = jnp.cos(c) * 0.5 + t
            return c2, (c, c2 * t)

        return lax.scan(step, x, ts), lax.scan(step, x, ts, reverse=True)

    compare(gpu, f, X, ts, tol=1e-5)


def test_scans_over_scalars_and_integers(gpu):
    # A running product of scalars (S is a scalar: one invocation), and integer trajectories.
    f = lambda xs: lax.scan(lambda c, x: (c * x, c), jnp.float32(1), xs)
    compare(gpu, f, np.linspace(0.9, 1.1, 40, dtype=np.float32), tol=1e-5)
    g = lambda s: lax.scan(lambda c, _: (c * 1103515245 + 12345, c), s, None, length=30)
    compare(gpu, g, np.arange(100, dtype=np.uint32), tol=0)


def test_a_row_past_the_end_is_clamped(gpu):
    # A loop writing row i + 3 of 8 rows: rows past the end clamp to the last, as
    # dynamic_update_slice does.
    def f(x):
        def body(c):
            i, ys, v = c
            return i + 1, lax.dynamic_update_slice(ys, v[None], (i + 3, 0)), v * 2.0

        return lax.while_loop(lambda c: c[0] < 8, body, (0, jnp.zeros((8, 64), jnp.float32), x))

    compare(gpu, f, X)


@pytest.mark.parametrize("n", [0, 3, 8, 20])
def test_rows_not_written_keep_the_initial_value(gpu, n):
    # Rows updated in place: the loop writes rows 0 .. n-1 of 12 (a traced n) into an array
    # that is also returned as it was, so it cannot be taken: the rows past n keep its values,
    # the array itself is unchanged.
    ys0 = np.arange(12 * 64, dtype=np.float32).reshape(12, 64) * 0.01

    def f(x, ys0, n):
        def body(i, c):
            ys, v = c
            return lax.dynamic_update_slice(ys, v[None], (i, 0)), jnp.cos(v) + 0.1

        ys, v = lax.fori_loop(0, n, body, (ys0, x))
        return ys, v, ys0 * 2.0

    compare(gpu, f, X, ys0, np.int32(n), tol=1e-6)


def test_rows_written_into_a_donated_array(gpu):
    # The initial array donated (the loop may take its buffer), written at every other row,
    # called again on the result.
    def body(i, c):
        ys, v = c
        return lax.dynamic_update_slice(ys, v[None], (2 * i, 0)), v * 0.5 + 1.0

    f = jax.jit(lambda ys, x: lax.fori_loop(0, 5, body, (ys, x))[0], donate_argnums=0)
    ys = jax.device_put(np.full((10, 64), -1.0, np.float32), gpu)
    want = np.full((10, 64), -1.0, np.float32)
    for _ in range(2):
        ys = f(ys, jax.device_put(X, gpu))
        v = X.copy()
        for i in range(5):
            want[2 * i] = v
            v = v * np.float32(0.5) + np.float32(1.0)
        np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-6)


def test_a_scan_stacking_twelve_values_runs_whole(gpu, tmp_path, monkeypatch):
    # Twelve stacked outputs of one shape, all starting from the same zeros (each a copy of
    # them, updated in place: one binding a stack, so the loop's states fit in one kernel).
    def f(xs, h0):
        def step(h, x):
            a = jnp.tanh(x + h)
            return a, tuple(a * (k + 1) + x * k for k in range(11)) + (h,)

        return lax.scan(step, h0, xs)

    x = np.cos(np.arange(20 * 8 * 64, dtype=np.float32)).reshape(20, 8, 64)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, x, X.reshape(1, 64).repeat(8, 0), tol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    program = "".join(p.read_text() for p in tmp_path.glob("*program.txt"))
    assert "while in kernel" in program, program


@pytest.mark.parametrize("n", [64, 66, 4096])
def test_scans_stacking_four_adjacent_elements(gpu, n, tmp_path, monkeypatch):
    # On CPU adapters a scan stacking rows carries four adjacent elements an invocation and
    # stores each row's four as one vec4 (`while_kernel::quads_for`): float and int32 rows,
    # a row computed from the carry, forwards and reversed; a state of 66 elements (not a
    # multiple of 4) keeps one element an invocation.
    def f(x, k, ts):
        def step(c, t):
            x, k = c
            x2 = jnp.cos(x) * 0.5 + t
            return (x2, k * 3 + 1), (x, x2 * t, k)

        return lax.scan(step, (x, k), ts), lax.scan(step, (x, k), ts, reverse=True)

    x = np.cos(np.arange(n, dtype=np.float32))
    k = np.arange(n, dtype=np.int32)
    ts = np.linspace(0, 1, 37, dtype=np.float32)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, x, k, ts, tol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    shaders = "".join(p.read_text() for p in tmp_path.glob("*while*.wgsl"))
    assert "while loop whole" in shaders, shaders[:2000]
    quads = "4 adjacent elements an invocation" in shaders
    assert quads == (cpu_kernel_class(gpu) and n % 4 == 0), shaders[:2000]


ROWS = {
    "i": lambda i: i,
    "7 - i": lambda i: 7 - i,
    "i + 3": lambda i: i + 3,
    "i - 2": lambda i: i - 2,
    "9 - i": lambda i: 9 - i,
    "i % 8": lambda i: i % 8,
}


@pytest.mark.parametrize(
    "start, stop, row, fresh",
    [
        (0, 8, "i", True),  # rows 0 .. 7 of 8: a scan's stack
        (0, 8, "7 - i", True),  # backwards
        (0, 10, "9 - i", True),  # rows 9 .. 0, clamped: the last of three writes to row 7 stays
        (2, 10, "i - 2", True),  # a counter from 2
        (0, 8, "i + 3", False),  # rows 3 .. 10, clamped: rows 0 .. 2 keep the initial value
        (0, 6, "i", False),  # rows 0 .. 5: rows 6 and 7 keep it
        (0, 10, "i - 2", False),  # rows -2 and -1 wrap to 6 and 7 (jax): not followed
        (0, 8, "i % 8", False),  # every row, but not followed
        (0, 0, "i", False),  # no iterations: the stack as it was
    ],
)
def test_stacks_every_row_of_which_a_loop_writes(gpu, start, stop, row, fresh, tmp_path, monkeypatch):
    # A fori_loop writing row `row(i)` of 8 rows of a stack of ones. Where every row is
    # written the stack starts as a buffer of any contents, and its ones are never computed
    # (`whole_loops::every_row_written`); elsewhere the rows not written keep them.
    def f(x):
        def body(i, c):
            ys, v = c
            return lax.dynamic_update_slice(ys, v[None], (ROWS[row](i), 0)), jnp.cos(v) + 0.1

        return lax.fori_loop(start, stop, body, (jnp.ones((8, 64), jnp.float32), x))

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, X, tol=1e-6)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    program = "".join(p.read_text() for p in tmp_path.glob("*program.txt"))
    if stop > start:
        assert "while in kernel" in program, program
    assert ("every row written" in program) == fresh, program


def test_a_scan_inside_a_loop_starts_its_stack_fresh_each_time(gpu):
    # The stack of a scan in the body of a loop run from the host: a fresh buffer each
    # iteration, every row written again.
    def f(x):
        def outer(c):
            k, v, acc = c
            v2, ys = lax.scan(lambda h, t: (jnp.sin(h) + t, h * t), v, jnp.linspace(0, 1, 12))
            return k + 1, v2, acc + ys.sum(0)

        return lax.while_loop(lambda c: c[0] < 3, outer, (0, x, jnp.zeros_like(x)))

    compare(gpu, f, X, tol=1e-5)


TABLE = np.sin(np.arange(100, dtype=np.float32) * 0.37)


@pytest.mark.parametrize("mode", ["index", "clip", "fill", "wrap"])
def test_lookups_in_a_table(gpu, mode, tmp_path, monkeypatch):
    # Each element looks up a table from outside at a place computed from itself (a gather
    # whose indices are of the state's shape): runs as one loop kernel. Indices run past both
    # ends: `fill` reads NaN there, `clip` the end, indexing wraps negatives once (and clamps).
    def f(x, t):
        def body(i, c):
            j = (c * 60).astype(jnp.int32) + i - 10
            if mode == "index":
                v = t[j]
            elif mode == "wrap":
                v = t[j % 100]
            else:
                v = jnp.take(t, j, mode=mode, fill_value=jnp.nan if mode == "fill" else None)
            v = jnp.where(jnp.isnan(v), -0.5, v)
            return jnp.tanh(c * 0.8 + v * 0.3)

        return lax.fori_loop(0, 25, body, x)

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, X, TABLE, tol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    program = "".join(p.read_text() for p in tmp_path.glob("*program.txt"))
    assert "while in kernel" in program, program


def test_lookups_over_a_large_state(gpu):
    # 2^14 elements of two dimensions (chains of four on CPU adapters), a table from outside
    # and one the body slices from it at the counter.
    x = np.cos(np.arange(1 << 14, dtype=np.float32)).reshape(128, 128)

    def f(x, t):
        def body(i, c):
            window = lax.dynamic_slice(t, (i,), (50,))
            j = jnp.clip((c * 25 + 25).astype(jnp.int32), 0, 49)
            return jnp.sin(c + window[j] * 0.2)

        return lax.fori_loop(0, 40, body, x)

    compare(gpu, f, x, TABLE, tol=1e-5)


def program_of(tmp_path, monkeypatch, gpu, f, *args, tol):
    """Compares `f` with cpu while dumping; the dumped programs, joined."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, *args, tol=tol)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    return "".join(p.read_text() for p in tmp_path.glob("*program.txt"))


SORTED = np.sort(np.concatenate([np.round(np.sin(np.arange(997)) * 50) / 10,
                                 [-9.0, 9.0, 0.0]])).astype(np.float32)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_runs_whole(gpu, side, tmp_path, monkeypatch):
    # `jnp.searchsorted` searches by a loop of log2(n) steps, each gathering the table as
    # S x 1 (an offset dimension, not a collapsed one): one loop kernel. Queries on ties (the
    # table repeats values), past both ends and in between; exact.
    q = np.concatenate([SORTED[::3], np.linspace(-12, 12, 3000), [np.inf, -np.inf]])
    q = q.astype(np.float32)
    program = program_of(tmp_path, monkeypatch, gpu,
                         lambda a, v: jnp.searchsorted(a, v, side=side), SORTED, q, tol=0)
    assert "while in kernel" in program, program


def test_interp_in_a_loop_runs_whole(gpu, tmp_path, monkeypatch):
    # `jnp.interp` in a loop's body: its search is a loop counted at compile time inside the
    # loop, which becomes copies of its body (no loop), so the outer loop runs whole.
    xp = np.linspace(-3, 3, 64).astype(np.float32)
    x = np.cos(np.arange(4096, dtype=np.float32)) * 4

    def f(x, xp, fp, n):
        return lax.fori_loop(0, n, lambda i, c: jnp.interp(c, xp, fp) * 2 + 0.1 * c, x)

    program = program_of(tmp_path, monkeypatch, gpu, f, x, xp, np.sin(xp), np.int32(12),
                         tol=1e-5)
    assert "while in kernel" in program, program
    assert not re.search(r"^\s*while \[", program, re.M), program


def test_short_counted_loops_inside_a_loop(gpu, tmp_path, monkeypatch):
    # fori_loop(0, 5) inside fori_loop(0, n), and a scan of 3 steps: copies of their bodies,
    # the outer loop one kernel. The counter of each copy is its own.
    def f(x, n):
        def outer(i, c):
            c = lax.fori_loop(0, 5, lambda j, d: jnp.sin(d) * 0.9 + 0.01 * j + 0.001 * i, c)
            c, _ = lax.scan(lambda d, t: (d * t + 0.1, None), c, jnp.arange(1.0, 1.3, 0.1))
            return c

        return lax.fori_loop(0, n, outer, x)

    program = program_of(tmp_path, monkeypatch, gpu, f, X, np.int32(9), tol=1e-5)
    assert "while in kernel" in program, program
    assert not re.search(r"^\s*while \[", program, re.M), program


def matrix(n, seed=0):
    return (np.random.default_rng(seed).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)


MATVEC_FORMS = {
    "A @ v": lambda a, v: jnp.tanh(a @ v) + 0.01,
    "v @ A": lambda a, v: jnp.tanh(v @ a) + 0.01,
    "A.T @ v": lambda a, v: jnp.sin(a.T @ v),
    "two products": lambda a, v: jnp.tanh(a @ v + 0.5 * (jnp.cos(v) @ a)),
}


@pytest.mark.parametrize("n", [1, 7, 64, 100, 128, 256])
@pytest.mark.parametrize("form", list(MATVEC_FORMS))
def test_products_with_a_matrix(gpu, n, form, budget, tmp_path, monkeypatch):
    # A loop multiplying its state by a matrix from outside runs in one workgroup, an
    # invocation an element (up to 256 elements; quads of the matrix's rows where n allows,
    # the matrix transposed before the loop for `v @ A`); with a budget of 16 iterations a
    # launch the larger ones run from the host. Against cpu, to a traced bound.
    step = MATVEC_FORMS[form]
    v = np.cos(np.arange(n, dtype=np.float32))
    f = lambda a, v, k: lax.fori_loop(0, k, lambda i, v: step(a, v), v)
    program = program_of(tmp_path, monkeypatch, gpu, f, matrix(n), v, np.int32(150), tol=1e-5)
    if budget == "one launch":
        assert "while in kernel" in program, program
        wgsl = "".join(p.read_text() for p in tmp_path.glob("*while_*.wgsl"))
        assert "one workgroup: it multiplies them by a matrix" in wgsl


def test_a_markov_chain(gpu, tmp_path, monkeypatch):
    # p @ T, 400 steps: the distribution stays one (to rounding) and matches cpu.
    t = np.abs(matrix(64, 1))
    t = (t / t.sum(1, keepdims=True)).astype(np.float32)
    p0 = np.full(64, 1 / 64, np.float32)
    f = lambda t, p: lax.fori_loop(0, 400, lambda i, p: p @ t, p)
    program_of(tmp_path, monkeypatch, gpu, f, t, p0, tol=1e-6)


def test_an_ode_and_an_rnn_over_inputs(gpu, tmp_path, monkeypatch):
    # Explicit Euler steps of y' = A y - y^3, and a scan reading its inputs by the counter.
    a = matrix(48, 2)
    y0 = np.sin(np.arange(48, dtype=np.float32))
    xs = np.cos(np.arange(30 * 48, dtype=np.float32)).reshape(30, 48)
    euler = lambda a, y: lax.fori_loop(0, 200, lambda i, y: y + 0.01 * (a @ y - y ** 3), y)
    rnn = lambda a, h, xs: lax.scan(lambda h, x: (jnp.tanh(a @ h + x), None), h, xs)[0]
    assert "while in kernel" in program_of(tmp_path, monkeypatch, gpu, euler, a, y0, tol=1e-5)
    assert "while in kernel" in program_of(tmp_path / "rnn", monkeypatch, gpu, rnn, a, y0, xs,
                                           tol=1e-5)


def workgroup_kernels(tmp_path):
    return sum("one workgroup: it multiplies them by a matrix" in p.read_text()
               for p in tmp_path.glob("*while_*.wgsl"))


def test_products_and_reductions(gpu, budget, tmp_path, monkeypatch):
    # Power iteration (a norm after each product), a Jacobi iteration to a tolerance (a max in
    # the cond), convergence by `jnp.any` (a bool reduction), a softmax of the product: the
    # reductions share the workgroup (invocation 0 folds in order, all read the result).
    n = 60
    a = matrix(n, 3)
    s = (a @ a.T + np.eye(n)).astype(np.float32)
    d = (np.diag(np.abs(a).sum(1) + 1.0) + a).astype(np.float32)
    v = np.cos(np.arange(n, dtype=np.float32))

    def power(s, v):
        def body(i, v):
            w = s @ v
            return w / jnp.sqrt(jnp.sum(w * w))

        return lax.fori_loop(0, 100, body, v)

    def jacobi(d, b):
        dg = jnp.diag(d)
        r = d - jnp.diag(dg)
        cond = lambda c: (jnp.max(jnp.abs(c[0] - c[1])) > 1e-6) & (c[2] < 500)
        body = lambda c: ((b - r @ c[0]) / dg, c[0], c[2] + 1)
        return lax.while_loop(cond, body, (b / dg, jnp.zeros_like(b), 0))

    def converge(s, v):
        def body(c):
            w = s @ c[0]
            return w / jnp.linalg.norm(w), c[0], c[2] + 1

        cond = lambda c: jnp.any(jnp.abs(c[0] - c[1]) > 1e-5) & (c[2] < 300)
        return lax.while_loop(cond, body, (v / jnp.linalg.norm(v), jnp.zeros_like(v), 0))

    soft = lambda a, v: lax.fori_loop(0, 50, lambda i, v: jax.nn.softmax(a @ v) * 60, v)
    for k, (f, args) in enumerate([(power, (s, v)), (jacobi, (d, v)), (converge, (s, v)),
                                   (soft, (a, v))]):
        where = tmp_path / str(k)
        program_of(where, monkeypatch, gpu, f, *args, tol=1e-5)
        # (16 iterations a launch may not hold a product of 60: from the host then. Where
        # subgroups share the vector, its loop runs a back-edge for every eight words.)
        if budget == "one launch":
            assert workgroup_kernels(where) == 1, f


@pytest.mark.parametrize("form", ["scaled", "by the counter", "sliced", "sliced at the counter"])
def test_products_with_a_matrix_the_loop_computes(gpu, form):
    # The matrix is computed in the body from values that do not change (no buffer of its
    # own): read element by element where the product needs it. These stopped the compile
    # with "value has no buffer" before.
    a = matrix(64, 4)
    v = np.cos(np.arange(64, dtype=np.float32))
    steps = {
        "scaled": lambda a, i, v: jnp.tanh((a * 0.5) @ v),
        "by the counter": lambda a, i, v: jnp.tanh((a * (1.0 - 0.01 * i)) @ v),
        "sliced": lambda a, i, v: jnp.tanh(a[:32, 8:40] @ v),
        "sliced at the counter": lambda a, i, v: jnp.tanh(
            lax.dynamic_slice(a, (i, 0), (32, 32)) @ v),
    }
    step = steps[form]
    f = lambda a, v: lax.fori_loop(0, 20, lambda i, v: step(a, i, v), v)
    compare(gpu, f, a, v if form in ("scaled", "by the counter") else v[:32], tol=1e-5)


@pytest.mark.parametrize("n", [7, 50, 64])
def test_an_rnn_stacking_its_states(gpu, n, budget, tmp_path, monkeypatch):
    # lax.scan returning every hidden state (RNN inference): the stacked rows are written in
    # place by the workgroup, each invocation its element of the row.
    a = matrix(n, 5)
    h0 = np.sin(np.arange(n, dtype=np.float32))
    xs = np.cos(np.arange(40 * n, dtype=np.float32)).reshape(40, n)
    rnn = lambda a, h, xs: lax.scan(lambda h, x: (jnp.tanh(a @ h + x),) * 2, h, xs)
    program_of(tmp_path, monkeypatch, gpu, rnn, a, h0, xs, tol=1e-5)
    if budget == "one launch":
        assert workgroup_kernels(tmp_path) == 1


def test_workgroup_loops_over_several_launches(gpu, tmp_path, monkeypatch):
    # A small budget of iterations an invocation: a few iterations a launch, each launch
    # starting from the state (and the rows) the last wrote. An RNN stacking its states and
    # power iteration (a reduction), n = 64 and 50. With the vector shared through subgroups
    # (CPU adapters) an iteration takes fewer back-edges: 40 then, 200 with workgroup reads.
    from conftest import cpu_kernel_class

    cases = [("0", "200")]
    if cpu_kernel_class(gpu) and os.environ.get("WGPU_HLO_SUBGROUPS", "").strip() != "0":
        cases.append(("1", "40"))
    for subgroups, limit in cases:
        monkeypatch.setenv("WGPU_HLO_WHILE_SUBGROUPS", subgroups)
        monkeypatch.setenv("WGPU_HLO_MAX_LOOP", limit)
        for n in [64, 50]:
            a = matrix(n, 6)
            h0 = np.sin(np.arange(n, dtype=np.float32))
            xs = np.cos(np.arange(30 * n, dtype=np.float32)).reshape(30, n)
            rnn = lambda a, h, xs: lax.scan(lambda h, x: (jnp.tanh(a @ h + x),) * 2, h, xs)
            power = lambda a, v: lax.fori_loop(
                0, 30, lambda i, v: (a @ v) / jnp.sqrt(jnp.sum((a @ v) ** 2)), v)
            for k, (f, args) in enumerate([(rnn, (a, h0, xs)), (power, (a @ a.T, h0))]):
                where = tmp_path / f"{subgroups}_{n}_{k}"
                program = program_of(where, monkeypatch, gpu, f, *args, tol=1e-5)
                m = re.search(r"\((\d+) iterations a launch; trip count: 30", program)
                assert m and int(m.group(1)) < 30, program
                assert workgroup_kernels(where) == 1


def switched_off(monkeypatch, switch, f, *args):
    """`jit(f)(*args)` compiled with `switch=0`, as numpy leaves (a new function each call:
    jit caches executables by function)."""
    monkeypatch.setenv(switch, "0")
    out = jax.tree.map(np.asarray, jax.jit(lambda *a: f(*a))(*args))
    monkeypatch.delenv(switch)
    return out


@pytest.mark.parametrize("n", [4, 16, 48, 50, 100, 128])
def test_rows_held_and_four_elements_an_invocation(gpu, n, budget, tmp_path, monkeypatch):
    # On CPU adapters a workgroup loop kernel holds each invocation's rows of the matrix in
    # private memory, loaded once, and carries four elements an invocation where the rows
    # held stay few (n <= 64; two up to 100): the same sums in the same order as the plain form
    # (`WGPU_HLO_WHILE_PRIVATE_ROWS=0`, an element an invocation, rows read each step), so
    # both give the same bits. A product, a norm beside it, and a matrix the loop computes.
    # With 16 iterations a launch the rows' loads may not fit: the plain form, or the host.
    from conftest import cpu_kernel_class

    a = matrix(n, 7)
    v = np.cos(np.arange(n, dtype=np.float32))
    forms = {
        "product": lambda a, v: lax.fori_loop(0, 60, lambda i, v: jnp.tanh(a @ v) + 0.01, v),
        "normed": lambda a, v: lax.fori_loop(
            0, 40, lambda i, v: (v @ a) / jnp.sqrt(jnp.sum((v @ a) ** 2)), v),
        "computed": lambda a, v: lax.fori_loop(
            0, 40, lambda i, v: jnp.sin((0.5 * a) @ v + v), v),
    }
    for name, f in forms.items():
        where = tmp_path / name
        plain = switched_off(monkeypatch, "WGPU_HLO_WHILE_PRIVATE_ROWS", f,
                             jax.device_put(a, gpu), jax.device_put(v, gpu))
        program = program_of(where, monkeypatch, gpu, f, a, v, tol=1e-5)
        assert budget == "many launches" or "while in kernel" in program, program
        held = np.asarray(jax.jit(f)(jax.device_put(a, gpu), jax.device_put(v, gpu)))
        np.testing.assert_array_equal(held, plain)
        wgsl = "".join(p.read_text() for p in where.glob("*while_*.wgsl"))
        if budget == "many launches":
            continue
        assert "one workgroup: it multiplies them by a matrix" in wgsl
        if cpu_kernel_class(gpu) and name != "computed":
            assert "each invocation holding its rows" in wgsl, wgsl
            assert ("4 elements an invocation" in wgsl) == (n % 4 == 0 and n <= 64), wgsl
            assert ("2 elements an invocation" in wgsl) == (n in (50, 100)), wgsl


@pytest.mark.parametrize("n", [1, 7, 16, 50, 64, 100, 128, 200, 255, 256])
def test_vectors_shared_through_subgroups(gpu, n, budget, tmp_path, monkeypatch):
    # On CPU adapters with subgroups of one size a workgroup loop kernel's invocations each
    # read one word in eight of a product's vector (or a reduction's elements) from workgroup
    # memory and take the others from their subgroup (`subgroupBroadcast`); the workgroup is
    # whole subgroups, the invocations past the elements repeating the last. The same sums in
    # the same order as the workgroup reads (`WGPU_HLO_WHILE_SUBGROUPS=0`): the same bits
    # (with the default budget).
    # Word counts with and without a tail past the last eight, scalar words (n % 4 != 0), a
    # matrix the loop computes, float and integer reductions, a max in the cond.
    from conftest import cpu_kernel_class

    a = matrix(n, 8)
    v = np.cos(np.arange(n, dtype=np.float32))
    forms = {
        "A @ v": lambda a, v: lax.fori_loop(0, 60, lambda i, v: jnp.tanh(a @ v) + 0.01, v),
        "v @ A, normed": lambda a, v: lax.fori_loop(
            0, 40, lambda i, v: (v @ a) / jnp.sqrt(jnp.sum((v @ a) ** 2) + 1e-3), v),
        "computed": lambda a, v: lax.fori_loop(
            0, 40, lambda i, v: jnp.sin((0.5 * a) @ v + v), v),
        "integer count": lambda a, v: lax.fori_loop(
            0, 30, lambda i, v: jnp.tanh(a @ v) * (
                1.0 + 0.002 * jnp.sum((v > 0).astype(jnp.int32)).astype(jnp.float32)), v),
        "until still": lambda a, v: lax.while_loop(
            lambda c: (jnp.max(jnp.abs(c[0] - c[1])) > 1e-4) & (c[2] < 200),
            lambda c: (jnp.tanh(0.5 * (a @ c[0])) + 0.2, c[0], c[2] + 1),
            (v, v + 1.0, 0)),
    }
    for name, f in forms.items():
        where = tmp_path / name.replace(" ", "_").replace(",", "").replace("@", "at")
        args = (jax.device_put(a, gpu), jax.device_put(v, gpu))
        plain = switched_off(monkeypatch, "WGPU_HLO_WHILE_SUBGROUPS", f, *args)
        # (Against cpu to 5e-5: from the host, 60 steps at 128 drifted 1.3e-5 once.)
        program = program_of(where, monkeypatch, gpu, f, a, v, tol=5e-5)
        if budget == "many launches" or n == 1:
            # (16 iterations a launch: one form may run from the host where the other fits.)
            continue
        shared = jax.tree.map(np.asarray, jax.jit(f)(*args))
        jax.tree.map(np.testing.assert_array_equal, shared, plain)
        assert "while in kernel" in program, (name, program)
        wgsl = "".join(p.read_text() for p in where.glob("*while_*.wgsl"))
        assert "one workgroup: it multiplies them by a matrix" in wgsl, name
        if cpu_kernel_class(gpu) and os.environ.get("WGPU_HLO_SUBGROUPS", "").strip() != "0":
            assert "shared through subgroups" in wgsl, (name, wgsl)


def test_larger_products_run_from_the_host(gpu, tmp_path, monkeypatch):
    # Past 256 elements (the largest workgroup every adapter allows) the loop stays on the
    # host.
    f = lambda a, v: lax.fori_loop(0, 20, lambda i, v: jnp.tanh(v @ a), v)
    program = program_of(tmp_path, monkeypatch, gpu, f, matrix(300), np.ones(300, np.float32),
                         tol=1e-5)
    assert "while in kernel" not in program, program


# Loops whose elements stop on their own: `jax.vmap` of a `while_loop` (its predicate becomes
# `any(P)`, its body `where(P, body(x), x)`), and loops masking their updates with a state.
# Each invocation runs until its own element's predicate fails (`WholeLoop::each`).
A = np.concatenate([np.linspace(0.01, 1000, 997), [0.0, 1.0, 4.0]]).astype(np.float32)


def bisect_sqrt(a):
    def body(c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        big = mid * mid > a
        return jnp.where(big, lo, mid), jnp.where(big, mid, hi)

    lo, hi = lax.while_loop(lambda c: c[1] - c[0] > 1e-6 * jnp.maximum(1.0, a), body,
                            (jnp.float32(0), jnp.maximum(a, 1.0)))
    return lo, hi


def test_vmapped_bisection(gpu):
    # 1000 elements, 0 to 30 iterations each, exact against cpu.
    compare(gpu, jax.vmap(bisect_sqrt), A, tol=0)


def test_vmapped_newton_with_a_counter(gpu):
    # The counter is batched too: each element counts its own iterations.
    def newton(a):
        return lax.while_loop(lambda c: (jnp.abs(c[0] * c[0] - a) > 1e-5 * a) & (c[1] < 100),
                              lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1), (a + 1.0, 0))

    compare(gpu, jax.vmap(newton), A[:-3] + 0.5, tol=0)


def test_vmapped_collatz_on_a_grid(gpu):
    # Integer trip counts from 0 to 261 over a 2-D state, exact.
    def steps(x):
        return lax.while_loop(lambda c: c[0] > 1,
                              lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1),
                                         c[1] + 1), (x, 0))

    compare(gpu, jax.vmap(jax.vmap(steps)), np.arange(1, 2001, dtype=np.int32).reshape(40, 50),
            tol=0)


def test_a_mask_carried_as_state(gpu):
    # A series summed to a tolerance per element, masked by an `enabled` state (the form of
    # jax's own series loops): terms of exp(x) until they fall below 1e-7 of the sum. The
    # bool state packs four to a word: each invocation carries a word's four elements, and
    # 513 leaves a word of one.
    def f(x):
        def body(c):
            on, k, term, total = c
            term2 = jnp.where(on, term * x / k, term)
            total2 = jnp.where(on, total + term2, total)
            return on & (jnp.abs(term2) > 1e-7 * jnp.abs(total2)), k + 1.0, term2, total2

        one = jnp.ones_like(x)
        return lax.while_loop(lambda c: jnp.any(c[0]), body,
                              (jnp.ones(x.shape, bool), one, one, one))

    compare(gpu, f, np.linspace(-3, 8, 513, dtype=np.float32), tol=0)


def test_loops_that_change_finished_elements(gpu):
    # Not per element: every element halves while any is above 1, and a mask that differs
    # from the predicate at exactly 1 (`>=` against `>`): finished elements still change.
    x = np.concatenate([[1.0, 0.75, 3.0], np.linspace(2, 900, 997)]).astype(np.float32)
    compare(gpu, lambda x: lax.while_loop(lambda v: jnp.any(v > 1), lambda v: v * 0.5, x), x,
            tol=0)
    compare(gpu, lambda x: lax.while_loop(lambda v: jnp.any(v > 1),
                                          lambda v: jnp.where(v >= 1, v * 0.5, v), x), x, tol=0)


def test_vmapped_loops_that_never_start(gpu):
    # Every predicate false from the start (one launch, no iteration), and NaNs (false).
    compare(gpu, jax.vmap(bisect_sqrt), np.zeros(300, np.float32), tol=0)
    compare(gpu, jax.vmap(bisect_sqrt), np.full(300, np.nan, np.float32), tol=0)


SPECIAL = {
    "gammainc": (jax.scipy.special.gammainc, 2),
    "gammaincc": (jax.scipy.special.gammaincc, 2),
    "betainc": (jax.scipy.special.betainc, 3),
    "gammainc grad": (jax.grad(lambda a, x: jax.scipy.special.gammainc(a, x).sum()), 2),
}


@pytest.mark.parametrize("name", list(SPECIAL))
@pytest.mark.parametrize("n", [1001, 4096])
def test_jax_series_loops(gpu, name, n):
    # jax's own series loops: an `enabled` mask (bool, packed) and a scalar counter bounding
    # the iterations (`count < 2000 && any(enabled)`), whose result is unused: each element
    # runs its own series. Arguments over the ranges where the series and the continued
    # fraction take over from each other, NaNs and values at the edges.
    f, arity = SPECIAL[name]
    rng = np.random.default_rng(n)
    a = rng.uniform(0.1, 30, n).astype(np.float32)
    x = rng.uniform(0.0, 40, n).astype(np.float32)
    a[:4] = [np.nan, 0.0, 1.0, 1e-3]
    x[4:8] = [np.nan, 0.0, 1e-6, 1e3]
    args = (a, x) if arity == 2 else (a, x * 0.1 + 0.1, rng.uniform(0, 1, n).astype(np.float32))
    compare(gpu, f, *args, tol=2e-5)


def test_the_dump_shows_series_loops_as_kernels(tmp_path):
    # Both of gammainc's loops (a series with 15 states and 31 bindings were it not for the
    # states updated in place, and a continued fraction) are loop kernels, each element on
    # its own; none runs from the host.
    code = textwrap.dedent("""
        import numpy as np, jax
        d = jax.devices("wgpu")[0]
        a = jax.device_put(np.linspace(0.5, 5, 4096, dtype=np.float32), d)
        x = jax.device_put(np.linspace(0.1, 8, 4096, dtype=np.float32), d)
        print(np.asarray(jax.jit(jax.scipy.special.gammainc)(a, x)).sum())
    """)
    dump = run_dumped(tmp_path, code)
    program = "".join(p.read_text() for p in dump.glob("*gammainc*program.txt"))
    assert program.count("each element until its own predicate fails") == 2, program
    assert not re.search(r"^while \[", program, re.M), program


def test_packed_states_in_step(gpu):
    # Loops whose elements move together, with bool, int8 and float16 states (packed four
    # and two to a word), over counts that leave a partial word.
    def f(x, n):
        def body(i, c):
            on, small, half, v = c
            v2 = jnp.where(on, jnp.sin(v) + 0.1 * i, v)
            return (v2 > 0) ^ on, (small + 3).astype(jnp.int8), (half * 0.5 + 1).astype(
                jnp.float16), v2

        x16 = x.astype(jnp.float16)
        return lax.fori_loop(0, n, body, (x > 0, jnp.zeros(x.shape, jnp.int8), x16, x))

    for size in [1, 3, 6, 64, 1001]:
        x = np.linspace(-2, 2, size, dtype=np.float32)
        compare(gpu, f, x, np.int32(50), tol=1e-3)


def test_a_counter_read_after_the_loop(gpu):
    # The series' counter returned too: the longest-running element's count, which no
    # invocation knows, so the loop is not run element by element; the results still agree.
    def f(x):
        def body(c):
            on, k, v = c
            k2 = k + 1.0
            v2 = jnp.where(on, v / k2, v)
            return on & (v2 > 1), k2, v2

        return lax.while_loop(lambda c: (c[1] < 50) & jnp.any(c[0]), body,
                              (jnp.ones(x.shape, bool), jnp.float32(0), x))

    compare(gpu, f, np.linspace(0.5, 1e6, 777, dtype=np.float32), tol=0)


def test_initial_values_stay_as_they_were(gpu):
    # A loop updates its states in place, starting from copies of the initial values where
    # anyone else holds them: the arguments, read again after the call, and another loop
    # starting from the same value.
    def f(x):
        on = jnp.ones(x.shape, bool)
        a = lax.while_loop(lambda c: jnp.any(c[0]),
                           lambda c: (c[0] & (c[1] * 0.5 > 1), jnp.where(c[0], c[1] * 0.5, c[1])),
                           (on, x))[1]
        b = lax.fori_loop(0, 10, lambda i, v: v + 1.0, x)
        return a, b, x * 2

    x0 = np.linspace(1, 3000, 1000, dtype=np.float32)
    x = jax.device_put(x0, gpu)
    g = jax.jit(f)
    first = [np.asarray(r) for r in g(x)]
    second = [np.asarray(r) for r in g(x)]
    np.testing.assert_array_equal(np.asarray(x), x0)
    for r1, r2, want in zip(first, second, f(jax.device_put(x0, jax.devices("cpu")[0]))):
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_allclose(r1, np.asarray(want), rtol=1e-6)
    # Donated: the loop may take the argument's buffer.
    d = jax.jit(lambda x: lax.fori_loop(0, 10, lambda i, v: v * 0.5 + 1.0, x), donate_argnums=0)
    got = np.asarray(d(jax.device_put(x0, gpu)))
    want = np.asarray(jax.jit(lambda x: lax.fori_loop(0, 10, lambda i, v: v * 0.5 + 1.0, x))(
        jax.device_put(x0, jax.devices("cpu")[0])))
    np.testing.assert_allclose(got, want, rtol=1e-6)
