"""Products of a scan's slice with a loop-invariant operand computed for every slice before the
loop (`src/passes/hoist_dots.rs`): a recurrent cell's input projection `x_t @ W`, the slice on
the right (`W @ x_t.T`), batched slices, a reversed scan, a scan shorter than its inputs (not
hoisted), and the GRU's value and gradient — every result against jax cpu, which runs the loops
as written, and against the plugin with the pass off."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu

RNG = np.random.default_rng(7)


def compare(gpu, f, *args, tol=2e-5):
    compare_with_cpu(gpu, f, *args, tol=tol)


def arr(*shape):
    return (0.3 * RNG.standard_normal(shape)).astype(np.float32)


XS, W, U, H0 = arr(40, 16, 24), arr(24, 32), arr(32, 32), arr(16, 32)


@pytest.mark.parametrize("reverse", [False, True])
def test_input_projection(gpu, reverse):
    def f(xs, w, u, h0):
        def cell(h, x):
            h = jnp.tanh(x @ w + h @ u)
            return h, h.sum(1)

        return lax.scan(cell, h0, xs, reverse=reverse)

    # The per-step outputs are sums of 32 tanh values (up to ~10) after up to 40 steps of the
    # recurrence: on an H200 one of the 640 sums was 3.9e-5 off (at 0.249, from terms of
    # magnitude ~1), within the rounding of 32-term f32 sums, over the default 2e-5.
    compare(gpu, f, XS, W, U, H0, tol=1e-4)


def test_slice_on_the_right(gpu):
    def f(xs, w, u, h0):
        def cell(h, x):
            h = jnp.tanh((w.T @ x.T).T + h @ u)
            return h, None

        return lax.scan(cell, h0, xs)[0]

    compare(gpu, f, XS, W, U, H0)


def test_batched_slices(gpu):
    xs, w = arr(30, 3, 8, 5), arr(3, 5, 6)

    def f(xs, w):
        def cell(c, x):
            y = jnp.einsum("bik,bkj->bij", x, w)
            return c + jnp.sin(y).sum(), y[:, 0]

        return lax.scan(cell, jnp.float32(0), xs)

    compare(gpu, f, xs, w)


def test_fewer_steps_than_slices(gpu):
    def f(xs, w):
        return lax.fori_loop(0, 5, lambda i, c: c + jnp.tanh(xs[i] @ w), jnp.zeros((16, 32)))

    compare(gpu, f, XS, W)


def test_gru_value_and_gradient(gpu):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    from bench_everyday import gru_grads

    h, d, t, b = 32, 16, 20, 8
    p = [arr(*s) for s in [(d, h), (h, h), (d, h), (h, h), (d, h), (h, h), (h, 1)]]
    compare(gpu, gru_grads, p, arr(t, b, d), arr(b, 1), tol=1e-4)


def test_same_results_with_the_pass_off(gpu):
    """The hoisted products against the loop's own, in one process each (the pass reads its
    switch when it compiles)."""
    code = textwrap.dedent(
        """
        import numpy as np, jax, jax.numpy as jnp
        from jax import lax
        rng = np.random.default_rng(3)
        xs, w, u = (rng.standard_normal(s).astype(np.float32) for s in [(64, 8, 32), (32, 16), (16, 16)])
        def f(xs, w, u):
            return lax.scan(lambda h, x: (jnp.tanh(x @ w + h @ u), None), jnp.zeros((8, 16)), xs)[0]
        d = jax.devices("wgpu")[0]
        print(repr(np.asarray(jax.jit(f)(*jax.device_put((xs, w, u), d))).tolist()))
        """
    )
    outs = []
    for value in ["0", "1"]:
        env = dict(os.environ, WGPU_HLO_HOIST_DOTS=value)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(np.array(eval(r.stdout.strip().splitlines()[-1]), dtype=np.float32))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_flax_lstm_training_steps(gpu):
    """flax's fused LSTM cell: one product for the four gates, whose gradient the backward scan
    sums by slices (one accumulator per gate), then optax's Adam; three steps fed back."""
    flax = pytest.importorskip("flax")
    optax = pytest.importorskip("optax")
    nn = flax.linen

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.RNN(nn.OptimizedLSTMCell(32))(x)
            return nn.Dense(1)(y[:, -1])

    x, y = arr(8, 24, 12), arr(8, 1)
    m = Model()
    params = m.init(jax.random.PRNGKey(0), x)
    tx = optax.adam(1e-2)

    def steps(params, x, y):
        opt = tx.init(params)
        for _ in range(3):
            loss, g = jax.value_and_grad(lambda p: jnp.mean((m.apply(p, x) - y) ** 2))(params)
            u, opt = tx.update(g, opt, params)
            params = optax.apply_updates(params, u)
        return params, loss

    compare(gpu, steps, params, x, y, tol=1e-4)


@pytest.mark.parametrize("start, shift", [(0, 0), (3, 0), (2, -2), (0, 1), (1, -2)])
def test_accumulated_products_of_slices(gpu, start, shift):
    """`acc += xs[i + shift].T @ tanh(h)` for `i` from `start` to 40: the loop's sum is taken
    after it where every position is distinct and within `xs` (from 0, from 3 with positions
    never written, from 2 shifted down to 0); where the index runs past the end (clamped: the
    last slice read twice) or below 0 (JAX wraps -1 to the last slice), the loop keeps its
    product."""
    xs, h0 = arr(40, 16, 24), arr(16, 32)

    def f(xs, h0):
        def body(i, c):
            h, acc = c
            h = jnp.tanh(h * 1.1 + 0.1)
            x = lax.dynamic_index_in_dim(xs, i + shift, keepdims=False)
            return h, acc + x.T @ h

        return lax.fori_loop(start, 40, body, (h0, jnp.zeros((24, 32), jnp.float32)))

    compare(gpu, f, xs, h0)


@pytest.mark.parametrize("reverse", [False, True])
def test_accumulated_reductions(gpu, reverse):
    """Sums of a step's reductions (a bias gradient `db += dz.sum(0)`) leave the loop with the
    product's stack of the same value, or with a stack of their own at the trip counter
    (`h.sum(1)`); integer sums too."""
    xs, h0, w = arr(40, 16, 24), arr(16, 32), arr(24, 32)

    def f(xs, h0, w):
        def body(c, x):
            h, acc_w, acc_b, acc_s, acc_n = c
            h = jnp.tanh(x @ w + h * 0.5)
            dz = jnp.sin(h)
            n = (h > 0).astype(jnp.int32)
            return (h, acc_w + x.T @ dz, acc_b + dz.sum(0), acc_s + h.sum(1),
                    acc_n + n.sum(0)), None

        init = (h0, jnp.zeros((24, 32)), jnp.zeros(32), jnp.ones(16), jnp.zeros(32, jnp.int32))
        return lax.scan(body, init, xs, reverse=reverse)[0]

    compare(gpu, f, xs, h0, w)


def reductions_in_and_after_the_loop(dump_dir):
    """`stablehlo.reduce` ops inside the one loop of a dump's program after the passes, and
    after it."""
    (path,) = glob.glob(os.path.join(dump_dir, "*.after_passes.mlir"))
    text = open(path).read()
    start = text.index('"stablehlo.while"')
    end = text.index("}) : (", start)
    return text[start:end].count('"stablehlo.reduce"'), text[end:].count('"stablehlo.reduce"')


@pytest.mark.parametrize("also_read", [False, True])
def test_accumulated_slices_of_a_reduction(gpu, tmp_path, monkeypatch, also_read):
    """`acc_g += dz.sum(0)[g * 32:(g + 1) * 32]` for four gates (flax's `OptimizedLSTMCell`
    bias gradients: one reduction, an accumulator per slice) leave the loop as one reduction of
    the stacked values; when the body also reads the reduction otherwise, the loop keeps it."""
    xs, h0, w = arr(30, 16, 24), arr(16, 32), arr(24, 128)

    def f(xs, h0, w):
        def body(c, x):
            h, acc_w, accs, other = c
            dz = jnp.sin(x @ w + jnp.tile(h, 4))
            red = dz.sum(0)
            h = jnp.tanh(dz[:, :32] + h * 0.5)
            accs = tuple(a + red[g * 32:(g + 1) * 32] for g, a in enumerate(accs))
            if also_read:
                other = other + jnp.cos(red)
            return (h, acc_w + x.T @ dz, accs, other), None

        init = (h0, jnp.zeros((24, 128)), tuple(jnp.zeros(32) for _ in range(4)), jnp.zeros(128))
        return lax.scan(body, init, xs)[0]

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, xs, h0, w, tol=1e-4)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    assert reductions_in_and_after_the_loop(tmp_path) == ((1, 0) if also_read else (0, 1))


def dots_in_the_loop(dump_dir):
    """`stablehlo.dot_general` ops inside the one loop of a dump's program after the passes."""
    (path,) = glob.glob(os.path.join(dump_dir, "*.after_passes.mlir"))
    text = open(path).read()
    start = text.index('"stablehlo.while"')
    end = text.index("}) : (", start)
    return text[start:end].count("stablehlo.dot_general")


@pytest.mark.parametrize("layout", ["w", "w.T"])
def test_gate_products_of_the_state_merge(gpu, tmp_path, monkeypatch, layout):
    """A GRU cell's three products of its state with loop-invariant weights (flax's `GRUCell`:
    `h @ W_hr`, `h @ W_hz`, `h @ W_hn`) are one product with the weights concatenated before
    the loop (`src/passes/merge_dots.rs`), the gates read through slices; weights stored
    transposed (`h @ W.T`) concatenate along their rows. Bits equal to the pass off (one
    process: the pass reads its switch when it compiles), jax cpu's values to rounding."""
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    xs, h0 = arr(12, 16, 32), arr(16, 32)
    ws = [arr(32, 32) for _ in range(3)]

    def f(xs, h0, wr, wz, wn):
        mm = (lambda h, w: h @ w) if layout == "w" else (lambda h, w: h @ w.T)

        def cell(h, x):
            r = jax.nn.sigmoid(x + mm(h, wr))
            z = jax.nn.sigmoid(x * 0.5 + mm(h, wz))
            n = jnp.tanh(x + r * mm(h, wn))
            h = (1 - z) * n + z * h
            return h, h.sum(1)

        return lax.scan(cell, h0, xs)

    args = (xs, h0, *ws)
    outs, counts = [], []
    for value in ["1", "0"]:
        dump = tmp_path / value
        monkeypatch.setenv("WGPU_HLO_MERGE_DOTS", value)
        monkeypatch.setenv("WGPU_HLO_DUMP", str(dump))
        outs.append(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu)))
        monkeypatch.delenv("WGPU_HLO_DUMP")
        counts.append(dots_in_the_loop(dump))
    assert counts == [1, 3], counts
    for a, b in zip(jax.tree_util.tree_leaves(outs[0]), jax.tree_util.tree_leaves(outs[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    compare(gpu, f, *args, tol=1e-4)


def test_few_steps_of_large_weights_stay_apart(gpu, tmp_path, monkeypatch):
    """Two steps of products with three 256 x 256 weights: concatenating 768 KB of weights
    each call would copy more than the launches it saves (`merge_dots::COPY_PER_TRIP`)."""
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    h0, ws = arr(8, 256), [arr(256, 256) / 8 for _ in range(3)]

    def f(h0, a, b, c):
        return lax.fori_loop(0, 2, lambda i, h: jnp.tanh(h @ a) * jnp.sin(h @ b) + h @ c, h0)

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, h0, *ws, tol=1e-4)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    assert dots_in_the_loop(tmp_path) == 3
