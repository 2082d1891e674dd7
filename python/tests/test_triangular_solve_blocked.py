"""Thread-per-vector triangular solves keep each vector's solved values in private memory and
solve 4 rows at a time (`blocked_solve_body` in `src/codegen/op_kernels/linalg.rs`). Both
kernels sum every row in solving order, so the blocked one must give the plain one's bits
(`WGPU_HLO_TRSM_ROWS=1`) in every orientation (left/right, lower/upper, transposed, unit
diagonal), for row counts that are and are not multiples of 4, over several launches (130
rows), batched, and in f64; and jax cpu's values to rounding."""

from __future__ import annotations

import glob
import itertools
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
lax = jax.lax


def system(k, nv, left, dtype, seed, batch=()):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, k, k)) * 0.1 + 2 * np.eye(k)
    b = rng.standard_normal((*batch, k, nv) if left else (*batch, nv, k))
    return a.astype(dtype), b.astype(dtype)


def solve_both(gpu, args, params, tmp_path, monkeypatch):
    """The solve on gpu, blocked (with its dump's kernels) and plain."""
    out = []
    for rows in ("4", "1"):
        dump = str(tmp_path / f"rows{rows}")
        monkeypatch.setenv("WGPU_HLO_DUMP", dump)
        monkeypatch.setenv("WGPU_HLO_TRSM_ROWS", rows)
        # A new function object each time: JAX's cache would hand back the first executable.
        f = jax.jit(lambda a, b: lax.linalg.triangular_solve(a, b, **params))
        out.append(np.asarray(f(*jax.device_put(args, gpu))))
        monkeypatch.delenv("WGPU_HLO_DUMP")
        monkeypatch.delenv("WGPU_HLO_TRSM_ROWS")
        out.append("".join(open(p).read() for p in glob.glob(os.path.join(dump, "*.wgsl"))))
    return out


ORIENTATIONS = [
    dict(left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit)
    for left, lower, trans, unit in itertools.product((True, False), repeat=4)
]


@pytest.mark.parametrize("k,nv", [(7, 40), (64, 300), (130, 24)])
def test_blocked_solve_matches_plain_bits(gpu, k, nv, tmp_path, monkeypatch):
    cpu = jax.devices("cpu")[0]
    for i, params in enumerate(ORIENTATIONS):
        args = system(k, nv, params["left_side"], np.float32, i)
        blocked, wgsl, plain, _ = solve_both(gpu, args, params, tmp_path / str(i), monkeypatch)
        if "one thread per right-hand side" in wgsl:
            assert "4 rows at a time" in wgsl, params
        np.testing.assert_array_equal(blocked, plain, err_msg=str(params))
        want = np.asarray(jax.jit(lambda a, b: lax.linalg.triangular_solve(a, b, **params))(
            *jax.device_put(args, cpu)))
        np.testing.assert_allclose(blocked, want, rtol=2e-5, atol=2e-5, err_msg=str(params))


def test_blocked_solve_batched_and_f64(gpu, tmp_path, monkeypatch):
    cpu = jax.devices("cpu")[0]
    cases = [(np.float32, (3,), dict(left_side=True, lower=True, transpose_a=False,
                                      unit_diagonal=False))]
    cases += [(np.float64, (), p) for p in ORIENTATIONS[::3]]
    for i, (dtype, batch, params) in enumerate(cases):
        with jax.enable_x64(dtype == np.float64):
            args = system(50, 33, params["left_side"], dtype, 100 + i, batch)
            blocked, wgsl, plain, _ = solve_both(gpu, args, params, tmp_path / str(i),
                                                 monkeypatch)
            want = np.asarray(jax.jit(lambda a, b: lax.linalg.triangular_solve(a, b, **params))(
                *jax.device_put(args, cpu)))
        assert blocked.dtype == dtype
        assert "4 rows at a time" in wgsl, params
        # The same sums in the same order; bit for bit on lavapipe. Drivers that contract
        # a * b + c into fma where the two kernels' expressions differ (NVIDIA, an H200:
        # 524 of 1650 f64 values 1 ULP apart) round some differently.
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(blocked, plain, rtol=8 * eps, atol=8 * eps, err_msg=str(params))
        tol = 2e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(blocked, want, rtol=tol, atol=tol, err_msg=str(params))
