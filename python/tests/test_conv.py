"""Convolutions (the implicit-GEMM kernel) on `wgpu` against JAX's `cpu` backend: forward in
NHWC and NCHW with strides, padding, dilations and groups, and `jax.grad` of a small conv net
(the value and the gradients with respect to the input and the kernels)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

CPU = jax.devices("cpu")[0]


def on(device, f, *args):
    args = [jax.device_put(a, device) for a in args]
    return jax.tree_util.tree_map(np.asarray, jax.jit(f)(*args))


def compare(gpu, f, *args, tol=1e-4):
    g, c = on(gpu, f, *args), on(CPU, f, *args)

    def check(a, b):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        # Relative to the largest magnitude: sums in another order differ by rounding.
        scale = max(float(np.max(np.abs(b))), 1e-30)
        np.testing.assert_allclose(a / scale, b / scale, rtol=tol, atol=tol)

    jax.tree_util.tree_map(check, g, c)


def rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


FORWARD = [
    # (x shape, w shape, dimension numbers, keyword arguments)
    ((3, 13, 11, 8), (3, 3, 8, 12), ("NHWC", "HWIO", "NHWC"), dict(padding="SAME")),
    ((2, 15, 16, 5), (3, 2, 5, 7), ("NHWC", "HWIO", "NHWC"),
     dict(window_strides=(2, 3), padding=((1, 0), (2, 1)))),
    ((2, 6, 17, 14), (8, 6, 3, 3), ("NCHW", "OIHW", "NCHW"),
     dict(padding="VALID", rhs_dilation=(2, 1))),
    ((2, 8, 9, 9), (8, 4, 3, 3), ("NCHW", "OIHW", "NCHW"),
     dict(padding=((1, 2), (0, 1)), feature_group_count=2, lhs_dilation=(2, 1))),
    ((2, 12, 12, 16), (5, 5, 1, 16), ("NHWC", "HWIO", "NHWC"),
     dict(padding="SAME", feature_group_count=16)),
]


@pytest.mark.parametrize("case", range(len(FORWARD)))
def test_conv_forward(gpu, case):
    xs, ws, dn, kw = FORWARD[case]
    kw = {"window_strides": (1, 1), **kw}
    x, w = rand(xs, case), rand(ws, 10 + case, 0.3)
    compare(gpu, lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw), x, w)


def test_conv_net_value_and_gradients(gpu):
    # Two convolutions (stride 2, then dilated and grouped) and a dense head: the backward
    # pass holds input gradients (lhs dilation, reversed windows) and filter gradients
    # (batch and features swapped).
    dn = ("NHWC", "HWIO", "NHWC")
    x = rand((4, 16, 16, 3), 1)
    w1, w2 = rand((3, 3, 3, 16), 2, 0.3), rand((3, 3, 8, 16), 3, 0.2)
    d = rand((16 * 4 * 4, 10), 4, 0.05)

    def loss(x, w1, w2, d):
        h = jnp.tanh(lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=dn))
        h = lax.conv_general_dilated(h, w2, (2, 2), "SAME", rhs_dilation=(2, 1),
                                     feature_group_count=2, dimension_numbers=dn)
        h = jax.nn.relu(h).reshape(h.shape[0], -1)
        return jnp.mean((h @ d) ** 2)

    compare(gpu, jax.value_and_grad(loss, argnums=(0, 1, 2, 3)), x, w1, w2, d)
