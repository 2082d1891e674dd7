"""Two changes to the dot and convolution kernels of CPU adapters, checked against jax cpu and
against the kernels they replace:

* **Chained steps.** The shared-rows dot (`src/codegen/dot_subgroup.rs`) and the shared
  convolution (`src/codegen/conv_kernel.rs`) take four steps of the contraction per loop trip,
  each accumulator summing them in one expression `((acc + x0 w0) + x1 w1) + ...`. The sums
  and their order are those of a statement per step, so the results are bit for bit those of
  `WGPU_HLO_DOT_CHAINS=0`; llvmpipe, which spills the accumulators, loads and stores each once
  a trip instead of once a step (1024^3: 78 -> 61 ms on lavapipe).
* **Epilogues replayed by groups of four.** A dot's fused epilogue, replayed over the block an
  invocation stored (`src/codegen/epilogue.rs`), takes aligned groups of four elements of a
  row at once where the row's length is a multiple of 4: its inputs are read by groups (one
  `vec4` load where there were four element loads) and its outputs but the first stored as
  `vec4`s. Also bit for bit those of `WGPU_HLO_EPILOGUE_QUADS=0`.

The register-blocked dot (`src/codegen/dot_kernel.rs`'s vector kernel: small and narrow
products) keeps a statement per step (chained, it ran no faster: MLP step, attention of 512
heads of 8 steps, nearest centroid within the noise); its cases here check that the switches
leave it alone.

Contractions whose length is not a multiple of 4 (and features of a convolution) keep one step
a trip; rows whose length is not a multiple of 4 replay element by element."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(53)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv(x, w, stride=1, padding="SAME"):
    return lax.conv_general_dilated(
        x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def gru_gate(h, x, wh, wx, b, c):
    # A recurrent cell's update: a product, then an epilogue with several full-size inputs.
    z = jax.nn.sigmoid(h @ wh + x @ wx + b)
    return z * h + (1.0 - z) * jnp.tanh(c + h @ wh)


CASES = {
    "matmul 256x512x384 + tanh": (lambda a, b: jnp.tanh(a @ b), [rand(256, 512), rand(512, 384)]),
    "matmul with the left operand transposed": (
        lambda a, b: a.T @ b, [rand(512, 256), rand(512, 384)]),
    "matmul with the right operand transposed": (
        lambda a, b: a @ b.T, [rand(256, 512), rand(384, 512)]),
    "batched 8 x 64x128x96": (lambda a, b: a @ b, [rand(8, 64, 128), rand(8, 128, 96)]),
    "contraction of 130 (not whole fours)": (
        lambda a, b: a @ b, [rand(256, 130), rand(130, 384)]),
    "rows of 390 (not whole fours), bias and relu": (
        lambda a, b, c: jax.nn.relu(a @ b + c), [rand(256, 512), rand(512, 390), rand(390)]),
    "long contraction split in chunks": (
        lambda a, b: a @ b, [rand(16, 65536, scale=0.1), rand(65536, 64, scale=0.1)]),
    "recurrent gate, epilogue of several inputs": (
        gru_gate,
        [rand(32, 128), rand(32, 64), rand(128, 128, scale=0.1), rand(64, 128, scale=0.1),
         rand(128), rand(32, 128)]),
    "MLP layer gradient": (
        jax.grad(lambda w, x: jnp.sum(jax.nn.gelu(x @ w) ** 2)),
        [rand(256, 512, scale=0.05), rand(128, 256)]),
    "narrow product 512x128 @ 128x10 (register blocks)": (
        lambda a, b: a @ b, [rand(512, 128), rand(128, 10)]),
    "small product 32x64 @ 64x48 (register blocks)": (
        lambda a, b: jnp.tanh(a @ b), [rand(32, 64), rand(64, 48)]),
    "attention of 64 heads over 8 steps": (
        lambda q, k: jax.nn.softmax(jnp.einsum("hqd,hkd->hqk", q, k), axis=-1),
        [rand(64, 8, 16), rand(64, 8, 16)]),
    "integer product": (
        lambda a, b: a @ b,
        [RNG.integers(-50, 50, (64, 128)).astype(np.int32),
         RNG.integers(-50, 50, (128, 12)).astype(np.int32)]),
    "conv 3x3 over 64 features + relu": (
        lambda x, w: jax.nn.relu(conv(x, w)), [rand(4, 28, 28, 64), rand(3, 3, 64, 64, scale=0.1)]),
    "conv 3x3 stride 2 over 12 features": (
        lambda x, w: conv(x, w, 2, "VALID"), [rand(4, 29, 29, 12), rand(3, 3, 12, 32)]),
    "conv 5x5 over 3 features (not whole fours)": (
        lambda x, w: conv(x, w), [rand(4, 32, 32, 3), rand(5, 5, 3, 32)]),
    "conv gradients": (
        jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1)),
        [rand(2, 16, 16, 32), rand(3, 3, 32, 48, scale=0.1)]),
}


def on(gpu, f, args, env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        # A new function object: jit's cache is keyed by the function.
        out = jax.jit(lambda *a: f(*a))(*[jax.device_put(a, gpu) for a in args])
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
    finally:
        for k in env:
            monkeypatch.delenv(k)


@pytest.mark.parametrize("name", list(CASES))
def test_chained_steps_and_grouped_epilogues(gpu, name, monkeypatch):
    f, args = CASES[name]
    got = on(gpu, f, args, {}, monkeypatch)
    # The kernels these replace: the same bits.
    old = on(gpu, f, args, {"WGPU_HLO_DOT_CHAINS": "0", "WGPU_HLO_EPILOGUE_QUADS": "0"},
             monkeypatch)
    for g, o in zip(got, old):
        np.testing.assert_array_equal(g, o)
    cpu = jax.devices("cpu")[0]
    want = jax.jit(f)(*[jax.device_put(a, cpu) for a in args])
    for g, w in zip(got, jax.tree_util.tree_leaves(want)):
        w = np.asarray(w)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5 * scale)


def _wgsl(tmp_path, gpu, f, args, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    jax.block_until_ready(jax.jit(lambda *a: f(*a))(*[jax.device_put(a, gpu) for a in args]))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    texts = []
    for path in sorted(glob.glob(os.path.join(tmp_path, "*.wgsl"))):
        with open(path) as fh:
            texts.append(fh.read())
    return texts


def test_a_product_takes_four_steps_a_trip(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("the shared-rows kernel is the CPU adapters'")
    texts = _wgsl(tmp_path, gpu, lambda a, b: a @ b, [rand(512, 512), rand(512, 512)],
                  monkeypatch)
    dots = [t for t in texts if "shared-rows dot_general" in t]
    assert dots, "no shared-rows dot"
    for t in dots:
        assert "k = k + 4u" in t, t[:400]
        assert "((acc0_0 + x0_0 * w0_0) + x1_0 * w1_0)" in t, t[:400]


def test_a_convolution_takes_four_features_a_trip(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("the shared convolution is the CPU adapters'")
    texts = _wgsl(tmp_path, gpu, lambda x, w: conv(x, w),
                  [rand(8, 28, 28, 64), rand(3, 3, 64, 64)], monkeypatch)
    convs = [t for t in texts if "implicit-GEMM convolution" in t and "subgroupBroadcast" in t]
    assert convs, "no shared convolution"
    for t in convs:
        assert "f = f + 4u" in t, t[:400]


def test_an_epilogue_replays_groups_of_four(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("epilogues are replayed on CPU adapters")
    f, args = CASES["recurrent gate, epilogue of several inputs"]
    texts = _wgsl(tmp_path, gpu, f, args, monkeypatch)
    replayed = [t for t in texts if "fn epilogue0q(" in t]
    assert replayed, "no epilogue replayed by groups"
    for t in replayed:
        assert "epilogue0q(o);" in t
        # Its inputs read by groups: vec4 loads, or texel fetches of a group.
        assert "_quad(" in t, t[t.find("fn epilogue0q("):][:800]
