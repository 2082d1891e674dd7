"""JAX's own primitive test harnesses, run on wgpu and compared with jax cpu in the same process.

The harnesses come from the installed jax (`jax._src.internal_test_util.test_harnesses`, the
5,490 cases JAX's `export_harnesses_multi_platform_test.py` runs on every platform it has), so
this subset of JAX's own tests needs no JAX source checkout. By default a deterministic sample
runs: up to `WGPU_HLO_HARNESS_PER_GROUP` (default 3) harnesses of each of the ~134 groups
(primitives), spread over the group. `WGPU_HLO_HARNESS_PER_GROUP=all` runs every harness.

Like the upstream test, eigh harnesses are left out (eigenvectors are not unique) and so is what
JAX itself marks unimplemented on cpu. Cases known to differ carry an `xfail(strict=True)` with
the reason, so a fix shows up as XPASS and the list stays honest.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
test_harnesses = pytest.importorskip("jax._src.internal_test_util.test_harnesses")


# Always in the sample: harnesses that once failed (regressions stay covered).
ALWAYS = (
    r"conv_general_dilated_preferred_lhs_int8",  # 33 accumulators: `i32` shadowed the type
    r"sort_multiple_arrays_num_arrays_3_.*isstable_False",
    r"cholesky_shape_(float32_200|complex64)",
    r"triangular_solve_dtypes_a_(bfloat16|complex64)",
    r"approx_top_k",
)


def _sample():
    per_group = os.environ.get("WGPU_HLO_HARNESS_PER_GROUP", "3")
    groups: dict[str, list] = {}
    for h in test_harnesses.all_harnesses:
        if not h.filter("cpu", include_jax_unimpl=False):
            continue
        if "eigh_" in h.fullname or h.params.get("enable_xla", True) is False:
            continue
        groups.setdefault(h.group_name, []).append(h)
    chosen = []
    for name in sorted(groups):
        # JAX defines some groups by iterating over sets (hash-seeded order): sorted, so that
        # every process (pytest-xdist workers) picks the same sample.
        hs = sorted(groups[name], key=lambda h: h.fullname)
        if per_group == "all" or len(hs) <= int(per_group):
            chosen.extend(hs)
        else:
            k = int(per_group)
            picked = {(i * len(hs)) // k for i in range(k)}
            chosen.extend(h for i, h in enumerate(hs)
                          if i in picked or any(re.search(p, h.fullname) for p in ALWAYS))
    return chosen


# fullname regex -> why it differs (kept honest by strict xfail).
KNOWN: dict[str, str] = {}


def _params():
    out = []
    for h in _sample():
        marks = [pytest.mark.xfail(reason=why, strict=True)
                 for pat, why in KNOWN.items() if re.search(pat, h.fullname)]
        out.append(pytest.param(h, id=h.fullname, marks=marks))
    return out


def _tolerance(dtype, fullname):
    dtype = np.dtype(dtype)
    if not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
        return 0.0, 0.0
    if dtype.itemsize <= 1:  # f8 / f4
        return 1e-1, 1e-1
    if dtype == np.float16:
        return 2e-3, 2e-3
    if dtype.name == "bfloat16":
        return 2e-2, 2e-2
    tol = 2e-5
    if re.search(r"conv_general_dilated|dot_general|fft|cholesky|triangular_solve|qr|svd|lu|"
                 r"cumlogsumexp|reduce_window_add|cumsum|reduce_sum|lgamma|digamma|igamma|erf_inv|"
                 r"random_gamma|regularized_incomplete_beta|polygamma|zeta|bessel", fullname):
        tol = 2e-4
    return tol, tol


def _canonical(leaves, group):
    """Decompositions are unique only up to signs: QR and SVD factors with one sign per
    column chosen the same way on both backends (R's diagonal, and each column of U, made
    positive at its largest-magnitude entry), compared over the first min(m, n) columns."""
    leaves = [np.array(x) for x in leaves]
    if group == "qr" and len(leaves) == 2:
        q, r = leaves
        k = min(q.shape[-2], r.shape[-1])
        d = np.sign(np.diagonal(r[..., :k, :k], axis1=-2, axis2=-1)).astype(q.dtype)
        d[d == 0] = 1
        return [q[..., :, :k] * d[..., None, :], r[..., :k, :] * d[..., :, None]]
    if group == "svd" and len(leaves) == 3:
        s, u, vt = leaves
        k = s.shape[-1]
        u, vt = u[..., :, :k], vt[..., :k, :]
        pick = np.argmax(np.abs(u), axis=-2)[..., None, :]
        d = np.sign(np.take_along_axis(u, pick, axis=-2))[..., 0, :].astype(u.dtype)
        d[d == 0] = 1
        return [s, u * d[..., None, :], vt * d[..., :, None]]
    return leaves


LINALG = ("cholesky", "qr", "svd", "triangular_solve", "lu")


def _unstable_sort(leaves, params):
    """An unstable sort may order elements with equal keys either way: both results with their
    rows (one element of every array) put in one lexicographic order along the sorted axis."""
    axis = params["dimension"] % leaves[0].ndim
    moved = [np.moveaxis(np.asarray(x), axis, -1) for x in leaves]
    order = np.lexsort(moved[::-1], axis=-1)
    return [np.take_along_axis(x, order, axis=-1) for x in moved]


def _assert_close(got, want, fullname, params=None):
    gl, wl = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    group = fullname.split("_shape")[0].split("_multi_array")[0]
    gl, wl = _canonical(gl, group), _canonical(wl, group)
    params = params or {}
    if params.get("is_stable") is False and len(wl) > params.get("num_keys", 1):
        gl, wl = _unstable_sort(gl, params), _unstable_sort(wl, params)
    assert len(gl) == len(wl)
    for g, w in zip(gl, wl):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype == jax.dtypes.float0:
            continue
        if fullname.startswith("cholesky") and w.ndim >= 2:
            # The primitive leaves the other triangle implementation-defined (LAPACK keeps
            # the input there); jnp.linalg.cholesky masks it.
            g, w = np.tril(g), np.tril(w)
        rtol, atol = _tolerance(w.dtype, fullname)
        if fullname.startswith(LINALG) and w.size:
            # Factorizations of ill-conditioned inputs: error relative to the factor's scale.
            atol = atol * max(1.0, float(np.nanmax(np.abs(w))))
        if rtol == 0.0:
            np.testing.assert_array_equal(g, w)
        else:
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=atol,
                                       equal_nan=True)


@pytest.mark.parametrize("harness", _params())
def test_harness(gpu, harness):
    args = harness.dyn_args_maker(np.random.RandomState(0))
    cpu = jax.devices("cpu")[0]
    fn = jax.jit(harness.dyn_fun)
    want = fn(*jax.device_put(args, cpu))
    got = fn(*jax.device_put(args, gpu))
    _assert_close(jax.device_get(got), jax.device_get(want), harness.fullname, harness.params)
