"""A product whose fused epilogue drops it under a uniform condition runs no contraction then
(`codegen::epilogue`'s `skip_condition`): `jax.scipy.linalg.expm` squares its matrix in 16
steps of `where(i < s, r @ r, r)`, and with `s` of 1 or 2 most steps computed a product only
to drop it.

Against jax cpu: the squaring loop with every number of taken steps from none to all, the
condition either way round, a condition that is not uniform (a matrix predicate: nothing is
skipped), two outputs, shapes whose products tile and whose do not, `expm` itself at several
norms; and the dump shows the skip in `expm`'s squaring kernel."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from conftest import compare_with_cpu

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(37)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def squarings(r, s):
    def body(i, r):
        return jnp.where(i < s, r @ r, r)
    return lax.fori_loop(0, 16, body, r)


@pytest.mark.parametrize("s", [0, 1, 3, 16])
@pytest.mark.parametrize("n", [64, 50, 256])
def test_squaring_loop(gpu, s, n):
    a = rand(n, n, scale=0.5 / np.sqrt(n)) + np.eye(n, dtype=np.float32) * 0.5
    compare_with_cpu(gpu, squarings, a, np.int32(s), tol=2e-4)


@pytest.mark.parametrize("s", [0, 2, 16])
def test_condition_the_other_way(gpu, s):
    def f(r, s):
        def body(i, r):
            return jnp.where(i >= s, r, r @ r * 0.5 + 0.1)
        return lax.fori_loop(0, 16, body, r)
    compare_with_cpu(gpu, f, rand(64, 64, scale=0.1), np.int32(s), tol=2e-4)


def test_condition_per_element(gpu):
    # A predicate of the matrix's elements: each element picks its side, nothing is skipped.
    def f(r, b):
        def body(i, r):
            return jnp.where(b > 0, r @ r, r)
        return lax.fori_loop(0, 4, body, r)
    compare_with_cpu(gpu, f, rand(64, 64, scale=0.1), rand(64, 64), tol=2e-4)


def test_two_outputs(gpu):
    def f(r, s):
        def body(i, c):
            r, t = c
            p = r @ t
            return jnp.where(i < s, p, r), jnp.where(i < s, p + 1.0, t)
        return lax.fori_loop(0, 6, body, (r, r * 0.5))
    for s in (0, 3):
        compare_with_cpu(gpu, f, rand(96, 96, scale=0.1), np.int32(s), tol=2e-4)


def test_one_output_reads_the_product_anyway(gpu):
    def f(r, s):
        def body(i, c):
            r, t = c
            p = r @ r
            return jnp.where(i < s, p, r), p * 0.5
        return lax.fori_loop(0, 5, body, (r, r))
    compare_with_cpu(gpu, f, rand(64, 64, scale=0.1), np.int32(1), tol=2e-4)


@pytest.mark.parametrize("scale", [0.01, 0.3, 3.0])
@pytest.mark.parametrize("n", [32, 64])
def test_expm(gpu, n, scale):
    import jax.scipy.linalg as jsl
    compare_with_cpu(gpu, jsl.expm, rand(n, n, scale=scale / np.sqrt(n)), tol=2e-4)


def test_expm_squaring_skips(gpu, tmp_path, monkeypatch):
    import jax.scipy.linalg as jsl
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    a = rand(64, 64, scale=0.3)
    compare_with_cpu(gpu, lambda x: jsl.expm(x), a, tol=2e-4)
    skips = [p for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))
             if "wh_ep_skip = " in open(p).read()]
    assert skips, "no kernel skips its contraction"
    for p in skips:
        assert "select(" in [l for l in open(p).read().splitlines() if "let ke = " in l][0]


def test_kept_side_computed_by_a_long_chain(gpu):
    # The side kept when the product is dropped is a chain of 40 steps, each reading the one
    # before it twice.
    def f(r, s):
        def body(i, r):
            q = r
            for _ in range(40):
                q = q * q * 0.25 + q * 0.5
            return jnp.where(i < s, r @ r, q)
        return lax.fori_loop(0, 3, body, r)
    compare_with_cpu(gpu, f, rand(64, 64, scale=0.01), np.int32(1), tol=2e-4)
