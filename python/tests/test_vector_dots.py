"""Dots without free dimensions (`passes::vector_dots`) run as a multiply and a reduction:
`vmap(jnp.dot)` of vectors, `einsum('ijk,ijk->ij')`, a vector dot. Each form against jax cpu,
and the route: no dot kernel is left, and an einsum of two broadcast differences is one
pairwise reduction that reads the points, not a materialized difference."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from conftest import compare_with_cpu, cpu_kernel_class  # noqa: E402


def arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


CASES = {
    "vmap dot": (jax.vmap(jnp.dot), (arr(4096, 32), arr(4096, 32, seed=1))),
    "vector dot of 1M": (jnp.dot, (arr(1 << 20), arr(1 << 20, seed=1))),
    "vector dot of 5": (jnp.dot, (arr(5), arr(5, seed=1))),
    "rows of 7": (lambda a, b: jnp.einsum("ij,ij->i", a, b), (arr(1000, 7), arr(1000, 7, seed=1))),
    "transposed operands": (lambda a, b: jnp.einsum("kij,ijk->ij", a, b), (arr(9, 30, 40), arr(30, 40, 9))),
    "two contracted dims": (lambda a, b: jnp.einsum("ijkl,ijkl->ik", a, b), (arr(10, 11, 12, 13), arr(10, 11, 12, 13, seed=1))),
    "full contraction": (lambda a, b: jnp.einsum("ij,ij->", a, b), (arr(100, 300), arr(100, 300, seed=1))),
    "bf16 operands": (jax.vmap(jnp.dot), (arr(4096, 64).astype(jnp.bfloat16), arr(4096, 64, seed=1).astype(jnp.bfloat16))),
    "gradient": (jax.grad(lambda a, b: jnp.dot(a, b) ** 2, argnums=(0, 1)), (arr(1000), arr(1000, seed=1))),
    "one query's attention": (lambda q, k: jax.nn.softmax(jnp.einsum("bd,bnd->bn", q, k)), (arr(64, 32), arr(64, 50, 32))),
    "no contraction": (lambda a, b: jax.lax.dot_general(a, b, (((), ()), ((0,), (0,)))), (arr(64), arr(64, seed=1))),
    "empty contraction": (lambda a, b: jnp.einsum("ij,ij->i", a, b), (arr(10, 0), arr(10, 0))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_dots_match_cpu(gpu, name):
    f, args = CASES[name]
    compare_with_cpu(gpu, f, *args, tol=1e-2 if "bf16" in name else 2e-5)


def test_squared_distances_by_einsum_are_one_reduction(gpu, tmp_path, monkeypatch):
    """`einsum('ijk,ijk->ij', d, d)` with `d = x[:, None] - y[None]` was a batch of 524288
    1 x 1 dots over the materialized 1024 x 512 x 64 difference (two kernels, 99 ms on
    lavapipe against 2.5 ms on jax cpu)."""
    x, y = arr(1024, 64), arr(512, 64, seed=1)

    def f(x, y):
        d = x[:, None] - y[None]
        return jnp.einsum("ijk,ijk->ij", d, d)

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, x, y, tol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    assert len(heads) == 1 and "dot" not in heads[0], heads
    if cpu_kernel_class(gpu):
        assert "pairwise" in heads[0], heads


def test_off_switch_keeps_the_dots(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_VECTOR_DOTS", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, jax.vmap(jnp.dot), arr(256, 32), arr(256, 32, seed=1), tol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
    assert any("dot_general" in h for h in heads), heads
