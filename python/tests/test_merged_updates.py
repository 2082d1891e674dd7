"""In-place `dynamic_update_slice`s that can run at one point run as one step, one kernel
(`fusion::updates`): a `lax.scan` stacking several outputs per step, `fori_loop`s setting rows
of several arrays, updates whose results are read again within the step (which must see the
update), updates of one array twice in a step, mixed dtypes and shapes. Copies are exact, so
results must equal those with the updates apart (`WGPU_HLO_MERGE_UPDATES=0`) bit for bit, and
jax cpu's to rounding (the steps' arithmetic); the dump shows the merged step."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def same_as_cpu(gpu, f, *args, monkeypatch=None):
    """`f` on gpu against cpu (to rounding), and, given `monkeypatch`, against itself with the
    updates apart (exactly)."""
    got = leaves(jax.jit(f)(*jax.device_put(args, gpu)))
    want = leaves(jax.jit(f)(*jax.device_put(args, jax.devices("cpu")[0])))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    if monkeypatch is not None:
        monkeypatch.setenv("WGPU_HLO_MERGE_UPDATES", "0")
        # A new function object: JAX's cache would hand back the merged executable.
        apart = leaves(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu)))
        monkeypatch.delenv("WGPU_HLO_MERGE_UPDATES")
        for g, a in zip(got, apart):
            np.testing.assert_array_equal(g, a)


def same_with_switch_off(gpu, f, args, switch, tmp_path, monkeypatch):
    """`f` on gpu against cpu (to rounding) and against itself with `switch` set to 0 (bit for
    bit), its scans as written: unrolled 3 steps a trip, their stacking updates would be a
    third of each stack, which fusion rewrites whole instead of updating in place. Returns the
    dumped WGSL of its update kernels on CPU adapters, else `None`."""
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    same_as_cpu(gpu, f, *args)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    got = leaves(jax.jit(f)(*jax.device_put(args, gpu)))
    monkeypatch.setenv(switch, "0")
    # A new function object: JAX's cache would hand back the first executable.
    off = leaves(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu)))
    monkeypatch.delenv(switch)
    for g, o in zip(got, off):
        np.testing.assert_array_equal(g, o)
    from conftest import cpu_kernel_class

    if not cpu_kernel_class(gpu):
        return None
    return "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*updat*.wgsl")))


def scan_stacks(xs, h0):
    def step(h, x):
        a = jnp.tanh(x @ jnp.ones((16, 32)) * 0.1 + h)
        b = (a * 3).astype(jnp.int32)
        c = jnp.sin(a)[:, :8]
        return a, (a, b, c, a.sum(1), h)

    return lax.scan(step, h0, xs)


def rows_of_three(x):
    def body(i, s):
        a, b, c = s
        a = a.at[i].set(x[i] * 2)
        b = b.at[i].set(x[i].astype(jnp.int32))
        c = c.at[i, :4].set(x[i, :4] + a[i, :4])  # reads a's update made this step
        return a, b, c

    z = jnp.zeros_like(x)
    return lax.fori_loop(0, x.shape[0], body, (z, z.astype(jnp.int32), z))


def twice_into_one(x):
    def body(i, s):
        a, b = s
        a = a.at[i].set(x[i])
        a = a.at[(i + 1) % x.shape[0]].set(-x[i])  # the same array again
        b = b.at[i].set(x[i] * x[i])
        return a, b

    return lax.fori_loop(0, x.shape[0], body, (jnp.zeros_like(x), jnp.zeros_like(x)))


def nested(xs):
    def outer(c, x):
        def inner(d, y):
            return d + y, (d * y, d - y)

        d, (p, q) = lax.scan(inner, c, x)
        return d, (p, q, d)

    return lax.scan(outer, jnp.zeros(xs.shape[-1]), xs)


def test_scan_stacking_five_outputs(gpu, monkeypatch):
    same_as_cpu(gpu, scan_stacks, normal((40, 4, 16)), normal((4, 32), 1), monkeypatch=monkeypatch)


def test_fori_loop_rows_of_three_arrays(gpu, monkeypatch):
    same_as_cpu(gpu, rows_of_three, normal((64, 128)), monkeypatch=monkeypatch)


def test_two_updates_of_one_array(gpu, monkeypatch):
    same_as_cpu(gpu, twice_into_one, normal((48, 64)), monkeypatch=monkeypatch)


def test_nested_scans(gpu, monkeypatch):
    same_as_cpu(gpu, nested, normal((6, 20, 24)), monkeypatch=monkeypatch)


def test_gradient_of_scan(gpu):
    def loss(w, xs):
        def cell(h, x):
            h = jnp.tanh(x @ w + h)
            return h, h

        h, hs = lax.scan(cell, jnp.zeros((4, 32)), xs)
        return (hs ** 2).mean() + h.sum()

    args = (normal((16, 32)) * 0.2, normal((30, 4, 16), 1))
    cpu = jax.devices("cpu")[0]
    got = jax.jit(jax.grad(loss))(*jax.device_put(args, gpu))
    want = jax.jit(jax.grad(loss))(*jax.device_put(args, cpu))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)


def test_scan_updates_run_as_one_step(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    f = jax.jit(lambda xs, h: scan_stacks(xs * 1.0, h))
    jax.block_until_ready(f(*jax.device_put((normal((40, 4, 16)), normal((4, 32), 1)), gpu)))
    programs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.program.txt")))
    assert "updates updates_" in programs, programs
    assert "update update_" not in programs, programs


def test_switch_off(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_MERGE_UPDATES", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    f = jax.jit(lambda xs, h: scan_stacks(xs * 2.0, h))
    args = (normal((40, 4, 16)), normal((4, 32), 1))
    jax.block_until_ready(f(*jax.device_put(args, gpu)))
    programs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.program.txt")))
    assert "updates updates_" not in programs, programs
    same_as_cpu(gpu, lambda xs, h: scan_stacks(xs * 2.0, h), *args)


def test_stacked_rows_as_vec4s(gpu, tmp_path, monkeypatch):
    # On CPU adapters an update spanning its operand's innermost dimension (a multiple of 4,
    # 32-bit elements) is written four elements per invocation as one vec4; others keep one
    # element each: rows of 12 f32 and i32 (vec4s), of 6 (not a multiple of 4), a partial
    # row at a dynamic start (not spanning), u8 (packed), alone and merged. Exact copies:
    # equal to the updates written one element each (WGPU_HLO_VEC4_STORES=0) bit for bit.
    def f(xs, h0, z):
        def step(h, x):
            a = jnp.tanh(x[:, :12] + h)
            return a, (a, (a * 5).astype(jnp.int32), a[:, :6], (a > 0).astype(jnp.uint8))

        h, ys = lax.scan(step, h0, xs)

        def body(i, z):
            return lax.dynamic_update_slice(z, h[:, 4:8] * i.astype(jnp.float32), (0, i + 1))

        return ys, lax.fori_loop(0, 5, body, z), lax.scan(lambda c, x: (c + x, c * 2), h0, xs[:, :, :12])[1]

    args = (normal((9, 5, 16), 1), normal((5, 12), 2), normal((5, 12), 3))
    text = same_with_switch_off(gpu, f, args, "WGPU_HLO_VEC4_STORES", tmp_path, monkeypatch)
    if text is not None:
        assert "array<vec4<f32>>" in text and "array<vec4<i32>>" in text


def test_stacked_products_read_their_rows_as_vec4s(gpu, tmp_path, monkeypatch):
    # A scan stacking values computed in the update kernel itself (a GRU's residuals: products
    # of the step's values, a broadcast bias row, a transposed matrix, a reshape keeping the
    # innermost extent): the update's group of four lies in one row, so its producers read
    # their operands at the innermost coordinate as one vec4 where the four are consecutive
    # there, and element by element where they are not (the transpose). Bit for bit equal to
    # every read element by element (WGPU_HLO_QUAD_ROWS=0), and to jax cpu to rounding.
    def f(xs, h0, bias, w, u):
        def step(h, x):
            a = jnp.tanh(x @ w + h)
            return a, (a * h, h + bias, a * w.T[:8], (h * 2).reshape(2, 4, 12)[1] - a[4:], u * a)

        return lax.scan(step, h0, xs)

    args = (normal((7, 8, 12), 1), normal((8, 12), 2), normal((12,), 3), normal((12, 12), 4),
            normal((8, 12), 5))
    text = same_with_switch_off(gpu, f, args, "WGPU_HLO_QUAD_ROWS", tmp_path, monkeypatch)
    if text is not None:
        assert "updates in place" in text, text[:2000]
        # The bias row is read as vec4s (it is read nowhere else in that kernel).
        assert "tensor<12xf32> (read as vec4s)" in text, text[:3000]
        # The transposed matrix is read element by element.
        assert any(line.endswith("tensor<12x12xf32>") for line in text.splitlines()), text[:3000]


def test_twelve_stacks_in_one_step(gpu, tmp_path, monkeypatch):
    """A scan stacking twelve values a step (the residuals of a flax GRUCell's forward step are
    ten): one merged update step, whose kernel binds each stack once, as the output it updates
    in place (counting each stack as an input too had split ten updates into nine and one).
    With loop kernels on, this scan runs whole in one kernel since its stacks are updated in
    place there too (one binding each, so the thirteen states fit): they are turned off here
    to run it from the host, step by step, as the test means to."""
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    monkeypatch.setenv("WGPU_HLO_WHILE_KERNELS", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))

    def f(xs, h0):
        def step(h, x):
            a = jnp.tanh(x + h)
            return a, tuple(a * (k + 1) + x * k for k in range(11)) + (h,)

        return lax.scan(step, h0, xs)

    args = (normal((20, 8, 64)), normal((8, 64), 1))
    same_as_cpu(gpu, f, *args)
    programs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.program.txt")))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    same_as_cpu(gpu, f, *args, monkeypatch=monkeypatch)
    steps = [line.split() for line in programs.splitlines() if line.strip().startswith("update")]
    assert len(steps) == 1 and steps[0][0] == "updates", steps
    into = " ".join(steps[0])
    assert into.count("in place") == 12, into


def carry_and_stacks(xs, h0):
    """A GRU-like step: gates read by several stacked residuals and by the carry, which is
    stacked too."""
    n = h0.shape[1]

    def step(h, x):
        r = jax.nn.sigmoid(x[:, :n] + h)
        z = jax.nn.sigmoid(x[:, n:2 * n] + h)
        c = jnp.tanh(x[:, 2 * n:] + r * h)
        hn = (1 - z) * c + z * h
        return hn, (hn, r, z * c, (1 - z) * h)

    return lax.scan(step, h0, xs)


def carry_read_before_its_stack(xs, h0):
    """The carry is read by a reduction before the step's updates: it stays its own kernel."""
    def step(h, x):
        hn = jnp.tanh(h + x[:, :h.shape[1]])
        return hn, (hn, hn * hn.sum(1, keepdims=True))

    return lax.scan(step, h0, xs)


def narrow_stacks(xs, h0):
    """Stacks narrower than the carry: the carry is not written by the update step."""
    def step(h, x):
        hn = jnp.tanh(h + x[:, :h.shape[1]])
        return hn, (hn[:, :8], hn[:, 8:16] * 2)

    return lax.scan(step, h0, xs)


def stacked_then_multiplied(xs, h0):
    """A stacked value read by a product before its update (an LSTM's backward step: the gate
    gradients, stacked, times the weights): the product runs after the update step, which
    writes the value."""
    w = jnp.linspace(-0.1, 0.1, 32 * 32, dtype=jnp.float32).reshape(32, 32)

    def step(h, x):
        g = jnp.tanh(x[:, :32] + h) * x[:, 32:64]
        return g @ w, g

    return lax.scan(step, h0, xs)


@pytest.mark.parametrize(
    "f", [carry_and_stacks, carry_read_before_its_stack, narrow_stacks, stacked_then_multiplied]
)
def test_update_step_writes_the_carry(gpu, f, tmp_path, monkeypatch):
    """A scan step's elementwise kernel making its carry and its stacked values runs inside the
    merged update step, which writes the carry too (`WGPU_HLO_UPDATE_OUTPUTS`), and the loop's
    counter joins that launch: one launch a step where nothing else reads the carry before the
    updates. Bit for bit equal to the kernels apart, and to jax cpu to rounding."""
    # Elementwise scans run whole in one kernel; this is about the loops run from the host.
    monkeypatch.setenv("WGPU_HLO_WHILE_KERNELS", "0")
    args = (normal((20, 8, 96)), normal((8, 32), 1))
    same_with_switch_off(gpu, f, args, "WGPU_HLO_UPDATE_OUTPUTS", tmp_path, monkeypatch)
    programs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.program.txt")))
    body = programs[programs.index("  body"):].splitlines()[1:]
    steps = [s.split()[0] for s in body if s.startswith("    ") and s.split()[0] in ("launch", "updates", "update")]
    if f is carry_and_stacks:
        assert steps == ["updates"] and "writing" in programs, programs
    elif f is stacked_then_multiplied:
        assert steps[0] == "updates" and "writing" in programs, programs
    else:
        assert "writing" not in programs, programs
        assert steps.count("launch") >= 1, programs


def test_update_step_writes_the_carry_unrolled(gpu, monkeypatch):
    """The same scans unrolled (3 steps a trip, the default): each step's carry is read by the
    next step's kernels, after its update step."""
    args = (normal((21, 8, 96), 2), normal((8, 32), 3))
    for f in (carry_and_stacks, carry_read_before_its_stack, stacked_then_multiplied):
        same_as_cpu(gpu, f, *args)
        got = leaves(jax.jit(f)(*jax.device_put(args, gpu)))
        monkeypatch.setenv("WGPU_HLO_UPDATE_OUTPUTS", "0")
        off = leaves(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu)))
        monkeypatch.delenv("WGPU_HLO_UPDATE_OUTPUTS")
        for g, o in zip(got, off):
            np.testing.assert_array_equal(g, o)


def test_gradient_step_writes_its_stacked_gradients(gpu, tmp_path, monkeypatch):
    """`jax.grad` through a GRU-like scan: the backward step's gate-gradient kernels feed the
    weight products and the stacked gradients; the update step takes them and writes what the
    products read, and the products run after it. Bit for bit equal to the kernels apart, and
    to jax cpu to rounding."""
    w = normal((32, 96), 4) / 6

    def f(xs, h0):
        def loss(w):
            def step(h, x):
                g = h @ w
                r = jax.nn.sigmoid(x[:, :32] + g[:, :32])
                z = jax.nn.sigmoid(x[:, 32:64] + g[:, 32:64])
                c = jnp.tanh(x[:, 64:] + r * g[:, 64:])
                hn = (1 - z) * c + z * h
                return hn, hn

            return jnp.sum(lax.scan(step, h0, xs)[1] ** 2)

        return jax.grad(loss)(w)

    args = (normal((12, 8, 96)), normal((8, 32), 1))
    same_with_switch_off(gpu, f, args, "WGPU_HLO_UPDATE_OUTPUTS", tmp_path, monkeypatch)
    programs = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.program.txt")))
    assert "writing" in programs, programs


@pytest.mark.parametrize("reverse", [False, True])
def test_stacks_of_loops_run_from_the_host_start_fresh(gpu, reverse, tmp_path, monkeypatch):
    # A scan whose step multiplies by a matrix runs from the host; its stacks of five
    # outputs (and the gradient's stacks) are written at every row, so they start as
    # buffers of any contents and the zeros they shared are never computed
    # (`WhileStep::fresh`). With the switch off they start from the zeros: same values.
    w = normal((64, 64), 1) / 8
    xs = normal((20, 16, 64), 2)

    def loss(w, xs):
        def step(h, x):
            h2 = jnp.tanh(h @ w + x)
            return h2, (h2, h2 * 2.0, jnp.sin(h2), h2.sum(-1), x * h2)

        h, ys = lax.scan(step, jnp.zeros((16, 64), jnp.float32), xs, reverse=reverse)
        return jnp.sum(h) + sum(jnp.sum(y * (k + 1)) for k, y in enumerate(ys)), ys

    f = jax.value_and_grad(loss, has_aux=True)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    fresh = leaves(jax.jit(f)(*jax.device_put((w, xs), gpu)))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    program = "".join(open(p).read() for p in glob.glob(str(tmp_path / "*program.txt")))
    assert "fresh (every row written)" in program, program
    # The gradient of w sums 20 steps of products: rounding to 1e-5 of its largest entries.
    want = leaves(jax.jit(f)(*jax.device_put((w, xs), jax.devices("cpu")[0])))
    for g, c in zip(fresh, want):
        assert g.shape == c.shape and g.dtype == c.dtype
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(c).max()))
    monkeypatch.setenv("WGPU_HLO_FRESH_ROWS", "0")
    zeros = leaves(jax.jit(lambda *a: f(*a))(*jax.device_put((w, xs), gpu)))
    for a, b in zip(fresh, zeros):
        np.testing.assert_array_equal(a, b)


def test_a_host_loop_writing_some_rows_keeps_the_rest(gpu, tmp_path, monkeypatch):
    # A fori_loop with a product in its body writing rows 2 .. 9 of 12 rows of ones: the
    # other rows keep their ones (not every row written: no fresh stack).
    w = normal((64, 64), 3) / 8

    def f(x):
        def body(i, c):
            ys, v = c
            v = jnp.tanh(w @ v)
            return lax.dynamic_update_slice(ys, v[None], (i, 0)), v

        return lax.fori_loop(2, 10, body, (jnp.ones((12, 64), jnp.float32), x))

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    same_as_cpu(gpu, f, normal((64,), 4))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    program = "".join(open(p).read() for p in glob.glob(str(tmp_path / "*program.txt")))
    assert "every row written" not in program, program
