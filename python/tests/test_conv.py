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


def compare_dumped(gpu, monkeypatch, tmp_path, f, *args, tol):
    """`compare`, with the kernels dumped: their WGSL texts on the CPU kernel class, else
    None (kernel choices differ there)."""
    import glob
    import os

    from conftest import cpu_kernel_class

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare(gpu, f, *args, tol=tol)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if not cpu_kernel_class(gpu):
        return None
    return [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]


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


TRANSPOSED = [
    # (x shape, w shape, dimension numbers, strides, padding)
    ((2, 9, 7, 6), (3, 3, 6, 5), ("NHWC", "HWIO", "NHWC"), (2, 2), "SAME"),
    ((2, 9, 7, 6), (4, 4, 6, 5), ("NHWC", "HWIO", "NHWC"), (2, 2), "VALID"),
    ((2, 6, 8, 5), (4, 6, 3, 2), ("NCHW", "OIHW", "NCHW"), (3, 2), ((0, 2), (3, 1))),
    ((2, 5, 5, 4), (1, 5, 4, 3), ("NHWC", "HWIO", "NHWC"), (3, 1), ((2, 0), (1, 1))),
    ((3, 11, 4), (5, 4, 6), ("NWC", "WIO", "NWC"), (4,), "SAME"),
]


@pytest.mark.parametrize("force", [True, False])
@pytest.mark.parametrize("case", range(len(TRANSPOSED)))
def test_conv_transpose_phases(gpu, monkeypatch, case, force):
    # Lhs-dilated convolutions run as one convolution per output phase (`conv_phases`);
    # forced on these small shapes, and left whole without forcing. Strides over the kernel
    # size leave phases without taps (zeros); negative and uneven paddings shift them.
    if force:
        monkeypatch.setenv("WGPU_HLO_CONV_PHASES_MIN_WORK", "0")
    xs, ws, dn, strides, padding = TRANSPOSED[case]
    x, w = rand(xs, 30 + case), rand(ws, 40 + case, 0.3)
    compare(gpu, lambda x, w: lax.conv_transpose(x, w, strides, padding, dimension_numbers=dn),
            x, w)
    kw = dict(lhs_dilation=strides, padding=[(-1, 2)] * len(strides), dimension_numbers=dn)
    compare(gpu, lambda x, w: lax.conv_general_dilated(x, w, (1,) * len(strides), **kw), x, w)


def test_strided_conv_gradients_by_phases(gpu, monkeypatch):
    # The input gradient of a strided, grouped convolution is lhs-dilated: by phases.
    monkeypatch.setenv("WGPU_HLO_CONV_PHASES_MIN_WORK", "0")
    dn = ("NHWC", "HWIO", "NHWC")
    x, w = rand((2, 11, 13, 4), 5), rand((3, 4, 2, 6), 6, 0.3)

    def loss(x, w):
        h = lax.conv_general_dilated(x, w, (2, 3), ((1, 1), (0, 2)), feature_group_count=2,
                                     dimension_numbers=dn)
        return jnp.sum(jnp.tanh(h) ** 2)

    compare(gpu, jax.grad(loss, argnums=(0, 1)), x, w)


def test_conv_transpose_realistic(gpu):
    # A decoder's upsampling layer, large enough to be split without forcing.
    dn = ("NHWC", "HWIO", "NHWC")
    x, w = rand((4, 32, 32, 32), 7), rand((4, 4, 32, 16), 8, 0.1)
    compare(gpu, lambda x, w: jax.nn.relu(lax.conv_transpose(x, w, (2, 2), "SAME",
                                                              dimension_numbers=dn)), x, w)


def test_shared_conv_tiles_hold_at_most_256_accumulators(gpu, tmp_path, monkeypatch):
    # On CPU adapters the shared-rows convolution takes tiles of at most 32 rows x 8 columns
    # a lane: 64 x 8 and 128 x 4 took lavapipe 1.7-1.9 s each to compile and ran no faster
    # (the flax CNN step's first call with the Mesa shader cache off 10.4 -> 5.0 s).
    import re

    x, w = rand((8, 28, 28, 64), 41), rand((3, 3, 64, 64), 42, 0.1)

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.grad(lambda w: (lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2).sum())(w), y

    wgsl = compare_dumped(gpu, monkeypatch, tmp_path, f, x, w, tol=2e-3)
    if wgsl is None:
        return
    heads = [w.split("\n", 1)[0] for w in wgsl]
    tiles = [tuple(map(int, m.groups())) for h in heads
             for m in [re.search(r"share (\d+) rows, (\d+) columns per lane", h)] if m
             and "convolution" in h]
    assert tiles and all(r * c <= 256 for r, c in tiles), tiles


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_slides_along_the_signal(gpu, tmp_path, monkeypatch, mode):
    # `jnp.convolve` is a one-channel 1-D convolution: on CPU adapters the register-blocked
    # kernel slides each block's inputs along the signal (one load per tap instead of one
    # per row; 1M by 64 taps 79 -> 13 ms). Signals of odd lengths, a batch of them by vmap
    # (blocks that wrap from one signal to the next), the gradient.
    x, k = rand((3, 20011), 51), rand((37,), 52)

    def f(x, k):
        y = jax.vmap(lambda s: jnp.convolve(s, k, mode=mode))(x)
        g = jax.grad(lambda k: (jnp.convolve(x[0], k, mode=mode) ** 2).sum())(k)
        return y, jnp.convolve(x[1, :999], k[:5], mode=mode), g

    wgsl = compare_dumped(gpu, monkeypatch, tmp_path, f, x, k, tol=1e-4)
    assert wgsl is None or any("let straight" in w for w in wgsl)
