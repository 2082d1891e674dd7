"""How many kernels fusion makes of the building blocks of real models, read from the dump
(`WGPU_HLO_DUMP`: one `.wgsl` file per kernel), with results checked against jax cpu. A
regression in fusion shows here as a count, before it shows as a slower model.

Counts are upper bounds where an adapter may choose fewer; `WGPU_HLO_ROWS=0` (row fusion off)
would fail the softmax, log-softmax and layernorm counts. They count fusion's kernels, before
independent launches merge (`WGPU_HLO_MERGE_LAUNCHES=0`; `test_merged_launches.py` tests the
merging)."""

from __future__ import annotations


import numpy as np
import pytest
from conftest import cpu_kernel_class, dumped_kernels

jax = pytest.importorskip("jax")
jnp = jax.numpy


def kernels(gpu, tmp_path, monkeypatch, f, *args, rtol=2e-5, atol=2e-6):
    """The number of kernels `jit(f)` compiles to on `gpu`; checks its results against cpu."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    monkeypatch.setenv("WGPU_HLO_MERGE_LAUNCHES", "0")
    got = jax.jit(f)(*[jax.device_put(a, gpu) for a in args])
    monkeypatch.delenv("WGPU_HLO_DUMP")
    monkeypatch.delenv("WGPU_HLO_MERGE_LAUNCHES")
    cpu = jax.devices("cpu")[0]
    want = jax.jit(f)(*[jax.device_put(a, cpu) for a in args])
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    return dumped_kernels(tmp_path)


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def layernorm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias


def test_softmax_is_one_kernel(gpu, tmp_path, monkeypatch):
    n = kernels(gpu, tmp_path, monkeypatch, lambda x: jax.nn.softmax(x, axis=-1), normal((256, 1000)))
    assert n == 1


def test_log_softmax_is_one_kernel(gpu, tmp_path, monkeypatch):
    n = kernels(gpu, tmp_path, monkeypatch, lambda x: jax.nn.log_softmax(x, axis=-1), normal((8, 32, 512)))
    assert n == 1


def cross_entropy(logits, labels):
    lp = jax.nn.log_softmax(logits)
    return -(jax.nn.one_hot(labels, logits.shape[1]) * lp).sum() / logits.shape[0]


def test_cross_entropy_reduces_rows_in_one_kernel(gpu, tmp_path, monkeypatch):
    # The full sum reads each row's max and log(sum(exp)): reduced by rows first
    # (`passes::rows_first`), it is one more pass of the row kernel, then a sum of 512 values
    # and the scaling; the gradient's one-hot row sum joins the row kernel as a sibling.
    x = normal((512, 1000))
    y = (np.arange(512) * 7 % 1000).astype(np.int32)
    assert kernels(gpu, tmp_path, monkeypatch, cross_entropy, x, y, rtol=1e-5) <= 3
    assert kernels(gpu, tmp_path / "grad", monkeypatch, jax.grad(cross_entropy), x, y) == 1


def test_layernorm_is_one_kernel(gpu, tmp_path, monkeypatch):
    args = (normal((4, 64, 384)), normal((384,), 1), normal((384,), 2))
    assert kernels(gpu, tmp_path, monkeypatch, layernorm, *args) == 1


def test_flax_layernorm_is_one_kernel(gpu, tmp_path, monkeypatch):
    nn = pytest.importorskip("flax.linen")
    m = nn.LayerNorm()
    x = normal((128, 256))
    params = m.init(jax.random.PRNGKey(0), x)
    # Its mean and mean of squares are sibling reductions: one pass reads the rows for both.
    assert kernels(gpu, tmp_path, monkeypatch, m.apply, params, x) == 1


def test_mlp_layer(gpu, tmp_path, monkeypatch):
    args = (normal((128, 256)), normal((256, 512), 1) * 0.06, normal((512,), 2))
    n = kernels(gpu, tmp_path, monkeypatch, lambda x, w, b: jax.nn.relu(x @ w + b), *args, rtol=1e-4, atol=1e-5)
    # The dot with the bias and the activation as its epilogue (test_epilogue.py has more;
    # on CPU adapters the shared-rows kernel replays its block through it).
    assert n == 1


def test_gram_matrix_epilogue(gpu, tmp_path, monkeypatch):
    # `x @ x.T` binds x twice; its epilogue was refused as reading the dot's inputs (the
    # epilogue's input took the second operand's binding), so every Gram matrix of a Gaussian
    # process kernel wrote the product and read it back in a second kernel. On CPU adapters
    # this small product takes a register block of 8x4 (at most 8x8 below 2^22 multiply-adds),
    # whose 32 stores are in `main`, where the epilogue list takes them (larger blocks store
    # through a function it does not take).
    x, a = normal((64, 32)), normal((64, 64), 1)
    n = kernels(gpu, tmp_path, monkeypatch, lambda x, a: a - jnp.exp(-(x @ x.T)), x, a)
    assert n == 1


def test_epilogue_reads_the_dot_operands(gpu, tmp_path, monkeypatch):
    # expm's squaring step, `where(s[i] < t, r, r @ r)`: the select reads the dot's operand.
    # It was refused as an epilogue (the operand's binding is the dot's own, maybe a texture)
    # and ran as a kernel of its own after each of 16 products; the epilogue binds it again.
    # The predicate, of no dimensions, is computed once an invocation (`epilogue_uniform`).
    r = normal((64, 64)) * 0.1
    s, t = np.arange(16, dtype=np.float32), np.float32(5.0)
    for i in (np.int32(3), np.int32(9)):
        n = kernels(gpu, tmp_path, monkeypatch, lambda r, s, i, t: jnp.where(s[i] < t, r @ r, r), r, s, i, t)
        assert n == 1
        src = "".join(p.read_text() for p in tmp_path.glob("*.wgsl"))
        assert "epilogue_uniform()" in src
        for p in tmp_path.glob("*"):
            p.unlink()
    # A residual over a square layer, `x + tanh(x @ w)` (on CPU adapters larger epilogues of
    # two full-size streams run as kernels of their own: `REPLAY_MAX_STREAMS`).
    x, w = normal((64, 64)), normal((64, 64), 1) * 0.06
    n = kernels(gpu, tmp_path, monkeypatch, lambda x, w: x + jnp.tanh(x @ w), x, w, rtol=1e-4, atol=1e-5)
    assert n == 1


def test_bf16_layer(gpu, tmp_path, monkeypatch):
    """A mixed-precision layer: the bf16 converts of both operands run inside the dot
    (prologue fusion), the bias and relu at its stores. On CPU adapters a dot of this size
    (16.8M multiply-adds) reads each operand element too often to round it at every read
    (fusion/prologue.rs), so the converts run as kernels of their own; the bias and relu
    run in the dot (replayed over its block)."""
    args = (normal((128, 256)), normal((256, 512), 1) * 0.06, normal((512,), 2))
    bf = jnp.bfloat16
    n = kernels(gpu, tmp_path, monkeypatch,
                lambda x, w, b: jax.nn.relu((x.astype(bf) @ w.astype(bf)).astype(jnp.float32) + b),
                *args, rtol=1e-2, atol=1e-2)
    assert n == (3 if cpu_kernel_class(gpu) else 1)


def test_attention(gpu, tmp_path, monkeypatch):
    q, k, v = normal((4, 64, 32)), normal((4, 64, 32), 1), normal((4, 64, 32), 2)

    def attention(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(32.0).astype(np.float32)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)

    # Scores, their softmax (one row kernel), the weighted sum.
    n = kernels(gpu, tmp_path, monkeypatch, attention, q, k, v, rtol=1e-4, atol=1e-5)
    assert n <= 3


def adam_update(optax, params):
    """An optax Adam step as `update(params, grads, state) -> (params, state)`, and the initial
    state for `params`."""
    opt = optax.adam(1e-3)

    def update(p, g, s):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    return update, opt.init(params)


def test_adam_update(gpu, tmp_path, monkeypatch):
    optax = pytest.importorskip("optax")
    params = {"w": normal((64, 32)), "b": normal((32,), 1)}
    grads = {"w": normal((64, 32), 2), "b": normal((32,), 3)}
    update, state = adam_update(optax, params)

    n = kernels(gpu, tmp_path, monkeypatch, update, params, grads, state, rtol=1e-5, atol=1e-6)
    # Per parameter: the moments and the update (one elementwise kernel with its outputs).
    assert n <= 2 * len(params) + 2


def test_adam_bias_corrections_are_computed_once(gpu, tmp_path, monkeypatch):
    # `1 - b ** count` from the step count: a `power` of scalars that every thread of a large
    # parameter's update would evaluate (2 x 100352 times for 3136 x 128). On CPU adapters it
    # is written once, with the step count, and no update kernel computes a power.
    import glob
    import os

    optax = pytest.importorskip("optax")
    params = {"w": normal((3136, 128)), "b": normal((128,), 1)}
    grads = {"w": normal((3136, 128), 2), "b": normal((128,), 3)}
    update, state = adam_update(optax, params)

    n = kernels(gpu, tmp_path, monkeypatch, update, params, grads, state, rtol=1e-5, atol=1e-6)
    assert n <= 2 * len(params) + 2
    with_power = []
    for path in glob.glob(os.path.join(tmp_path, "*.wgsl")):
        text = open(path).read()
        if "wh_pow_f32(" in text.split("@compute", 1)[-1]:
            with_power.append(text.splitlines()[0])
    if cpu_kernel_class(gpu):
        assert all("loop over 1 elements" in h for h in with_power), with_power


def test_adam_update_of_many_small_parameters(gpu, tmp_path, monkeypatch):
    # Small independent updates share launches (horizontal fusion): 13 kernels apart.
    optax = pytest.importorskip("optax")
    params = {f"p{i}": normal((8, 16) if i % 2 else (32,), i) for i in range(12)}
    grads = {k: normal(v.shape, 100 + i) for i, (k, v) in enumerate(params.items())}
    update, state = adam_update(optax, params)

    n = kernels(gpu, tmp_path, monkeypatch, update, params, grads, state, rtol=1e-5, atol=1e-6)
    # The step count, then the 12 updates in launches of at most 16 parts and the adapter's
    # binding budget (7 buffers per parameter: 4 inputs and 3 outputs).
    assert n <= 4


def test_mlp_training_step(gpu, tmp_path, monkeypatch):
    sizes = [64, 128, 128, 10]
    params = [(normal((a, b), i) * np.float32(np.sqrt(2 / a)), normal((b,), 10 + i) * 0.1)
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))]
    x, y = normal((32, sizes[0]), 20), normal((32, sizes[-1]), 21)

    def loss(p, x, y):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = p[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, d: a - 0.01 * d, p, g), l

    n = kernels(gpu, tmp_path, monkeypatch, step, params, x, y, rtol=1e-4, atol=1e-5)
    # 3 forward dots with their epilogues, 5 backward dots with theirs (two of them apply the
    # SGD update), the loss sum and its scale, the output gradient, 3 bias-gradient sums, and
    # the updates of the last weight and the 3 biases. JAX's bias gradient sums a `[1, n]`
    # reshape over its size-1 dimension once more: that is a reshape, not a kernel (20 before).
    # The bias updates (and on GPUs the last weight's) share one launch (horizontal fusion: 17
    # before). CPU adapters list the stores of these small dots' blocks, or replay larger
    # blocks through the epilogue (`epilogue::replay`: 17 kernels before).
    assert n <= 14


def test_gru_scan_stacks_without_copies(gpu, tmp_path, monkeypatch):
    # A GRU's value and gradient through `lax.scan`: each step's activations are stacked for
    # the backward pass by `broadcast_in_dim` ([B, H] to [1, B, H]) and `dynamic_update_slice`.
    # Such a broadcast is a view, not a copy kernel, and the splat start index is uploaded
    # once, not written by a kernel each step: 57 kernels before, 50 now (CPU and GPU classes).
    lax = jax.lax
    h_, d_, t_, b_ = 32, 16, 10, 4
    shapes = [(d_, h_), (h_, h_), (d_, h_), (h_, h_), (d_, h_), (h_, h_), (h_, 1)]
    p = [0.3 * normal(s, k) for k, s in enumerate(shapes)]
    xs, ys = normal((t_, b_, d_), 10), normal((b_, 1), 11)

    def loss(p, xs, ys):
        wz, uz, wr, ur, wh, uh, out = p

        def cell(h, x):
            z = jax.nn.sigmoid(x @ wz + h @ uz)
            r = jax.nn.sigmoid(x @ wr + h @ ur)
            return (1 - z) * h + z * jnp.tanh(x @ wh + (r * h) @ uh), None

        h, _ = lax.scan(cell, jnp.zeros((b_, h_)), xs)
        return jnp.mean((h @ out - ys) ** 2)

    n = kernels(gpu, tmp_path, monkeypatch, jax.value_and_grad(loss), p, xs, ys, rtol=1e-4,
                atol=1e-5)
    assert n <= 50


def test_searchsorted_step_is_one_kernel(gpu, tmp_path, monkeypatch):
    # jnp.searchsorted's binary search: each step computes the midpoints, gathers the sorted
    # values there ([n, 1]), compares (i1) and selects both bounds. Loop kernels of one
    # element count merge whatever their shapes and element types (multi-output fusion): the
    # step is one kernel (5 before, 139 -> 60 ms for 1M queries into 64k on lavapipe). Also
    # the two initial bounds, the loop test, the step counter and the final convert (10
    # kernels before).
    a = np.sort(normal((4096,), 1))
    v = normal((10000,), 2)
    v[:1000] = a[::4][:1000]  # exact hits: ties go left
    n = kernels(gpu, tmp_path, monkeypatch, lambda a, v: jnp.searchsorted(a, v), a, v)
    assert n <= 6


def test_a_concatenation_read_at_two_indices_is_written_on_cpu_adapters(gpu, tmp_path, monkeypatch):
    """A blocked solve's pieces joined by nested two-way concatenations, reversed and read as
    they are and transposed (the Gaussian process gradient's symmetrization): on CPU adapters
    every read runs all five pieces' branches, so the concatenation is written by a kernel of
    its own (fusion's `cost::masked_branches`); GPUs keep one kernel."""
    parts = [normal((n, 512), i) for i, n in enumerate([256, 128, 64, 32, 32])]

    def f(a, b, c, d, e):
        x = jnp.concatenate([a, jnp.concatenate([b, jnp.concatenate([c, jnp.concatenate([d, e])])])])
        x = x[::-1]
        return (x + x.T) * 0.5

    n = kernels(gpu, tmp_path, monkeypatch, f, *parts)
    assert n == (2 if cpu_kernel_class(gpu) else 1)


def test_batch_norm_reads_its_input_twice(gpu, tmp_path, monkeypatch):
    """Batch normalization with `jnp.var` (which computes the mean again): the two sums of `x`
    are one reduction (`cse` merges reductions with the same body), so `x` is reduced twice
    (its sum, the sum of squared deviations), not three times. On CPU adapters the
    per-channel scale `rsqrt(var / n + eps)` is written once rather than computed for each
    of the 1.6M elements (`fusion::chain_work`)."""
    import glob
    import os

    def bn(x):
        return (x - x.mean((0, 1, 2))) * jax.lax.rsqrt(x.var((0, 1, 2)) + 1e-5)

    kernels(gpu, tmp_path, monkeypatch, bn, normal((8, 56, 56, 64)), rtol=1e-4, atol=1e-5)
    heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    over_x = [h for h in heads if h.startswith("// kernel reduce_") and "folds" not in h]
    assert len(over_x) == 2, heads
    if cpu_kernel_class(gpu):
        main = [h for h in heads if "loop over 1605632" in h]
        assert len(main) == 1, heads
        paths = glob.glob(os.path.join(tmp_path, "*.wgsl"))
        text = open([p for p in paths if "loop over 1605632" in open(p).readline()][0]).read()
        assert "wh_rsqrt_f32(" not in text.split("fn main")[1], "rsqrt computed per element"
