"""Row fusion and multi-output fusion against jax cpu: the merged kernels must compute what the
separate ones did, and the programs fusion must not merge (a row result read at another row:
broadcast along the other dimension, reversed, transposed) must still be right. Shapes also
cover rows over several trailing dimensions, unit dimensions, too few rows (the compile driver
then lowers the parts), row results returned next to the row outputs, and integer rows."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy


def normal(shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(np.float32)


def check(gpu, f, *args, rtol=2e-5, atol=2e-6):
    got = jax.jit(f)(*[jax.device_put(a, gpu) for a in args])
    cpu = jax.devices("cpu")[0]
    want = jax.jit(f)(*[jax.device_put(a, cpu) for a in args])
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


CASES = {
    "softmax rows of two dims": (lambda x: x / jnp.exp(x).sum(axis=(-2, -1), keepdims=True), (6, 16, 40, 50)),
    "softmax with max returned": (lambda x: (jax.nn.softmax(x, axis=-1), x.max(-1)), (64, 300)),
    "row result along the other dim": (lambda x: x - x.max(-1)[None, :], (96, 96)),
    "row result reversed": (lambda x: x - jnp.flip(x.max(-1))[:, None], (80, 64)),
    "row result transposed": (lambda x: (x - x.mean(-1, keepdims=True)).T * x.sum(-1)[None, :], (64, 64)),
    "unit dims": (lambda x: jax.nn.log_softmax(x, axis=-1), (1, 512, 1, 64)),
    "too few rows": (lambda x: jax.nn.softmax(x, axis=-1), (4, 50000)),
    "short rows": (lambda x: jax.nn.softmax(x, axis=-1), (300, 7)),
    "stats returned": (
        lambda x: (
            (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
            x.mean(-1),
            jax.lax.rsqrt(x.var(-1) + 1e-5),
        ),
        (40, 33, 128),
    ),
    "argmax and one-hot": (lambda x: (x.argmax(-1), (x == x.max(-1, keepdims=True)).astype(jnp.float32)), (128, 100)),
    "integer rows": (lambda x: (x * 7).astype(jnp.int32) - (x * 7).astype(jnp.int32).sum(-1, keepdims=True), (50, 64)),
    "sibling reading a dot": (
        lambda x: x - x.mean(-1, keepdims=True) + 1e-2 * (x * (x @ x)).sum(-1, keepdims=True),
        (128, 128),
    ),
    "siblings over other rows": (lambda x: jnp.abs(x).sum(-1)[:, None] * x + x.max(0)[None, :], (96, 96)),
    "late sibling": (
        lambda x: (x - x.mean(-1, keepdims=True)) / (1.0 + jnp.abs(x).max(-1, keepdims=True)) + jnp.square(x).sum(-1, keepdims=True),
        (64, 200),
    ),
    # Full reductions of per-row values reduce rows first (`passes::rows_first`).
    "full sum of shifted exponentials": (lambda x: jnp.exp(x - x.max(-1, keepdims=True)).sum(), (64, 200)),
    "full max of scaled rows over two dims": (
        lambda x: (x / jnp.abs(x).sum((-2, -1), keepdims=True)).max((0, 2, 3)),
        (6, 5, 16, 40),
    ),
    "column reduction": (lambda x: jax.nn.softmax(x, axis=0), (256, 40)),
    # CPU adapters with 8 lanes: each lane holds 127 elements of a row in registers, the last
    # one only on two lanes (1010 = 126 x 8 + 2).
    "rows held in registers": (
        lambda x: (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5) * x[0],
        (520, 1010),
    ),
    # ... in groups of four stored as vec4s, the last group on 5 of 8 lanes (1012 = 31 x 32 + 20).
    "rows held in registers as vec4s": (lambda x: jax.nn.log_softmax(x * x[0], axis=-1), (520, 1012)),
    "chained row passes": (
        lambda x: jax.nn.softmax(jax.nn.softmax(x, axis=-1) * 3.0 - x.mean(-1, keepdims=True), axis=-1),
        (128, 256),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_row_fusion_matches_cpu(gpu, name):
    f, shape = CASES[name]
    check(gpu, f, normal(shape), rtol=1e-4 if "dot" in name else 2e-5)


def test_multi_output_update_matches_cpu(gpu):
    p, g, m = normal((64, 48)), normal((64, 48), 1), normal((64, 48), 2)

    def step(p, g, m):
        m2 = 0.9 * m + g
        return p - 0.01 * m2, m2, jnp.sqrt(jnp.abs(m2))

    check(gpu, step, p, g, m)


def test_multi_output_with_transposed_reader(gpu):
    x = normal((64, 64))

    def f(x):
        a = jnp.tanh(x) + 1.0
        return a, a.T * 2.0 + a

    check(gpu, f, x)


SHORT_ROWS = {
    "softmax": jax.nn.softmax,
    "log_softmax": jax.nn.log_softmax,
    "layernorm": lambda x: (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
    "logsumexp": lambda x: jax.nn.logsumexp(x, -1),
    "stats returned": lambda x: (x - x.max(-1, keepdims=True), x.sum(-1), jnp.argmax(x, -1)),
    "cross-entropy grad": jax.grad(
        lambda x: -(jax.nn.one_hot(jnp.arange(x.shape[0]) % x.shape[1], x.shape[1]) * jax.nn.log_softmax(x)).sum()
    ),
    "integer rows": lambda x: (x * 7).astype(jnp.int32) - (x * 7).astype(jnp.int32).max(-1, keepdims=True),
}


@pytest.mark.parametrize("length", [4, 7, 10, 16, 32, 64, 65])
@pytest.mark.parametrize("form", list(SHORT_ROWS))
def test_short_rows_merge_a_thread_each(gpu, tmp_path, monkeypatch, length, form):
    """On CPU adapters rows of 4 to 64 elements merge into one row kernel taking a thread per
    row, its row held in registers (softmax over 4M floats in rows of 16 was three kernels,
    15.5-19.6 ms on lavapipe; 5.3-5.4 ms as one). Rows of 65 keep a subgroup each. Logsumexp
    over rows of 32 was three kernels too: `is_finite` of the row maxima, a predicate the
    merged kernel cannot write, stopped the merge when the cost model wrote the maxima once."""
    import glob
    import os

    from conftest import cpu_kernel_class

    x = normal(((1 << 16) // length, length), seed=length)
    x[3, 1] = np.inf
    x[5, :] = -np.inf
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    check(gpu, SHORT_ROWS[form], x, atol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if cpu_kernel_class(gpu):
        heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
        rows = [h for h in heads if "row kernel" in h or "reduction pass" in h]
        assert len(rows) == 1, heads
        assert ("thread per row" in rows[0]) == (length <= 64), heads


def test_short_rows_off_switch(gpu, tmp_path, monkeypatch):
    """`WGPU_HLO_ROW_THREADS_MAX=0` gives the kernels before: rows under 32 are not merged."""
    import glob
    import os

    from conftest import cpu_kernel_class

    x = normal((4096, 16))
    monkeypatch.setenv("WGPU_HLO_ROW_THREADS_MAX", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    check(gpu, jax.nn.softmax, x)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if cpu_kernel_class(gpu):
        heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
        assert not any("thread per row" in h for h in heads), heads
