"""Everyday JAX ops a user reaches for, beyond `bench_jax.py`'s model steps, timed on `wgpu` and
on `cpu` in the same run: each result checked against cpu (largest difference relative to the
largest cpu value), then the median of timed runs, and the ratio.

    python examples/bench_everyday.py [--runs N] [--only SUBSTR ...]

Sorting, top_k, medians, permutations and scatters of a million elements, segment sums and
bincounts, jax.random at 16M, LU-based solve / inv / slogdet, QR, a Gaussian process's likelihood
and its gradient at 1000 points, a 1-D and a depthwise convolution, a GRU's value and gradient through `lax.scan`, flax's LSTM and GRU cells' (where flax is
installed), row reductions, a one-hot cross-entropy and its gradient, and loops whose trip
counts are known only when they start or only at their end. Ratios, not absolute times, are the point: the machines are noisy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import jax
import jax.numpy as jnp
import jax.scipy.linalg
from jax import lax


def gp_nll(x, y):
    n = x.shape[0]
    sq = (x * x).sum(1)
    k = jnp.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * x @ x.T) / 64) + 1e-2 * jnp.eye(n)
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return -0.5 * y @ alpha - jnp.log(jnp.diag(chol)).sum()


def xent(logits, labels):
    """Mean cross-entropy of one-hot labels, as a classifier's loss is written."""
    lp = jax.nn.log_softmax(logits)
    return -(jax.nn.one_hot(labels, logits.shape[1]) * lp).sum() / logits.shape[0]


def gru_grads(p, xs, ys):
    """A GRU's loss through `lax.scan` and its gradient, flattened into one array (the training
    step's work: forward scan, backward scan)."""

    def loss(p):
        wz, uz, wr, ur, wh, uh, out = p

        def cell(h, x):
            z = jax.nn.sigmoid(x @ wz + h @ uz)
            r = jax.nn.sigmoid(x @ wr + h @ ur)
            return (1 - z) * h + z * jnp.tanh(x @ wh + (r * h) @ uh), None

        h, _ = lax.scan(cell, jnp.zeros((xs.shape[1], uz.shape[0])), xs)
        return jnp.mean((h @ out - ys) ** 2)

    value, grads = jax.value_and_grad(loss)(p)
    return jnp.concatenate([value[None]] + [g.ravel() for g in grads])


def flax_rnn(cell_name, rng):
    """A flax recurrent model's loss and its gradient, flattened (a training step's work):
    `nn.RNN` of `cell_name` (128 features) over x of (32, 60, 48), then a dense layer on the
    last step, mean squared error. `None` where flax is not installed."""
    try:
        import flax.linen as nn
    except ImportError:
        return None

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.RNN(getattr(nn, cell_name)(128))(x)
            return nn.Dense(1)(y[:, -1])

    x = rng.standard_normal((32, 60, 48)).astype(np.float32)
    y = rng.standard_normal((32, 1)).astype(np.float32)
    model = Model()
    params = model.init(jax.random.PRNGKey(0), x)

    def step(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
        return jnp.concatenate([loss[None]] + [g.ravel() for g in jax.tree_util.tree_leaves(grads)])

    return step, (params, x, y)


def stage_loops(y0):
    """100 steps of 7 stages each, as diffrax's Runge-Kutta solvers run them: the stage counter
    starts at 1 after the first step (first same as last), so each step's stage loop has a
    trip count known only when it starts."""

    def step(i, y):
        start = jnp.where(i > 0, 1, 0).astype(jnp.int32)
        stage = lambda c: (c[0] + 1, c[1] + jnp.sin(c[1]) * 1e-2)
        return lax.while_loop(lambda c: c[0] < 7, stage, (start, y))[1]

    return lax.fori_loop(0, 100, step, y0)


def table_steps(x, t):
    # 20 steps, each element looking up a table at a place computed from itself.
    def body(i, c):
        j = jnp.clip((c * 50).astype(jnp.int32) + 50, 0, t.shape[0] - 1)
        return jnp.tanh(c + jnp.take(t, j) * 0.1)

    return lax.fori_loop(0, 20, body, x)


def newton_sqrt(a):
    """Newton's iteration to a tolerance: a predicate read back after every iteration."""
    body = lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1)
    cond = lambda c: jnp.any(jnp.abs(c[0] * c[0] - a) > 1e-6 * a) & (c[1] < 100)
    return lax.while_loop(cond, body, (a * 10.0, 0))[0]


def doublings(x):
    """A scalar doubled until it passes 1e12 (40 iterations), the vector carried along."""
    return lax.while_loop(lambda c: c[0] < 1e12, lambda c: (c[0] * 2.0, c[1] * 0.99 + 1),
                          (jnp.float32(1.0), x))[1]


def bisection_sqrt(a):
    """Bisection for sqrt(a) until every interval is below 1e-6 (`jnp.any` reduces)."""
    def body(c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        big = mid * mid > a
        return jnp.where(big, lo, mid), jnp.where(big, mid, hi)

    return lax.while_loop(lambda c: jnp.any(c[1] - c[0] > 1e-6), body,
                          (jnp.zeros_like(a), a + 1.0))[0]


def each_sqrt(a):
    """Bisection for sqrt(a) of one element, to 1e-6 of max(1, a): under `jax.vmap` the loop
    runs while any element's interval is wide, each element masked by its own."""
    def body(c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        big = mid * mid > a
        return jnp.where(big, lo, mid), jnp.where(big, mid, hi)

    return lax.while_loop(lambda c: c[1] - c[0] > 1e-6 * jnp.maximum(1.0, a), body,
                          (jnp.float32(0), jnp.maximum(a, 1.0)))[0]


def collatz_steps(n):
    """Integer steps from n to 1 (111 from 27)."""
    return lax.while_loop(lambda c: c[0] != 1,
                          lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[1] + 1),
                          (n, 0))[1]


def cases():
    rng = np.random.default_rng(0)
    m = 1 << 20
    x1 = rng.standard_normal(m).astype(np.float32)
    i1 = rng.integers(0, m, m).astype(np.int32)
    a512 = rng.standard_normal((512, 512)).astype(np.float32) + 512**0.5 * np.eye(512, dtype=np.float32)
    b512 = rng.standard_normal((512,)).astype(np.float32)
    emb = rng.standard_normal((50000, 128)).astype(np.float32)
    ids = rng.integers(0, 50000, (8192,)).astype(np.int32)
    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    gx = rng.standard_normal((1000, 64)).astype(np.float32)
    gy = rng.standard_normal((1000,)).astype(np.float32)
    key = jax.random.key(0)
    h, d, t, b = 128, 64, 50, 32
    gru_p = [(0.1 * rng.standard_normal(s)).astype(np.float32)
             for s in [(d, h), (h, h), (d, h), (h, h), (d, h), (h, h), (h, 1)]]
    gru_x = rng.standard_normal((t, b, d)).astype(np.float32)
    gru_y = rng.standard_normal((b, 1)).astype(np.float32)
    return {
        "cumsum 1M": (lambda x: jnp.cumsum(x), (x1,)),
        "sort 1M": (jnp.sort, (x1,)),
        "argsort 1M": (jnp.argsort, (x1,)),
        "top_k 1M k=100": (lambda x: lax.top_k(x, 100)[0], (x1,)),
        "top_k 8x50000 k=64": (lambda x: lax.top_k(x, 64)[0], (x1[: 8 * 50000].reshape(8, 50000),)),
        "top_k rows 1024x1024 k=8": (lambda x: lax.top_k(x, 8)[0], (x1.reshape(1024, 1024),)),
        "median 1M": (jnp.median, (x1,)),
        "random.permutation 1M": (lambda k: jax.random.permutation(k, 1 << 20), (key,)),
        "searchsorted 1M into 64k": (lambda a, v: jnp.searchsorted(a, v), (np.sort(x1[: 1 << 16]), x1)),
        "gather 1M": (lambda x, i: x[i], (x1, i1)),
        "scatter-add 1M at random indices": (lambda x, i: jnp.zeros_like(x).at[i].add(x), (x1, i1)),
        "segment_sum 1M -> 1000": (lambda x, i: jax.ops.segment_sum(x, i % 1000, 1000), (x1, i1)),
        "bincount 1M -> 256": (lambda i: jnp.bincount(i % 256, length=256), (i1,)),
        "bincount 1M -> 100k": (lambda i: jnp.bincount(i % 100000, length=100000), (i1,)),
        "int32 scatter-add 1M at random indices": (
            lambda i: jnp.zeros(1 << 20, jnp.int32).at[i].add(i % 1000), (i1,)),
        "embedding rows 8192x128, summed": (lambda e, i: e[i].sum(0), (emb, ids)),
        "random.normal 16M": (lambda k: jax.random.normal(k, (1 << 24,)), (key,)),
        "solve 512 (one vector)": (jnp.linalg.solve, (a512, b512)),
        "inv 512": (jnp.linalg.inv, (a512,)),
        "slogdet 512": (lambda a: jnp.linalg.slogdet(a)[1], (a512,)),
        "qr 256": (lambda a: jnp.linalg.qr(a)[1], (a512[:256, :256],)),
        "qr 512": (lambda a: jnp.linalg.qr(a)[1], (a512,)),
        "GP likelihood n=1000": (gp_nll, (gx, gy)),
        "GP gradient n=1000": (jax.grad(gp_nll), (gx, gy)),
        "pairwise distances 1024x64": (
            lambda x: jnp.sum((x[:, None] - x[None]) ** 2, -1), (x[:1024, :64],)),
        "RBF kernel 2000 3-d points": (
            lambda p: jnp.exp(-0.5 * jnp.sum((p[:, None] - p[None]) ** 2, -1)), (x[:2000, :3],)),
        "row dot products, 65536 rows of 32": (
            lambda a, b: jnp.sum(a * b, -1), (x[:, :512].reshape(65536, 32), x[:, 512:].reshape(65536, 32))),
        "vmap(jnp.dot), 65536 rows of 32": (
            jax.vmap(jnp.dot), (x[:, :512].reshape(65536, 32), x[:, 512:].reshape(65536, 32))),
        "squared distances by einsum 1024x512x64": (
            lambda a, b: jnp.einsum("ijk,ijk->ij", a[:, None] - b[None], a[:, None] - b[None]),
            (x[:1024, :64], x[1024:1536, :64])),
        "attention of 512 heads over 8 steps": (
            lambda q: jax.nn.dot_product_attention(q[None], q[None], q[None]), (x[:, :1024].reshape(8, 512, 1024)[:, :, :64],)),
        "causal dot_product_attention B8 T256 H8 D64": (
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
            (x[:, :256].reshape(8, 256, 8, 64).copy(),
             x[:, 256:512].reshape(8, 256, 8, 64).copy(), x[:, 512:768].reshape(8, 256, 8, 64).copy())),
        "causal dot_product_attention gradient": (
            lambda q, k, v: jax.grad(lambda q, k, v: jnp.sum(
                jax.nn.dot_product_attention(q, k, v, is_causal=True) ** 2), (0, 1, 2))(q, k, v),
            (x[:, :256].reshape(8, 256, 8, 64).copy(),
             x[:, 256:512].reshape(8, 256, 8, 64).copy(), x[:, 512:768].reshape(8, 256, 8, 64).copy())),
        "layer norm with scale and offset 4096x1024": (
            lambda x, g, b: (x - x.mean(1, keepdims=True)) * jax.lax.rsqrt(x.var(1, keepdims=True) + 1e-5) * g + b,
            (x, x[0], x[1])),
        "nearest centroid 4096x256x16": (
            lambda p, c: jnp.argmin(jnp.sum((p[:, None] - c[None]) ** 2, -1), -1), (x[:, :16], x[:256, 16:32])),
        "GRU value and gradient (H128 D64 T50 B32)": (gru_grads, (gru_p, gru_x, gru_y)),
        "cross-entropy 4096x1000": (xent, (x[:, :1000], ids[:4096] % 1000)),
        "cross-entropy grad 4096x1000": (jax.grad(xent), (x[:, :1000], ids[:4096] % 1000)),
        "logsumexp rows 4096x1024": (lambda x: jax.nn.logsumexp(x, axis=1), (x,)),
        "softmax over rows of 16, 262144x16": (jax.nn.softmax, (x.reshape(-1, 16),)),
        "cross-entropy grad, 65536 rows of 10 classes": (
            jax.grad(xent), (x[:640].reshape(65536, 10), ids.repeat(8) % 10)),
        "x+1 over 64 floats, read back": (lambda x: x + 1, (x1[:64],)),
        "sum of 4096 floats, read back": (jnp.sum, (x1[:4096],)),
        "fori_loop to a traced bound (n=200)": (
            lambda x, n: lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * 0.5 + i * 1e-3, x),
            (x1[:64], np.int32(200)),
        ),
        "stage loops starting at 0 or 1 (100x7)": (stage_loops, (x1[:64],)),
        "while to a tolerance (Newton sqrt)": (newton_sqrt, (np.abs(x1[:64]) + 0.5,)),
        "while: 40 doublings of a scalar": (doublings, (x1[:64],)),
        "while: bisection to 1e-6 (any)": (bisection_sqrt, (np.abs(x1[:64]) + 0.5,)),
        "while: Collatz steps from 27": (collatz_steps, (np.int32(27),)),
        "while: vmap(bisection) over 4096 floats": (jax.vmap(each_sqrt), (np.abs(x1[:4096]) * 100,)),
        "while: vmap(Collatz) over 10000 ints": (
            jax.vmap(collatz_steps), (np.arange(1, 10001, dtype=np.int32),)),
        "fori_loop(3, 100) over 64 floats": (
            lambda x: lax.fori_loop(3, 100, lambda i, c: jnp.cos(c) * 0.5 + i * 1e-3, x), (x1[:64],)),
        "fori_loop 200 steps over 2^20 floats": (
            lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 0.999 + 0.001, x), (x1, np.int32(200))),
        "scan stacking 50 steps over 64 floats": (
            lambda x: lax.scan(lambda c, t: (jnp.cos(c) * 0.5 + t, c), x,
                               jnp.arange(50, dtype=jnp.float32))[1], (x1[:64],)),
        "fori_loop 20 steps of table lookups over 12288 floats": (
            table_steps, (x1[:12288], np.sin(np.arange(100, dtype=np.float32)))),
        "fori_loop 20 steps of jnp.interp into 1000 points over 4096 floats": (
            lambda x, xp, fp: lax.fori_loop(0, 20, lambda i, c: jnp.interp(c, xp, fp) + 0.1 * c, x),
            (x1[:4096], np.linspace(-3, 3, 1000, dtype=np.float32),
             np.sin(np.linspace(-3, 3, 1000, dtype=np.float32)))),
        "fori_loop 100 steps with lax.cond on the counter over 4096 floats": (
            lambda x: lax.fori_loop(0, 100, lambda i, v: lax.cond(
                i % 10 == 0, lambda: jnp.tanh(v), lambda: v * 1.01 + 0.001), x), (x1[:4096],)),
        "expm 64 x 64": (lambda a: jax.scipy.linalg.expm(a), (x1[:4096].reshape(64, 64) / 10,)),
        "fori_loop 300 steps of tanh(A @ v), 64 x 64": (
            lambda a, v: lax.fori_loop(0, 300, lambda i, v: jnp.tanh(a @ v) + 0.01, v),
            (x1[:4096].reshape(64, 64) / 8, x1[4096:4160])),
        "power iteration, 200 steps of 64 x 64": (
            lambda s, v: lax.fori_loop(
                0, 200, lambda i, v: (s @ v) / jnp.linalg.norm(s @ v), v),
            (x1[:4096].reshape(64, 64) @ x1[:4096].reshape(64, 64).T / 64 + np.eye(64, dtype=np.float32),
             x1[4096:4160])),
        "Markov chain p @ T, 500 steps of 100 states": (
            lambda t, p: lax.fori_loop(0, 500, lambda i, p: p @ t, p),
            (np.abs(x1[:10000].reshape(100, 100)) / np.abs(x1[:10000].reshape(100, 100)).sum(
                1, keepdims=True), np.full(100, 0.01, np.float32))),
        "scan stacking 50 steps over 2^16 floats": (
            lambda x: lax.scan(lambda c, t: (c * 0.99 + t * 1e-3, c), x,
                               jnp.arange(50, dtype=jnp.float32))[1], (x1[: 1 << 16],)),
        "gammainc over 4096 (series loops)": (
            jax.scipy.special.gammainc, (np.abs(x1[:4096]) * 5 + 0.5, np.abs(x1[4096:8192]) * 8)),
        "betainc over 4096 (series loop)": (
            jax.scipy.special.betainc,
            (np.abs(x1[:4096]) * 5 + 0.5, np.abs(x1[4096:8192]) * 5 + 0.5,
             np.abs(x1[8192:12288]) % 1)),
        "jnp.convolve 1M by 64 taps": (jnp.convolve, (x1, x1[:64])),
        "depthwise 3x3 convolution over 32x14x14x128": (
            lambda x, w: lax.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=128),
            (rng.standard_normal((32, 14, 14, 128)).astype(np.float32),
             rng.standard_normal((3, 3, 1, 128)).astype(np.float32)),
        ),
        "average-pool gradient, ReLU then 2x2 over 32x56x56x64": (
            jax.grad(lambda x: jnp.sum(jnp.tanh(lax.reduce_window(
                jax.nn.relu(x), 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4))),
            (rng.standard_normal((32, 56, 56, 64)).astype(np.float32),),
        ),
        "layernorm 4096x1024": (
            lambda x: (x - x.mean(1, keepdims=True)) / jnp.sqrt(x.var(1, keepdims=True) + 1e-5),
            (x,),
        ),
        **{
            f"flax {cell} value and gradient (H128 D48 T60 B32)": case
            for cell in ["OptimizedLSTMCell", "GRUCell"]
            if (case := flax_rnn(cell, rng)) is not None
        },
    }


def run(f, args, device, runs, read=False):
    """First-call seconds, median seconds of `runs` calls, and the result. With `read`, each
    call's result is read to the host (`np.asarray`) rather than only waited for."""
    args = jax.device_put(args, device)
    jf = jax.jit(f)
    finish = (lambda r: jax.tree_util.tree_map(np.asarray, r)) if read else jax.block_until_ready
    start = time.perf_counter()
    out = finish(jf(*args))
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        finish(jf(*args))
        times.append(time.perf_counter() - start)
    return first, float(np.median(times)), np.asarray(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="run only cases whose name contains one of these")
    opts = ap.parse_args()
    gpu, cpu = jax.devices("wgpu")[0], jax.devices("cpu")[0]
    print(f"wgpu device: {gpu.device_kind}")
    print(f"{'case':36s} {'wgpu ms':>9s} {'cpu ms':>9s} {'wgpu/cpu':>9s} {'first s':>8s} {'rel. diff':>9s}")
    for name, (f, args) in cases().items():
        if opts.only and not any(o in name for o in opts.only):
            continue
        try:
            read = name.endswith("read back")
            first, g_ms, g = run(f, args, gpu, opts.runs, read)
            _, c_ms, c = run(f, args, cpu, opts.runs, read)
            scale = max(float(np.max(np.abs(c.astype(np.float64)))), 1e-30)
            diff = float(np.max(np.abs(g.astype(np.float64) - c))) / scale
            print(f"{name:36s} {g_ms * 1e3:9.2f} {c_ms * 1e3:9.2f} {g_ms / c_ms:9.1f} "
                  f"{first:8.1f} {diff:9.1e}", flush=True)
        except Exception as e:  # noqa: BLE001 - a case that fails is reported, the rest go on
            print(f"{name:36s} ERROR {type(e).__name__}: {str(e)[:160]}", flush=True)


if __name__ == "__main__":
    main()
