"""User programs of the 2026-12-07 sweep against jax cpu in the same process: a flax ResNet
with BatchNorm trained by optax's Adam inside `lax.scan`, a causal flax transformer's value
and gradient at d=256 over 256 positions, image resizing and resampling, SciPy-style signal
and ndimage functions, quantiles, histograms, sparse products, special functions, Hessians
and Jacobians, and products of odd and skinny shapes. None of them was wrong when the sweep
ran; they stay here so that none becomes wrong.

Two things the sweep showed that are not errors, and that the comparisons below allow for:

- A gradient that is zero by construction is cancellation noise on both backends: the bias
  of a convolution followed by BatchNorm, the key bias of attention (softmax does not see a
  shift shared by a query's logits). Adam divides such a gradient by its own root mean
  square, so its noise becomes steps of the learning rate's size whose sign differs between
  any two backends. The ResNet compares its losses and batch statistics, and the transformer
  compares each gradient relative to the largest gradient of the model, not of its leaf.
- jax cpu flushes f32 subnormals (XLA's CPU backend runs with FTZ/DAZ); wgpu keeps them, as
  IEEE 754 asks: `jnp.sign(1e-45)` is 1 here, 0 there. No input below holds a subnormal."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def on_both(gpu, f, *args):
    """`jit(f)` on `gpu` and on jax cpu, as numpy trees."""
    out = []
    for device in (gpu, jax.devices("cpu")[0]):
        put = [jax.device_put(a, device) for a in args]
        out.append(jax.tree_util.tree_map(np.asarray, jax.jit(f)(*put)))
    return out


def test_flax_resnet_with_batchnorm_trained_by_adam_in_a_scan(gpu):
    nn = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")

    class Res(nn.Module):
        @nn.compact
        def __call__(self, x):
            for f in (16, 32):
                y = nn.relu(nn.BatchNorm(use_running_average=False)(nn.Conv(f, (3, 3))(x)))
                y = nn.BatchNorm(use_running_average=False)(nn.Conv(f, (3, 3))(y))
                x = nn.relu(y + nn.Conv(f, (1, 1))(x))
                x = nn.max_pool(x, (2, 2), (2, 2))
            return nn.Dense(10)(x.mean((1, 2)))

    model = Res()
    xs = rand(16, 32, 32, 3, seed=1)
    ys = np.random.default_rng(2).integers(0, 10, 16).astype(np.int32)
    variables = model.init(jax.random.PRNGKey(0), xs)
    tx = optax.adam(1e-3)

    def train(variables, xs, ys):
        def step(carry, _):
            params, stats, opt = carry

            def loss(p):
                out, upd = model.apply({"params": p, "batch_stats": stats}, xs,
                                       mutable=["batch_stats"])
                return optax.softmax_cross_entropy_with_integer_labels(out, ys).mean(), upd

            (value, upd), grads = jax.value_and_grad(loss, has_aux=True)(params)
            updates, opt = tx.update(grads, opt, params)
            return (optax.apply_updates(params, updates), upd["batch_stats"], opt), value

        params, stats = variables["params"], variables["batch_stats"]
        (_, stats, _), losses = lax.scan(step, (params, stats, tx.init(params)), None,
                                         length=4)
        return losses, stats

    (w_losses, w_stats), (c_losses, c_stats) = on_both(gpu, train, variables, xs, ys)
    np.testing.assert_allclose(w_losses, c_losses, rtol=1e-4)
    assert w_losses[-1] < w_losses[0]
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
                           w_stats, c_stats)


def test_causal_flax_transformer_value_and_gradient(gpu):
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            for _ in range(2):
                x = x + nn.SelfAttention(8, deterministic=True)(nn.LayerNorm()(x), mask=mask)
                x = x + nn.Dense(256)(nn.gelu(nn.Dense(1024)(nn.LayerNorm()(x))))
            return x

    model = Block()
    x = rand(2, 256, 256, seed=3)
    params = model.init(jax.random.PRNGKey(1), x)

    def value_and_grad(params, x):
        return jax.value_and_grad(lambda p: (model.apply(p, x) ** 2).mean())(params)

    (w_value, w_grads), (c_value, c_grads) = on_both(gpu, value_and_grad, params, x)
    np.testing.assert_allclose(w_value, c_value, rtol=1e-5)
    scale = max(np.abs(g).max() for g in jax.tree_util.tree_leaves(c_grads))
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(w_grads),
                            jax.tree_util.tree_leaves(c_grads)):
        err = np.abs(a - b).max() / scale
        assert err < 1e-5, (jax.tree_util.keystr(path), err)


def test_image_resampling(gpu):
    from jax.scipy import ndimage

    compare_with_cpu(gpu, lambda x: jax.image.resize(x, (4, 97, 97, 3), "bilinear"),
                     rand(4, 64, 64, 3, seed=4), tol=1e-5)
    compare_with_cpu(gpu, lambda x: jax.image.resize(x, (2, 40, 40, 3), "lanczos3"),
                     rand(2, 128, 128, 3, seed=5), tol=1e-5)
    coords = (np.random.default_rng(6).random((2, 50000)) * 299).astype(np.float32)
    compare_with_cpu(gpu, lambda img, c: ndimage.map_coordinates(img, c, order=1),
                     rand(300, 300, seed=7), coords, tol=1e-5)


def test_signal_quantiles_histograms_and_interpolation(gpu):
    from jax.scipy import signal

    compare_with_cpu(gpu, lambda a, k: signal.convolve2d(a, k, mode="same"),
                     rand(256, 256, seed=8), rand(7, 7, seed=9), tol=1e-4)
    compare_with_cpu(gpu, lambda a, b: jnp.convolve(a, b, mode="full"),
                     rand(10000, seed=10), rand(300, seed=11), tol=1e-4)
    # Quantiles interpolate with weights that differ by an ulp between the backends (jax cpu's
    # 99th percentile of 10001 values is a few ulps from numpy's f64 one, ours on it).
    compare_with_cpu(gpu, lambda x: jnp.percentile(x, jnp.array([1.0, 25, 50, 75, 99]), axis=0),
                     rand(10001, 7, seed=12), tol=1e-5)
    compare_with_cpu(gpu, lambda x: jnp.histogram(x, bins=100, range=(-4, 4))[0],
                     rand(1 << 20, seed=13), tol=0)
    xp = np.sort(rand(10000, seed=14))
    compare_with_cpu(gpu, jnp.interp, rand(1 << 18, seed=15), xp, rand(10000, seed=16),
                     tol=1e-5)
    a = np.sort(np.random.default_rng(17).integers(0, 1000, 100000)).astype(np.float32)
    v = np.random.default_rng(18).integers(0, 1000, 50000).astype(np.float32)
    compare_with_cpu(gpu, lambda a, v: (jnp.searchsorted(a, v, side="right"),
                                        jnp.searchsorted(a, v, side="left")), a, v, tol=0)


def test_sparse_products_and_special_functions(gpu):
    from jax.experimental import sparse
    from jax.scipy import special

    rng = np.random.default_rng(19)
    dense = np.where(rng.random((2000, 1000)) < 0.01, rand(2000, 1000, seed=20), 0)
    compare_with_cpu(gpu, lambda d, x: sparse.BCOO.fromdense(d, nse=20000) @ x,
                     dense.astype(np.float32), rand(1000, 64, seed=21), tol=1e-5)
    pos = np.abs(rand(1 << 18, seed=22)) * 20 + 0.01
    compare_with_cpu(gpu, lambda x: (special.gammaln(x), special.digamma(x)), pos, tol=1e-5)
    unit = np.clip(rand(100000, seed=23) / 4, -0.999, 0.999)
    compare_with_cpu(gpu, lambda x: (special.erfinv(x), special.ndtri((x + 1) / 2)), unit,
                     tol=1e-4)
    compare_with_cpu(gpu, lambda x: (special.i0e(x), special.i1e(x)),
                     rand(100000, seed=24) * 10, tol=1e-5)


def test_hessians_jacobians_and_odd_products(gpu):
    compare_with_cpu(gpu, jax.hessian(lambda v: jnp.sum(jnp.sin(v) * jnp.roll(v, 1) ** 2)),
                     rand(50, seed=25), tol=1e-5)
    w = rand(80, 100, seed=26)
    compare_with_cpu(gpu, lambda x: (jax.jacfwd(lambda v: jnp.tanh(w @ v))(x),
                                     jax.jacrev(lambda v: jnp.tanh(w @ v))(x)),
                     rand(100, seed=27), tol=1e-5)
    for m, k, n in [(127, 1025, 513), (3000, 7, 500), (1, 4096, 1024), (2048, 512, 1)]:
        a, b = rand(m, k, seed=m), rand(k, n, seed=n)
        scale = np.sqrt(k)
        compare_with_cpu(gpu, lambda a, b: (a @ b) / scale, a, b, tol=2e-5)
    compare_with_cpu(gpu, lambda a, b, c: jnp.einsum("ij,jk,kl->il", a, b, c),
                     rand(300, 200, seed=28) / 14, rand(200, 100, seed=29) / 10,
                     rand(100, 400, seed=30), tol=1e-4)
