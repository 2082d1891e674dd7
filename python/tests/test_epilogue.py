"""Epilogue fusion against jax cpu: the elementwise kernel that first reads a dot or
convolution result runs at the dot's stores. Checked: the merged kernels compute what the
separate ones did (bias, activations, residuals, a kept pre-activation, batched and
multi-dimensional results), and the programs it must not merge (a result read transposed or
broadcast, an epilogue reading the dot's own operands, integer results) stay right. Kernel
counts come from the dump (`WGPU_HLO_DUMP`: one `.wgsl` per kernel)."""

from __future__ import annotations


import numpy as np
import pytest
from conftest import cpu_kernel_class, dumped_kernels

jax = pytest.importorskip("jax")
jnp = jax.numpy


def normal(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def run(gpu, tmp_path, monkeypatch, f, *args, rtol=1e-4, atol=1e-5):
    """Checks `jit(f)` on `gpu` against cpu; returns how many kernels it compiled to."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = jax.jit(f)(*[jax.device_put(a, gpu) for a in args])
    monkeypatch.delenv("WGPU_HLO_DUMP")
    cpu = jax.devices("cpu")[0]
    want = jax.jit(f)(*[jax.device_put(a, cpu) for a in args])
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    return dumped_kernels(tmp_path)


X, W, B = normal((128, 256)), normal((256, 512), 1, 0.06), normal((512,), 2)

MERGED = {
    "bias relu": lambda x, w, b: jax.nn.relu(x @ w + b),
    "bias gelu residual": lambda x, w, b: jax.nn.gelu(x @ w + b) + jnp.tanh(b),
    "pre-activation kept": lambda x, w, b: (lambda h: (h, jax.nn.relu(h)))(x @ w + b),
    "dot result kept": lambda x, w, b: (lambda h: (h, jax.nn.sigmoid(h + b)))(x @ w),
    "scaled and clipped": lambda x, w, b: jnp.clip((x @ w) * 0.5, -0.3, 0.3),
}


# Epilogues writing two tensors of the dot's shape: on CPU adapters a replay of these
# (`epilogue::REPLAY_MAX_STREAMS`) costs more than a kernel of their own.
TWO_STREAMS = {"pre-activation kept", "dot result kept"}


@pytest.mark.parametrize("name", list(MERGED))
def test_dot_epilogue_is_one_kernel(gpu, tmp_path, monkeypatch, name):
    # On CPU adapters this dot (16.8M multiply-adds) takes the shared-rows kernel, 256 stores
    # per invocation: too many for the epilogue list (llvmpipe compiles such a fused kernel
    # for minutes; see MAX_LISTED_STORES), so the kernel replays its block through the
    # epilogue after storing it (`epilogue::replay`; two kernels before), where the epilogue
    # reads and writes one tensor of the dot's shape.
    n = run(gpu, tmp_path, monkeypatch, MERGED[name], X, W, B)
    assert n == (2 if cpu_kernel_class(gpu) and name in TWO_STREAMS else 1)


@pytest.mark.parametrize("name", ["bias gelu residual", "pre-activation kept"])
def test_ragged_dot_epilogue(gpu, tmp_path, monkeypatch, name):
    # Sizes no tile divides (300 x 200 x 333, batched 3 x 100 x 70 x 90): the replay skips
    # the rows and columns past the result, as the stores do.
    x, w, b = normal((300, 200), 6), normal((200, 333), 7, 0.07), normal((333,), 8)
    n = run(gpu, tmp_path, monkeypatch, MERGED[name], x, w, b)
    assert n == (2 if cpu_kernel_class(gpu) and name in TWO_STREAMS else 1)
    q, k = normal((3, 100, 70), 9), normal((3, 70, 90), 10, 0.1)
    batched = lambda q, k: (lambda h: (h, jnp.tanh(h) * 2.0))(jnp.einsum("bmk,bkn->bmn", q, k))
    assert run(gpu, tmp_path / "batched", monkeypatch, batched, q, k) <= 2


def test_large_dot_tiles_stay_compilable(gpu, tmp_path, monkeypatch):
    # 2048^3 takes the 128-row tiles: 1024 stores per invocation. A list that long made
    # llvmpipe's compile of the fused kernel run past ten minutes (a seeming hang); kernels
    # that replay their block (`epilogue::replay`) compile one copy of the epilogue, others
    # keep it a kernel of its own. Either way the result matches cpu.
    x, w, b = normal((2048, 2048), 3), normal((2048, 2048), 4, 1 / 45), normal((2048,), 5)
    n = run(gpu, tmp_path, monkeypatch, MERGED["bias relu"], x, w, b, rtol=2e-4, atol=2e-4)
    assert n <= 2


def test_epilogue_writes_a_shared_scalar_constant_as_a_literal(gpu, tmp_path, monkeypatch):
    # A scalar constant that a dot also reads as an operand is a buffer of its own, left out
    # of the epilogue's group; the epilogue loaded it at every element, from a binding of its
    # own (the GP gradient's `K / (1 + eye)`). Now it is a literal: no 0-d binding remains.
    n = 256

    def f(a, b):
        one = jnp.float32(1.0)
        scaled = jax.lax.dot_general(one, b[0], (((), ()), ((), ())))
        return (a @ b) / (one + jnp.eye(n, dtype=jnp.float32)), scaled

    run(gpu, tmp_path, monkeypatch, f, normal((n, n), 3), normal((n, n), 4))
    texts = [p.read_text() for p in tmp_path.glob("*.wgsl")]
    fused = [t for t in texts if "// epilogue: fuses" in t]
    assert fused, [p.name for p in tmp_path.glob("*.wgsl")]
    assert not any("tensor<f32>\n" in t for t in fused)


def test_batched_dot_epilogue(gpu, tmp_path, monkeypatch):
    q, k = normal((8, 64, 32)), normal((8, 64, 32), 1)
    n = run(gpu, tmp_path, monkeypatch, lambda q, k: jnp.exp(jnp.einsum("bqd,bkd->bqk", q, k) * 0.1 - 1.0), q, k)
    assert n == 1


def test_conv_bias_relu(gpu, tmp_path, monkeypatch):
    x, w, b = normal((2, 16, 16, 8)), normal((3, 3, 8, 16), 1, 0.2), normal((16,), 2)

    def f(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + b)

    # The convolution may take the epilogue or not (its emitter decides); the result must hold.
    assert run(gpu, tmp_path, monkeypatch, f, x, w, b) <= 2


def test_conv_epilogue_replayed_on_cpu_adapters(gpu, tmp_path, monkeypatch):
    # A CNN's second layer (32 x 14 x 14 x 32 -> 64): on CPU adapters the implicit-GEMM
    # kernel's invocations store 512 elements, so it replays its block through the bias and
    # relu (`epilogue::replay`) instead of leaving them a kernel of their own. Keeping the
    # pre-activation too makes two tensors of 401k elements: those run as a kernel of their
    # own (`epilogue::REPLAY_MAX_STREAMS`).
    x, w, b = normal((32, 14, 14, 32)), normal((3, 3, 32, 64), 1, 0.1), normal((64,), 2)

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    n = run(gpu, tmp_path / "one", monkeypatch, lambda x, w, b: jax.nn.relu(conv(x, w) + b), x, w, b)
    assert n == 1
    n = run(gpu, tmp_path / "two", monkeypatch,
            lambda x, w, b: (lambda y: (jax.nn.relu(y + b), y))(conv(x, w)), x, w, b)
    assert n == (2 if cpu_kernel_class(gpu) else 1)


NOT_MERGED = {
    "result transposed": (lambda x, w: jnp.tanh((x @ w).T), (96, 96)),
    "result broadcast": (lambda x, w: (x @ w)[:, :1] * x, (96, 96)),
    "reads the lhs": (lambda x, w: jax.nn.relu(x @ w + x), (96, 96)),
    "reads the rhs transposed": (lambda x, w: x @ w - w.T, (96, 96)),
    "row sums of the result": (lambda x, w: jnp.tanh(x @ w).sum(-1), (96, 96)),
}


@pytest.mark.parametrize("name", list(NOT_MERGED))
def test_results_not_merged_stay_right(gpu, tmp_path, monkeypatch, name):
    f, shape = NOT_MERGED[name]
    run(gpu, tmp_path, monkeypatch, f, normal(shape), normal(shape, 1, 0.1))


def test_integer_dot(gpu, tmp_path, monkeypatch):
    a = (normal((64, 64)) * 4).astype(np.int32)
    b = (normal((64, 64), 1) * 4).astype(np.int32)
    run(gpu, tmp_path, monkeypatch, lambda a, b: jnp.maximum(a @ b, 3), a, b, rtol=0, atol=0)


def test_epilogue_off_matches(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_EPILOGUE", "0")
    # A new function: jit would reuse the executable compiled with the epilogue on.
    # The lone dot and the elementwise kernel; on GPUs the dot's 16 output tiles over k = 256
    # are summed from contracting chunks by a fold (dot_kernel::split_tiles): one more.
    n = run(gpu, tmp_path, monkeypatch, lambda x, w, b: jax.nn.relu(x @ w - b), X, W, B)
    assert n == (2 if cpu_kernel_class(gpu) else 3)
