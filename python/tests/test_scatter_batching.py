"""Scatters with batching dimensions (`operand_batching_dims`), as the gradient of
`take_along_axis` produces them (`optax.softmax_cross_entropy_with_integer_labels` in every
classifier and language model): each result element visits only the update windows of its own
batch. It visited every window of every element before: 260 of a transformer step's 760 ms on
lavapipe were this one kernel. Results against jax cpu; the dumped kernel's loop bound shows
the windows an element visits."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax


def both(f, *args):
    cpu = jax.devices("cpu")[0]
    got = jax.jit(f, device=None)(*[jax.device_put(a, jax.devices("wgpu")[0]) for a in args])
    want = jax.jit(f)(*[jax.device_put(a, cpu) for a in args])
    return np.asarray(got), np.asarray(want)


def test_cross_entropy_gradient(gpu):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 63, 256), np.float32)
    labels = rng.integers(0, 256, (8, 63)).astype(np.int32)

    def loss(x, y):
        lp = jax.nn.log_softmax(x, axis=-1)
        return -jnp.take_along_axis(lp, y[..., None], axis=-1).mean()

    got, want = both(jax.grad(loss), logits, labels)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "shape,batch_ops,batch_idx,idx_shape,windows",
    [
        # operand [B, V], indices [B, K, 1]: K windows per batch row, duplicates included
        ((6, 50), (0,), (0,), (6, 9, 1), 1),
        # batch dims not leading: operand [V, B], indices [K, B, 1]
        ((40, 5), (1,), (1,), (7, 5, 1), 1),
        # two batch dims, one free position: operand [B0, V, B1], indices [B1, B0, 3, 1]
        ((3, 17, 4), (0, 2), (1, 0), (4, 3, 3, 1), 1),
    ],
)
def test_scatter_add_with_batching(gpu, shape, batch_ops, batch_idx, idx_shape, windows):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    free_dims = [d for d in range(len(shape)) if d not in batch_ops]
    (v_dim,) = free_dims
    idx = rng.integers(0, shape[v_dim], idx_shape).astype(np.int32)
    upd = rng.standard_normal(idx_shape[:-1]).astype(np.float32)
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=(),
        inserted_window_dims=(v_dim,),
        scatter_dims_to_operand_dims=(v_dim,),
        operand_batching_dims=batch_ops,
        scatter_indices_batching_dims=batch_idx,
    )

    def f(x, i, u):
        return lax.scatter_add(x, i, u, dn, mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)

    got, want = both(f, x, idx, upd)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    # Non-add updates keep their order: the last write of a duplicated index wins as on cpu.
    def g(x, i, u):
        return lax.scatter(
            x, i, u, dn, mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS, unique_indices=False
        )

    got, want = both(g, x, idx, upd)
    np.testing.assert_array_equal(got, want)


def test_kernel_visits_only_its_batch(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 63, 256), np.float32)
    y = rng.integers(0, 256, (8, 63)).astype(np.int32)

    def loss(x, y):
        return jnp.take_along_axis(x, y[..., None], axis=-1).sum()

    g = jax.jit(jax.grad(loss))
    g(jax.device_put(x, gpu), jax.device_put(y, gpu)).block_until_ready()
    kernels = [
        open(p).read()
        for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))
        if "scatter of" in open(p).read()
    ]
    assert kernels, "no scatter kernel dumped"
    for src in kernels:
        bounds = [int(b) for b in re.findall(r"s < (\d+)u", src)]
        # One window per (batch, position) pair: each element visits one window, not 504.
        assert bounds and max(bounds) == 1, bounds
