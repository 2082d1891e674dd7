"""Linear algebra at its edges, against jax cpu, found by running JAX's own eigh_test,
svd_test, qdwh_test and lobpcg_test on wgpu:

* NaN or infinite input gives NaN results (eigh, svd, qr on the device; the host ops), not
  finite numbers and not an INTERNAL error from scipy's finiteness checks;
* the SVD of a matrix with exactly zero singular values (the zero matrix, a zero column)
  returns an orthogonal U;
* Householder QR uses LAPACK's reflectors, exact where LAPACK is (the QR of `[0; I]`);
* the plugin's lowering rules trace under `jax_numpy_rank_promotion='raise'` and
  `jax_numpy_dtype_promotion='strict'`;
* `tridiagonal_solve(perturb_singular=True)` (inverse iteration in `eigh_tridiagonal`) runs.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

CPU = None


def on(device, f, *args):
    out = jax.jit(f)(*jax.device_put(args, device))
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("name", ["eigh", "svd", "svd values", "qr", "eig", "inv"])
def test_non_finite_input_gives_nan(gpu, name, dtype, fill):
    f = {
        "eigh": jnp.linalg.eigh,
        "svd": jnp.linalg.svd,
        "svd values": lambda a: jnp.linalg.svd(a, compute_uv=False),
        "qr": jnp.linalg.qr,
        "eig": jnp.linalg.eig,
        "inv": jnp.linalg.inv,
    }[name]
    a = np.full((2, 4, 4), 0.5, dtype) + 2 * np.eye(4, dtype=dtype)
    a[0] = fill  # the first matrix only: the second stays finite
    got = on(gpu, f, a)
    want = on(jax.devices("cpu")[0], f, a)
    for g, w in zip(got, want):
        assert np.array_equal(np.isnan(g[0]).all(), np.isnan(w[0]).all()), (g[0], w[0])
        assert np.isfinite(g[1]).all()


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 5)])
@pytest.mark.parametrize("full", [True, False])
def test_svd_of_zero_singular_values_is_orthogonal(gpu, shape, full):
    r = np.random.default_rng(0)
    a = r.standard_normal(shape).astype(np.float32)
    a[..., 0] = 0  # a zero column
    zero = np.zeros(shape, np.float32)
    for x in (a, zero):
        u, s, vt = on(gpu, lambda x: jnp.linalg.svd(x, full_matrices=full), x)
        eye_u = np.eye(u.shape[-1])
        eye_v = np.eye(vt.shape[-2])
        assert np.abs(np.swapaxes(u, -1, -2) @ u - eye_u).max() < 1e-5
        assert np.abs(vt @ np.swapaxes(vt, -1, -2) - eye_v).max() < 1e-5
        k = min(shape[-2:])
        rebuilt = (u[..., :k] * s[..., None, :]) @ vt[..., :k, :]
        assert np.abs(rebuilt - x).max() < 1e-5
    # The zero matrix: U is the identity, as LAPACK returns it.
    if shape[-2] == shape[-1] and full:
        u, s, vt = on(gpu, jnp.linalg.svd, zero)
        np.testing.assert_array_equal(u, np.broadcast_to(np.eye(shape[-1]), u.shape))


def test_householder_is_exact_where_lapack_is(gpu):
    a = np.vstack([np.zeros((4, 3)), np.eye(3)]).astype(np.float32)
    got = on(gpu, jnp.linalg.qr, a)
    want = on(jax.devices("cpu")[0], jnp.linalg.qr, a)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.abs(g), np.abs(w))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rules_trace_under_strict_promotion(gpu, dtype):
    r = np.random.default_rng(1)
    a = r.standard_normal((10, 10)).astype(dtype)
    a = a + a.T
    spd = a @ a.T + 10 * np.eye(10, dtype=dtype)
    with jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"), \
            jax.enable_x64(dtype == np.float64):
        x = jnp.asarray(a)
        w, v = jnp.linalg.eigh(x)
        assert np.abs(np.asarray(x @ v - v * w[None, :])).max() < 1e-3
        u, s, vt = jnp.linalg.svd(x)
        assert np.abs(np.asarray((u * s[None, :]) @ vt - x)).max() < 1e-3
        q, rr = jnp.linalg.qr(x)
        assert np.abs(np.asarray(q @ rr - x)).max() < 1e-3
        c = jnp.linalg.cholesky(jnp.asarray(spd))
        assert np.abs(np.asarray(c @ c.T) - spd).max() < 1e-2


def test_eigh_tridiagonal_eigenvectors(gpu):
    r = np.random.default_rng(2)
    d = r.standard_normal(30).astype(np.float32)
    e = r.standard_normal(29).astype(np.float32)
    f = lambda d, e: jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=False)
    w, v = on(gpu, f, d, e)
    wc, _ = on(jax.devices("cpu")[0], f, d, e)
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(w, wc, atol=1e-5)
    assert np.abs(t @ v - v * w).max() < 1e-5
    assert np.abs(v.T @ v - np.eye(30)).max() < 1e-4
