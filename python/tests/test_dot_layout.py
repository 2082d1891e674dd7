"""Large dots whose operands CPU adapters write transposed first (`src/passes/dot_layout.rs`:
an operand whose innermost dimension is contracted, when the other operand's free extent is at
least 256 and the product has at least 2^24 multiply-adds), against jax cpu: each side alone and
both, batch dimensions, several contracting and free dimensions, one operand read by two dots,
a dot inside a loop, a fused epilogue, and the kernels the dump shows. On GPU-class adapters the
pass does not run and the same programs check the plain kernels."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu, cpu_kernel_class

RNG = np.random.default_rng(11)


def arr(*shape):
    return (RNG.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


CASES = {
    # x @ w: the left operand is read along k.
    "left": (lambda a, b: a @ b, (arr(512, 256), arr(256, 512))),
    # x @ w.T: the right one.
    "right": (lambda a, b: a @ b.T, (arr(512, 256), arr(640, 256))),
    # Both, and a result not a multiple of the tiles.
    "both": (lambda a, b: a @ b.T, (arr(516, 128), arr(600, 128))),
    # Attention scores: batched, both sides along k.
    "batched": (
        lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k),
        (arr(2, 512, 64), arr(2, 512, 64)),
    ),
    # Two contracting dimensions and two free ones on the left.
    "several dimensions": (
        lambda a, b: jnp.einsum("ijkl,klm->ijm", a, b),
        (arr(16, 32, 8, 32), arr(8, 32, 512)),
    ),
    # One operand read by two dots the same way, and a bias + relu epilogue.
    "shared operand with epilogue": (
        lambda x, w1, w2: (jax.nn.relu(x @ w1 + 1.0), jnp.tanh(x @ w2)),
        (arr(512, 128), arr(128, 512), arr(128, 768)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_cpu(gpu, name):
    f, args = CASES[name]
    compare_with_cpu(gpu, f, *args, tol=2e-4)


def test_dot_in_a_loop(gpu):
    # A transposed copy made inside the loop body, every iteration.
    def f(x, w):
        return lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h @ w) + x, x)

    compare_with_cpu(gpu, f, arr(512, 512), arr(512, 512), tol=2e-4)


def test_gradient_of_a_layer(gpu):
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    compare_with_cpu(gpu, jax.grad(loss), arr(256, 512), arr(512, 256), tol=2e-4)


def test_operand_written_transposed_on_cpu_adapters(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    a, b = (jax.device_put(x, gpu) for x in (arr(512, 256), arr(256, 512)))
    jax.block_until_ready(jax.jit(lambda a, b: a @ b)(a, b))
    monkeypatch.delenv("WGPU_HLO_DUMP")
    texts = [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    copies = [t for t in texts if "// fuses: stablehlo.transpose\n" in t]
    dots = [t.splitlines()[0] for t in texts if "dot_general" in t.splitlines()[0]]
    if cpu_kernel_class(gpu):
        # The transpose, then the dot reading both operands along their free dimension.
        assert len(copies) == 1 and len(dots) == 1
        assert "reads AlongFree x AlongFree" in dots[0]
    else:
        assert not copies


def test_transformer_weights_written_transposed(gpu, tmp_path, monkeypatch):
    """A transformer's `x @ w.T` over 8 x 63 = 504 tokens (its backward pass's products with
    the weights): the weight, read along k, is written transposed; the activations, whose
    innermost free extent (63) is no multiple of 4, are read as they lie."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    x, w = arr(8, 63, 128), arr(512, 128)
    compare_with_cpu(gpu, lambda x, w: jnp.einsum("btd,fd->btf", x, w), x, w, tol=2e-4)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    texts = [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    copies = [t for t in texts if "// fuses: stablehlo.transpose\n" in t]
    dots = [t.splitlines()[0] for t in texts if "dot_general" in t.splitlines()[0]]
    if cpu_kernel_class(gpu):
        assert len(copies) == 1 and len(dots) == 1, dots
        assert "reads AlongK x AlongFree" in dots[0], dots[0]
    else:
        assert not copies


def test_attention_keys_written_transposed(gpu, tmp_path, monkeypatch):
    """`jax.nn.dot_product_attention` over 256 steps: the scores' product reads the keys
    along k; with 256 rows of queries (the bound since 2026-12-07) the keys are written
    transposed first and read along their free dimension."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    q, k, v = arr(2, 256, 2, 64), arr(2, 256, 2, 64), arr(2, 256, 2, 64)
    compare_with_cpu(gpu, lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
                     q, k, v, tol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    (scores,) = [h for h in heads if "256x256, contracting 64" in h]
    if cpu_kernel_class(gpu):
        assert "x AlongFree)" in scores, scores
    else:
        assert "AlongFree" not in scores


def test_conv_input_gradient_reads_its_kernel_by_columns(gpu, tmp_path, monkeypatch):
    """The input gradient of an HWIO convolution reads the forward kernel with its input and
    output features swapped; on CPU adapters that kernel is written with the output features
    innermost first, so that the shared-rows convolution reads four columns per load
    (`plan_conv` in `src/passes/dot_layout.rs`). Value and gradients against jax cpu."""
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)
        return jnp.sum(jnp.tanh(y) ** 2)

    x, w = arr(32, 14, 14, 32), arr(3, 3, 32, 64)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, jax.value_and_grad(loss, argnums=(0, 1)), x, w, tol=2e-4)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    convs = [h for h in heads if "implicit-GEMM convolution" in h]
    # The forward convolution, the input gradient and the filter gradient.
    assert len(convs) == 3, convs
    if cpu_kernel_class(gpu):
        assert all("kernel read Column" in h for h in convs), convs
