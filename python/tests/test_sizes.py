"""Sizes real programs reach, at default settings, on `wgpu` against JAX's `cpu` backend: work
longer than one kernel invocation may loop (llvmpipe silently cuts loops after 65535
back-edges; GPUs have watchdogs) must be split across invocations, never truncated. The
training step of a small CNN on a batch of 128 MNIST-sized images has convolution filter
gradients that sum over 128 x 28 x 28 = 100352 products per element."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import cpu_kernel_class


CPU = jax.devices("cpu")[0]


def on(device, f, *args):
    args = [jax.device_put(a, device) for a in args]
    out = jax.jit(f)(*args)
    return jax.tree_util.tree_map(np.asarray, out)


def compare(gpu, f, *args, rtol=1e-4, atol=1e-4):
    g = on(gpu, f, *args)
    c = on(CPU, f, *args)

    def check(a, b):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        # Relative to the largest magnitude: long sums in another order differ by rounding.
        scale = max(float(np.max(np.abs(b.astype(np.float64)))), 1e-30)
        np.testing.assert_allclose(
            a.astype(np.float64) / scale, b.astype(np.float64) / scale, rtol=rtol, atol=atol
        )

    jax.tree_util.tree_map(check, g, c)
    return g


DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=DN)


def cnn_params(seed=0):
    rng = np.random.default_rng(seed)

    def init(*shape):
        fan_in = int(np.prod(shape[:-1]))
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    return {
        "c1": init(3, 3, 1, 8),
        "c2": init(3, 3, 8, 16),
        "d": init(16 * 14 * 14, 10),
        "b": np.zeros(10, np.float32),
    }


def cnn_loss(params, x, labels):
    h = jax.nn.relu(conv(x, params["c1"]))
    h = jax.nn.relu(conv(h, params["c2"], stride=2))
    logits = h.reshape(h.shape[0], -1) @ params["d"] + params["b"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def mnist_batch(n=128, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, 10, n).astype(np.int32)
    return x, labels


def test_cnn_forward_batch_128(gpu):
    params, (x, labels) = cnn_params(), mnist_batch()
    compare(gpu, lambda p, x, y: cnn_loss(p, x, y), params, x, labels)


def test_cnn_gradients_batch_128(gpu):
    # Filter gradients: windows of 128 x 28 x 28 (first conv) and 128 x 14 x 14 x (stride 2)
    # steps; the input gradient of the second conv (lhs dilation, reversed window).
    params, (x, labels) = cnn_params(), mnist_batch()
    grads = compare(gpu, jax.value_and_grad(cnn_loss), params, x, labels)
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))


def test_cnn_training_steps_batch_128(gpu):
    # A few SGD steps end where the cpu's do.
    def train(params, x, labels):
        def step(p, _):
            loss, g = jax.value_and_grad(cnn_loss)(p, x, labels)
            return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), loss

        return lax.scan(step, params, None, length=3)

    params, (x, labels) = cnn_params(), mnist_batch()
    compare(gpu, train, params, x, labels, rtol=1e-3, atol=1e-3)


def test_conv_filter_gradient_large_images(gpu):
    # 8 images of 112x112x3, 3x3 conv to 4 features: windows of 8 x 112 x 112 = 100352.
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 112, 112, 3)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 3, 4)) / 5).astype(np.float32)
    compare(gpu, jax.grad(lambda w, x: jnp.sum(jnp.tanh(conv(x, w)))), w, x)


def gp_nll(params, x, y):
    """A Gaussian process's negative log marginal likelihood: RBF kernel with a length scale,
    signal and noise variances (log parameters), Cholesky, `cho_solve` and log-determinant."""
    n = x.shape[0]
    ell, sig, noise = jnp.exp(params["log_ell"]), jnp.exp(params["log_sig"]), jnp.exp(
        params["log_noise"])
    sq = jnp.sum(x * x, axis=1)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0)
    k = sig * jnp.exp(-0.5 * d2 / ell**2) + (noise + 1e-4) * jnp.eye(n)
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diagonal(chol))) + 0.5 * n * jnp.log(2 * jnp.pi)


def test_gaussian_process_fit_matches_cpu(gpu):
    # 600 points: the blocked Cholesky (two column segments), blocked triangular solves of the
    # gradient (600 right-hand sides), and the cho_solve of y (one vector, a workgroup). Its
    # likelihood and gradient in the hyperparameters and inputs, then five steps of gradient
    # descent on the hyperparameters, as a user fits a GP.
    rng = np.random.default_rng(3)
    n, d = 600, 8
    x = rng.uniform(-2, 2, (n, d)).astype(np.float32)
    y = (np.sin(x.sum(1)) + 0.1 * rng.standard_normal(n)).astype(np.float32)
    params = {k: np.float32(v) for k, v in
              {"log_ell": 0.5, "log_sig": 0.0, "log_noise": -2.0}.items()}
    compare(gpu, gp_nll, params, x, y, rtol=1e-4, atol=1e-4)
    compare(gpu, jax.grad(gp_nll, argnums=(0, 1)), params, x, y, rtol=2e-4, atol=2e-4)

    def fit(params, x, y):
        def step(_, p):
            g = jax.grad(gp_nll)(p, x, y)
            return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g)

        p = lax.fori_loop(0, 5, step, params)
        return p, gp_nll(p, x, y)

    compare(gpu, fit, params, x, y, rtol=1e-4, atol=1e-4)


def test_grouped_conv_gradients(gpu):
    # Depthwise (feature groups) forward and both gradients; batch groups in the filter one.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 20, 20, 6)).astype(np.float32)
    w = (rng.standard_normal((5, 5, 1, 6)) / 5).astype(np.float32)

    def f(w, x):
        y = lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=DN, feature_group_count=6
        )
        return jnp.sum(y * y)

    compare(gpu, jax.value_and_grad(f, argnums=(0, 1)), w, x)


def test_long_reductions_and_dots(gpu):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2048, 2048)).astype(np.float32)
    compare(gpu, lambda x: (jnp.sum(x), jnp.sum(x * x, axis=0), jnp.max(x)), x)
    a = rng.standard_normal((2, 300_000)).astype(np.float32)
    b = rng.standard_normal((300_000, 3)).astype(np.float32)
    compare(gpu, lambda a, b: a @ b, a, b)


def test_long_sums_are_accurate(gpu):
    # Sums of thousands of positive values, against exact (f64) sums: down columns (a
    # thread per four columns), along rows (a subgroup per row, or a thread per row without
    # subgroups), and a softmax's row sums (the fused row kernel). Added one by one in f32
    # they were 1.5-3e-6 off (XLA's cpu: 1-2e-7); summed in blocks, within 5e-7.
    rng = np.random.default_rng(11)
    for shape, axis in [((4096, 4096), 0), ((4096, 4096), 1), ((64, 100_000), 1)]:
        x = (rng.random(shape, dtype=np.float32) + 0.5).astype(np.float32)
        with jax.default_device(gpu):
            got = np.asarray(jax.jit(lambda x: x.sum(axis=axis))(x))
        exact = x.astype(np.float64).sum(axis=axis)
        err = np.abs(got - exact).max() / np.abs(exact).max()
        assert err < 1e-6, (shape, axis, err)
    x = rng.standard_normal((1024, 4096)).astype(np.float32) * 3.0
    with jax.default_device(gpu):
        got = np.asarray(jax.jit(lambda x: jax.nn.softmax(x, axis=-1))(x))
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    assert np.abs(got - e / e.sum(-1, keepdims=True)).max() < 6e-7


def test_bf16_log_softmax_large_vocabulary(gpu):
    # 128 rows of a 50257-entry vocabulary in bf16: one thread per row looped 50257 times.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((128, 50257)).astype(jnp.bfloat16)
    compare(gpu, lambda x: jax.nn.log_softmax(x, axis=-1), x, rtol=2e-2, atol=2e-2)


def test_any_over_a_million_booleans(gpu):
    x = np.zeros(1_000_000, np.float32)
    x[999_999] = np.nan
    for v in (x, np.zeros_like(x)):
        g = on(gpu, lambda v: (jnp.any(jnp.isnan(v)), jnp.all(v == 0)), v)
        assert bool(g[0]) == bool(np.any(np.isnan(v))) and bool(g[1]) == bool(np.all(v == 0))


@pytest.mark.parametrize("n", [40_000, 65_536])
def test_embedding_gradient_many_ids(gpu, n):
    # The gradient of an embedding lookup scatters (adds) n rows into a 1000x16 table: more
    # update windows than one invocation may loop over. Half the ids hit row 3, so one row's
    # run of windows alone is longer than the bound.
    rng = np.random.default_rng(6)
    table = rng.standard_normal((1000, 16)).astype(np.float32)
    ids = rng.integers(0, 1000, n).astype(np.int32)
    ids[::2] = 3
    w = rng.standard_normal((n, 16)).astype(np.float32)

    def loss(table, ids, w):
        return jnp.sum(jnp.tanh(table[ids]) * w)

    compare(gpu, jax.grad(loss), table, ids, w)


def test_tensors_larger_than_one_binding(gpu):
    # 256 MiB of f32: lavapipe (and some laptop GPUs) bind at most 128 MiB of a buffer at
    # once, so these kernels run a window at a time. The sum of 2^26 ones is exact, as on cpu.
    n = 64 * 2**20
    ones = jax.device_put(np.ones(n, np.float32), gpu)
    assert float(jax.jit(jnp.sum)(ones)) == 67108864.0
    del ones
    # Elementwise (alone, and a fused chain with a broadcast operand) and reductions of rows,
    # columns and everything, against cpu.
    x = (np.arange(n, dtype=np.int32) % 2003).astype(np.float32) / 1001.0 - 1.0
    x = x.reshape(2**16, 2**10)
    y = np.linspace(-1, 1, 2**10, dtype=np.float32)
    xs = {d: jax.device_put(x, d) for d in (gpu, CPU)}
    ys = {d: jax.device_put(y, d) for d in (gpu, CPU)}
    # Tolerances: none for x + 1; the chain's tanh within 2 ulp; sums of 1024, 2^16 and 2^26
    # terms relative to the sum of their magnitudes (cpu adds in another order).
    magnitude = float(np.abs(x).sum(dtype=np.float64))
    for f, atols in [
        (lambda x, y: (x + 1, jnp.tanh(x) * 2 + y), (0.0, 5e-7)),
        (
            lambda x, y: (jnp.sum(x, axis=1), jnp.sum(x, axis=0), jnp.sum(x)),
            (1e-4, 1e-6 * 2**16, 1e-7 * magnitude),
        ),
    ]:
        g, c = (jax.jit(f)(xs[d], ys[d]) for d in (gpu, CPU))
        for a, b, atol in zip(g, c, atols):
            a, b = np.asarray(a), np.asarray(b)
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=0, atol=atol)
        del g, c



@pytest.mark.parametrize("axis", [None, 1, 0], ids=["full", "rows", "columns"])
def test_reductions_over_the_binding_limit(gpu, axis, tmp_path, monkeypatch):
    # 256 MiB inputs reduced a window at a time. On CPU adapters each window's partials of
    # rows take the subgroup row form (lanes over a chunk's consecutive groups of four, read as
    # vec4s), those of columns a thread per chunk of a column's rows: a workgroup per chunk had
    # its 8-lane batches sweep the chunk 256 elements apart (lavapipe: 64 x 2^20 row sums
    # 200 -> 130 ms as threads, 2^20 x 64 column sums 550 -> 155 ms). The partials then fold
    # with compensation: as accurate as jax cpu against float64.
    shape = {None: (1 << 26,), 1: (64, 1 << 20), 0: (1 << 20, 64)}[axis]
    x = (np.random.default_rng(5).standard_normal(shape) + 1).astype(np.float32)
    exact = x.astype(np.float64).sum(axis=axis)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = np.asarray(jax.jit(lambda x: jnp.sum(x, axis))(jax.device_put(x, gpu)))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    cpu = np.asarray(jax.jit(lambda x: jnp.sum(x, axis))(jax.device_put(x, CPU)))
    del x
    err = np.max(np.abs(got - exact) / np.abs(exact))
    cpu_err = np.max(np.abs(cpu - exact) / np.abs(exact))
    # The GPU class keeps a workgroup per chunk, whose lanes sum 4096 elements each in
    # sequence (1.8e-7 for the rows, cpu 9e-8).
    assert err <= max((2 if cpu_kernel_class(gpu) else 4) * cpu_err, 6e-8), (err, cpu_err)
    heads = [open(p).readline() for p in sorted(glob.glob(os.path.join(tmp_path, "*.wgsl")))]
    partials = [h for h in heads if "_partials" in h]
    assert partials, heads
    if cpu_kernel_class(gpu):
        form = "thread per output" if axis == 0 else "subgroup per row"
        assert form in partials[0], partials


@pytest.mark.parametrize("shape", [(64, 1 << 20), (33, (1 << 20) + 3)], ids=str)
def test_row_reductions_over_the_binding_limit_fused(gpu, shape):
    # Windowed row reductions other than plain sums: an extremum, an argmax (two results), and
    # a sum of squares fused with a broadcast operand; rows whose length is not a multiple of
    # 4 take the thread form instead of groups of four.
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    m = np.random.default_rng(7).standard_normal(shape[0]).astype(np.float32)

    def f(x, m):
        return jnp.max(x, 1), jnp.argmax(x, 1), jnp.sum((x - m[:, None]) ** 2, 1), jnp.min(x, 1)

    g, c = (jax.jit(f)(jax.device_put(x, d), jax.device_put(m, d)) for d in (gpu, CPU))
    del x
    for a, b in zip(g, c):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=0)

def test_large_tensors_read_anywhere(gpu):
    # A GPT-2-sized embedding table (50257 x 768 f32, 154 MB) read by a lookup and by the tied
    # output projection, and an 8192 x 8192 matrix (256 MiB) transposed, reversed, sliced into
    # a softmax: more than lavapipe's 128 MiB binding limit, read at positions only the kernel
    # knows, so the buffer is bound in parts.
    rng = np.random.default_rng(9)
    table = (rng.standard_normal((50257, 768)) * 0.02).astype(np.float32)
    ids = rng.integers(0, 50257, (4, 16)).astype(np.int32)
    ids[0, :3] = [0, 50256, 25000]

    def lm(table, ids):
        h = jnp.tanh(table[ids] * 30.0)
        return table[ids], h @ table.T

    compare(gpu, lm, table, ids, rtol=0, atol=2e-5)

    def loss(table, ids):
        _, logits = lm(table, ids)
        return jax.nn.logsumexp(logits, axis=-1).mean()

    # The gradient: a scatter-add into the table and a dot producing a 154 MB result.
    compare(gpu, jax.value_and_grad(loss), table, ids)
    del table
    x = rng.standard_normal((8192, 8192)).astype(np.float32)
    compare(gpu, lambda x: (x.T, x[::-1, 4000:4100]), x, rtol=0, atol=0)
    # Near one-hot rows: exp and the row sum within a few ulp of 1.
    compare(gpu, lambda x: jax.nn.softmax(x[:1024, 100:4196] * 3.0, axis=-1), x, rtol=0, atol=4e-6)


def test_random_normal_16m(gpu):
    # JAX's erf_inv on 16M elements carries about twenty full-shape splat constants; expanded
    # they passed the decoder's 1 GiB budget ("splat constants expand to more than ...").
    # Splats now stay one element.
    def f(k):
        return jax.random.normal(k, (1 << 24,))

    with jax.default_device(gpu):
        g = np.asarray(jax.jit(f)(jax.random.key(0)))
    with jax.default_device(CPU):
        c = np.asarray(jax.jit(f)(jax.random.key(0)))
    np.testing.assert_allclose(g, c, rtol=2e-6, atol=2e-6)


def test_random_bernoulli_keeps_no_hash_intermediates(gpu):
    # Multi-output fusion kept every intermediate of the ThreeFry hash as an output of the
    # merged kernel though nothing read it back: bernoulli of 1e7 peaked at 2.4 GB of device
    # memory, and JAX's own testBernoulliSmallProbabilty (1e8) ran out of the host's 24 GB.
    # In a process of its own, so that the peak is this call's.
    import subprocess
    import sys

    code = """
import jax, numpy as np
gpu, cpu = jax.devices("wgpu")[0], jax.devices("cpu")[0]
f = jax.jit(lambda k: jax.random.bernoulli(k, p=0.3, shape=(10_000_000,), mode="high"))
g = np.asarray(f(jax.device_put(jax.random.key(0), gpu)))
c = np.asarray(f(jax.device_put(jax.random.key(0), cpu)))
print(int(np.array_equal(g, c)), gpu.memory_stats()["peak_bytes_in_use"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    equal, peak = out.stdout.split()[-2:]
    assert equal == "1"
    # Two u32 key streams of 1e7 (80 MB each) and the result are what must exist at once.
    assert int(peak) < 400e6, f"peak {int(peak) / 1e6:.0f} MB"


@pytest.mark.parametrize("shape,axis,op", [
    ((4096, 4096), 0, "sum"), ((64, 8192), 0, "sum"), ((3, 100, 4096), 1, "sum"),
    ((2048, 4096), 0, "argmax"), ((2048, 4096), 0, "max"), ((1000, 2048), 0, "isum"),
    ((5, 300, 1024), 1, "min"), ((4096, 1000), 0, "sum"), ((16384, 1000), 0, "argmax"),
    ((8192, 784), 0, "max"), ((100000, 64), 0, "sum"), ((4096, 600), 0, "isum"),
    ((7, 300, 2052), 1, "min"), ((65536, 128), 0, "argmax"),
])
def test_column_reductions_of_many_columns(gpu, shape, axis, op):
    # On CPU adapters a thread of a column reduction takes up to 32 groups of four columns,
    # 8 groups apart, when the columns are many (reduce_kernel's quad columns).
    x = (np.random.default_rng(7).standard_normal(shape) * 10).astype(np.float32)
    f = {"sum": lambda x: x.sum(axis), "argmax": lambda x: jnp.argmax(x, axis),
         "max": lambda x: x.max(axis), "isum": lambda x: x.astype(jnp.int32).sum(axis),
         "min": lambda x: x.min(axis)}[op]
    compare(gpu, f, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["sum", "argmax", "logsumexp"])
def test_column_reductions_read_a_page_of_each_row(gpu, op, tmp_path, monkeypatch):
    # A SIMD batch of 8 lanes reads 8 x 32 groups of four columns (4 KiB) of every row of a
    # 4096 x 4096 column sum, where the cores leave threads enough: 16-17 ms with 4 groups,
    # 7-8 ms with 32 on lavapipe. An argmax (value and index) keeps to 128 accumulators
    # (16 groups), and a costly input (the exponentials of a logsumexp) to 40 KiB of WGSL.
    import glob
    import os

    x = np.random.default_rng(3).standard_normal((4096, 4096)).astype(np.float32)
    f = {"sum": lambda x: x.sum(0), "argmax": lambda x: jnp.argmax(x, 0),
         "logsumexp": lambda x: jax.nn.logsumexp(x * 2.0 + 1.0, 0)}[op]
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, x, rtol=1e-5, atol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if not cpu_kernel_class(gpu):
        return
    cores = len(os.sched_getaffinity(0))
    # 1024 groups of four columns, 16 chunks of 256 rows, two workgroups of 64 per core.
    most = {"sum": 32, "argmax": 16, "logsumexp": 32}[op]
    fits = [g for g in (32, 16, 8, 4, 2) if g <= most and 1024 // g * 16 >= 128 * cores]
    texts = [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*_partials.wgsl"))]
    taken = [max([int(t) // 8 + 1 for t in re.findall(r"\(qb \+ (\d+)u\)", w)] or [1])
             for w in texts]
    # At least what the cores allow (the plugin may count fewer cores, under a CPU quota).
    assert (fits[0] if fits else 1) <= max(taken) <= most or op == "logsumexp", taken
    if op == "logsumexp":
        assert all(len(w) < 48 * 1024 for w in texts), [len(w) for w in texts]
        assert max(taken) >= min(4, fits[0] if fits else 1), taken


def test_column_reductions_of_other_widths_pad_and_chunk(gpu, tmp_path, monkeypatch):
    # 1000 columns are 250 groups of four, no multiple of the 8 x groups a SIMD batch takes:
    # the groups are padded to one, the padding's threads storing nothing (4096 x 1000 sums
    # 4.7 -> 2.1 ms on lavapipe; 4096 x 4000 25 -> 6.8). A large input of few columns is cut
    # into chunks of 256 rows like a wide one (65536 x 128: 7-8 -> 3.3 ms).
    import glob
    import os

    rng = np.random.default_rng(5)
    for shape in [(4096, 1000), (65536, 128)]:
        x = rng.standard_normal(shape).astype(np.float32)
        d = tmp_path / f"{shape[1]}"
        monkeypatch.setenv("WGPU_HLO_DUMP", str(d))
        compare(gpu, lambda x: x.sum(0), x, rtol=1e-5, atol=1e-5)
        monkeypatch.delenv("WGPU_HLO_DUMP")
    if not cpu_kernel_class(gpu):
        return
    cores = len(os.sched_getaffinity(0))
    # 250 groups in 16 chunks: the most groups a thread whose padding stays within a quarter
    # and that leave two workgroups of 64 per core.
    def padded(g):
        return -(-250 // (8 * g)) * 8 * g
    fits = [g for g in (32, 16, 8, 4, 2)
            if padded(g) - 250 <= 250 // 4 and padded(g) // g * 16 >= 128 * cores]
    (w,) = [open(p).read() for p in glob.glob(str(tmp_path / "1000" / "*_partials.wgsl"))]
    if fits:
        taken = max(int(t) // 8 + 1 for t in re.findall(r"\(?qb \+ (\d+)u", w))
        assert "< 250u" in w and taken >= fits[0], w[:3000]
    (w,) = [open(p).read() for p in glob.glob(str(tmp_path / "128" / "*_partials.wgsl"))]
    assert "reduce 256 elements into each of" in w.splitlines()[0], w.splitlines()[0]


@pytest.mark.parametrize("shape,axes,op", [
    ((1 << 20, 16), (0,), "sum"), ((262144, 8), (0,), "max"), ((131072, 4, 4), (0,), "isum"),
    ((64, 128, 128, 16), (0, 1, 2), "sumsq"), ((256, 64, 64, 3), (0, 1, 2), "min"),
    ((1 << 20, 12), (0,), "sum"), ((1048577, 16), (0,), "sum"),
])
def test_narrow_column_reductions_fold_rows(gpu, shape, axes, op, tmp_path, monkeypatch):
    # On CPU adapters a reduction of many rows into fewer than 64 columns reads f rows side
    # by side as one of up to 1024 columns, then reduces the f partial rows
    # (passes::fold_rows): 1048576 x 16 sums 27 -> 10-11 ms on lavapipe. Batch statistics of
    # NHWC activations with few channels are such reductions.
    import glob

    x = (np.random.default_rng(11).standard_normal(shape) * 10).astype(np.float32)
    f = {"sum": lambda x: x.sum(axes), "max": lambda x: x.max(axes),
         "isum": lambda x: x.astype(jnp.int32).sum(axes),
         "sumsq": lambda x: (x * x).sum(axes), "min": lambda x: x.min(axes)}[op]
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, x, rtol=1e-5, atol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if not cpu_kernel_class(gpu):
        return
    folded = [open(p).read().splitlines()[0]
              for p in glob.glob(str(tmp_path / "*.wgsl"))]
    # The folded reduction's second stage reduces the partial rows into the columns.
    second = [l for l in folded if re.search(r"reduce \d+ elements into each of \d+ ", l)
              and "into each of %d " % int(np.prod(shape[len(axes):])) in l]
    odd_rows = shape[0] % 2 == 1
    assert bool(second) != odd_rows, folded
