"""Kernels on CPU adapters read their inputs by aligned groups of four elements (`Quads` in
`src/codegen/expr.rs`): a loop kernel's four elements per invocation, a row kernel's lanes'
groups of four positions along the row. Two extensions, checked here against jax cpu:

* Inputs of sub-word types (booleans, 8- and 16-bit numbers) load the word holding a group
  once, and each of its places picks its bits (a causal mask, int8 weights dequantized, f16
  and bf16 data): llvmpipe made one storage load or texel fetch per element before.
* Row kernels read inputs of any shape whose innermost extent is a multiple of 4 by groups
  where the row's position is their innermost index (attention scores reshaped from their
  product's layout, a layer norm's scale and offset): one texel fetch or vec4 load per group
  where each element made its own.

Every case runs with the reads as they come, through textures (`WGPU_HLO_STREAM_READS=
texture`) and as vec4 loads (`=vec4`), and matches jax cpu exactly where both compute the
same operations (conversions, selects, integer sums) or within rounding (exponentials, dots).
The dump shows the grouped loads."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(47)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def int8s(*shape):
    # Every value, -128 and 127 included.
    n = int(np.prod(shape))
    return np.resize(RNG.permutation(np.arange(-128, 128)), n).reshape(shape).astype(np.int8)


def halves(dtype, *shape):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    flat = x.reshape(-1)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 6e-8, -6e-8, 65504.0], dtype)
    flat[: len(specials)] = specials
    return x


def ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def masked_softmax(s, m):
    return jax.nn.softmax(jnp.where(m, s, -1e9), axis=-1)


SUB_WORD = {
    "int8 dequantized by columns": (
        lambda q, s: q.astype(jnp.float32) * s, [int8s(256, 1024), rand(1024)]),
    "uint8 image to floats, innermost 3": (
        lambda u: u.astype(jnp.float32) * 0.5 - 64.0,
        [RNG.integers(0, 256, (64, 48, 3)).astype(np.uint8)]),
    "bool mask selects": (
        lambda m, x: jnp.where(m, x, -1.0), [RNG.random((512, 256)) > 0.5, rand(512, 256)]),
    "bool mask and sign counted by rows": (
        lambda m, x: (m & (x > 0)).sum(1), [RNG.random((300, 512)) > 0.3, rand(300, 512)]),
    "f16 specials widened": (lambda h: h.astype(jnp.float32) * 1.0, [halves(np.float16, 128, 64)]),
    "bf16 widened plus one": (
        lambda h: h.astype(jnp.float32) + 1.0, [halves(jnp.bfloat16, 96, 128)]),
    "int16 and uint16 widened": (
        lambda a, b: a.astype(jnp.int32) * 3 + b.astype(jnp.int32),
        [RNG.integers(-32768, 32768, (64, 256)).astype(np.int16),
         RNG.integers(0, 65536, (64, 256)).astype(np.uint16)]),
    "int8 bits as uint8": (
        lambda q: lax.bitcast_convert_type(q, jnp.uint8).astype(jnp.int32), [int8s(64, 512)]),
    "f16 bits as int16": (
        lambda h: lax.bitcast_convert_type(h, jnp.int16).astype(jnp.int32),
        [halves(np.float16, 64, 256)]),
    "int8 row sums": (lambda q: q.astype(jnp.int32).sum(1), [int8s(512, 1024)]),
    "int8 column sums": (lambda q: q.astype(jnp.int32).sum(0), [int8s(512, 1024)]),
    "int8 of 1001 elements doubled": (lambda q: q.astype(jnp.float32) * 2, [int8s(1001)]),
    "int8 rows of 3": (lambda q: q.astype(jnp.float32) - 0.5, [int8s(400, 3)]),
    "f16 softmax over rows": (
        lambda h: jax.nn.softmax(h.astype(jnp.float32), axis=-1),
        [(RNG.standard_normal((256, 512))).astype(np.float16)]),
}

OTHER_SHAPES = {
    "causal attention": (
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
        [rand(2, 128, 4, 32), rand(2, 128, 4, 32), rand(2, 128, 4, 32)]),
    "attention with a mask of its own": (
        lambda q, k, v, m: jax.nn.dot_product_attention(q, k, v, mask=m),
        [rand(2, 64, 4, 16), rand(2, 96, 4, 16), rand(2, 96, 4, 16),
         RNG.random((2, 1, 64, 96)) > 0.4]),
    "masked softmax of batched scores": (
        masked_softmax, [rand(16, 128, 128), np.tril(np.ones((128, 128), bool))]),
    "layer norm with scale and offset": (ln, [rand(1024, 512), rand(512), rand(512)]),
    "layer norm gradient": (
        lambda x, g, b: jax.grad(lambda x, g, b: jnp.sum(ln(x, g, b) ** 2), (0, 1, 2))(x, g, b),
        [rand(256, 256), rand(256), rand(256)]),
    "softmax of a reshaped product layout": (
        lambda s: jax.nn.softmax(s.reshape(4, 8, 64, 1, 64).reshape(4, 8, 64, 64), axis=-1),
        [rand(4 * 8 * 64, 64)]),
    "softmax of a transpose": (lambda x: jax.nn.softmax(x.T, axis=-1), [rand(256, 96)]),
    "row vector and boolean row mask": (
        lambda x, w, m: jnp.where(m, x * w, 0.0).max(-1) + (x * w).sum(-1),
        [rand(640, 256), rand(256), RNG.random(256) > 0.5]),
}

EXACT = {"int8 dequantized by columns", "uint8 image to floats, innermost 3", "bool mask selects",
         "bool mask and sign counted by rows", "f16 specials widened", "bf16 widened plus one",
         "int16 and uint16 widened", "int8 bits as uint8", "f16 bits as int16", "int8 row sums",
         "int8 column sums", "int8 of 1001 elements doubled", "int8 rows of 3"}

CASES = {**SUB_WORD, **OTHER_SHAPES}


@pytest.mark.parametrize("reads", ["default", "texture", "vec4"])
@pytest.mark.parametrize("name", list(CASES))
def test_grouped_reads(gpu, name, reads, monkeypatch):
    if reads != "default":
        monkeypatch.setenv("WGPU_HLO_STREAM_READS", reads)
    f, args = CASES[name]
    cpu = jax.devices("cpu")[0]
    # A function of its own per setting: each compiles with it.
    got = jax.tree.map(np.asarray, jax.jit(lambda *a: f(*a))(*[jax.device_put(a, gpu) for a in args]))
    want = jax.tree.map(np.asarray, jax.jit(f)(*[jax.device_put(a, cpu) for a in args]))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        if name in EXACT:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6 * max(1.0, float(np.abs(w).max())))


def _kernels(tmp_path, f, args, gpu):
    jax.block_until_ready(jax.jit(f)(*[jax.device_put(a, gpu) for a in args]))
    return {os.path.basename(p): open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))}


def test_an_attention_mask_is_read_a_word_a_group(gpu, tmp_path, monkeypatch):
    """The attention softmax's row kernel loads each word of the mask once (four booleans)
    and its scores, reshaped from the product's layout, by groups."""
    if not cpu_kernel_class(gpu):
        pytest.skip("grouped reads are the CPU adapters'")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    monkeypatch.setenv("WGPU_HLO_STREAM_READS", "texture")
    f, args = OTHER_SHAPES["attention with a mask of its own"]
    kernels = _kernels(tmp_path, lambda *a: f(*a), args, gpu)
    (rows,) = [t for n, t in kernels.items() if "rows_" in n and "stablehlo.exponential" in t]
    mask = [l for l in rows.splitlines() if "xi1>" in l and "@binding" in l]
    assert len(mask) == 1, mask
    m = mask[0].split("var ")[1].split(":")[0]
    # No element's own byte picked out of a word loaded for it alone.
    assert f"{m}_at(" in rows and "& 3u) * 8u)" not in rows
    assert "_quad(" in rows


def test_int8_weights_load_a_word_for_four(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("grouped reads are the CPU adapters'")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    f, args = SUB_WORD["int8 dequantized by columns"]
    (text,) = _kernels(tmp_path, lambda *a: f(*a), args, gpu).values()
    # One load of the weights' words a group, from the buffer or (AMD hosts, where read-once
    # kernels take textures) through a texture.
    assert len(re.findall(r"= in0(\[|_at\()", text)) == 1 and ">> 24u" in text, text


def test_layer_norm_reads_its_scale_by_groups(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("grouped reads are the CPU adapters'")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    monkeypatch.setenv("WGPU_HLO_STREAM_READS", "vec4")
    kernels = _kernels(tmp_path, lambda *a: ln(*a), OTHER_SHAPES["layer norm with scale and offset"][1], gpu)
    (rows,) = [t for n, t in kernels.items() if "rows_" in n]
    scale = [l for l in rows.splitlines() if "tensor<512xf32>" in l and "@binding" in l]
    assert len(scale) == 2 and all("(read as vec4s)" in l for l in scale), scale
