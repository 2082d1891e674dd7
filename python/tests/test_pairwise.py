"""Reductions of expanded expressions (`codegen::pairwise`, CPU adapters): pairwise
distances, kernel matrices, scores written with broadcasts compute a tile of outputs per
invocation. Each case must match jax cpu, and the route must be the one expected: shapes
whose tiles are ragged, reductions of one to 1024 elements (groups of four or not, sums in
blocks), batch dimensions, a reduction over a middle dimension or over two, maxima, minima,
integer sums, an argmin's two results, narrow inputs, epilogues reading other tensors
(`exp(-d / 2) + eps * eye`, a mask)."""

from __future__ import annotations

import glob

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

R = np.random.default_rng(5)


def n(*s):
    return R.standard_normal(s).astype(np.float32)


def ints(hi, *s, dtype=np.int32):
    return R.integers(0, hi, s).astype(dtype)


def sqdist(x, y):
    return jnp.sum((x[:, None] - y[None]) ** 2, -1)


big = n(300, 40)
big[5, 3], big[17, :] = 1e30, -3e38

# name: (function, arguments, tolerance, whether the pairwise kernel is expected)
CASES = {
    "sqdist": (sqdist, (n(1000, 64), n(333, 64)), 2e-6, True),
    "k63": (sqdist, (n(500, 63), n(501, 63)), 2e-6, True),
    "points_3d": (lambda x, y: jnp.sqrt(sqdist(x, y)), (n(2000, 3), n(700, 3)), 2e-6, True),
    "k300_l1": (
        lambda x, y: jnp.sum(jnp.abs(x[:, None] - y[None]), -1),
        (n(257, 300), n(129, 300)),
        2e-6,
        True,
    ),
    "k1024": (
        lambda x, y: jnp.sum(x[:, None] * jnp.tanh(y[None]), -1),
        (n(128, 1024), n(96, 1024)),
        2e-6,
        True,
    ),
    "heads": (
        lambda q, k: jnp.sum(q[:, :, None, :] * k[:, None, :, :], -1),
        (n(8, 128, 32), n(8, 100, 32)),
        2e-6,
        True,
    ),
    "middle_dim": (
        lambda a, b: jnp.sum(a[:, :, None] * b[None, :, :], 1),
        (n(200, 48), n(48, 300)),
        2e-6,
        True,
    ),
    "two_reduced": (
        lambda x, y: jnp.sum((x[:, None] - y[None]) ** 2, (-2, -1)),
        (n(200, 6, 8), n(150, 6, 8)),
        2e-6,
        True,
    ),
    "rbf_plus_eye": (
        lambda x: jnp.exp(-0.5 * sqdist(x, x)) + 1e-3 * jnp.eye(x.shape[0]),
        (n(512, 16),),
        2e-6,
        True,
    ),
    "chebyshev": (lambda x: jnp.max(jnp.abs(x[:, None] - x[None]), -1), (big,), 0, True),
    "min_plus": (
        lambda a, b: jnp.min(a[:, None, :] + b.T[None, :, :], -1),
        (n(300, 77), n(77, 300)),
        0,
        True,
    ),
    "hamming_int": (
        lambda a, b: jnp.sum((a[:, None] != b[None]).astype(jnp.int32), -1),
        (ints(3, 400, 64), ints(3, 300, 64)),
        0,
        True,
    ),
    "xor_max_uint": (
        lambda a, b: jnp.max(a[:, None] ^ b[None], -1),
        (ints(2**31, 300, 20, dtype=np.uint32), ints(2**31, 200, 20, dtype=np.uint32)),
        0,
        True,
    ),
    "bf16_inputs": (
        lambda x, y: sqdist(x.astype(jnp.float32), y.astype(jnp.float32)),
        (n(300, 64).astype(jnp.bfloat16), n(200, 64).astype(jnp.bfloat16)),
        2e-6,
        True,
    ),
    "argmin_two_results": (
        lambda x, y: jnp.argmin((x[:, None] - y[None]) ** 2, -1),
        (n(300, 64), n(200, 64)),
        0,
        True,
    ),
    "nearest_centroid": (
        lambda x, c: jnp.argmin(sqdist(x, c), -1),
        (n(4096, 16), n(256, 16)),
        0,
        True,
    ),
    "keepdims": (
        lambda x: jnp.sum((x[:, None] - x[None]) ** 2, -1, keepdims=True) * 2,
        (n(200, 32),),
        2e-6,
        True,
    ),
    "mask_epilogue": (
        lambda x, m: jnp.where(m, jnp.sum(jnp.abs(x[:, None] - x[None]), -1), -1.0),
        (n(256, 24), R.random((256, 256)) < 0.5),
        2e-6,
        True,
    ),
    "softmax_of_scores": (
        lambda q, k: jax.nn.softmax(jnp.sum(q[:, None] * k[None], -1), -1),
        (n(512, 64), n(512, 64)),
        2e-5,
        True,
    ),
    "too_small": (sqdist, (n(20, 8), n(20, 8)), 2e-6, False),
    "not_expanded": (lambda x: jnp.sum(x * x, -1), (n(64, 64, 64),), 2e-6, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pairwise_reductions_match_cpu(gpu, case, tmp_path, monkeypatch):
    from conftest import cpu_kernel_class

    f, args, tol, routed = CASES[case]
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    g = jax.jit(f)
    got = np.asarray(g(*[jax.device_put(a, gpu) for a in args]))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    want = np.asarray(g(*[jax.device_put(a, jax.devices("cpu")[0]) for a in args]))
    assert got.shape == want.shape and got.dtype == want.dtype
    if tol == 0:
        np.testing.assert_array_equal(got, want)
    else:
        # Relative to the largest magnitude: sums of products cancel.
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * 4 * scale)
    if cpu_kernel_class(gpu):
        heads = [open(p).readline() for p in glob.glob(str(tmp_path / "*.wgsl"))]
        assert any("(pairwise)" in h for h in heads) == routed, heads


def test_pairwise_switch_keeps_the_result(gpu, monkeypatch):
    """`WGPU_HLO_PAIRWISE=0` (the reduction kernels before) gives the same values within
    rounding: the tiles fold each output's elements in order."""
    x, y = n(300, 64), n(257, 64)
    f = jax.jit(lambda x, y: jnp.exp(-sqdist(x, y) / 64))
    on = np.asarray(f(jax.device_put(x, gpu), jax.device_put(y, gpu)))
    monkeypatch.setenv("WGPU_HLO_PAIRWISE", "0")
    g = jax.jit(lambda x, y: jnp.exp(-sqdist(x, y) / 64))
    off = np.asarray(g(jax.device_put(x, gpu), jax.device_put(y, gpu)))
    np.testing.assert_allclose(on, off, rtol=1e-5, atol=1e-7)
