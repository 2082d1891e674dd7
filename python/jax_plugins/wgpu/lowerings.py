"""Lowering rules JAX lacks for a platform it does not know.

JAX lowers a few linear-algebra primitives to LAPACK/cuSOLVER custom calls registered only for
`cpu`, `cuda`, `rocm` and `tpu` (or has no rule at all for other platforms: `eigh`). For
`wgpu` each gets a rule here that emits plain StableHLO, written with `jax.lax` (loops of
small vector updates — fine for the small and medium matrices these are used on), or a rule
that raises a clear `NotImplementedError`:

* `eigh` (real symmetric): cyclic Jacobi rotations, eigenvalues sorted ascending.
* `qr`: Householder reflections (full or reduced Q).
* `svd` (real): one-sided Jacobi (Hestenes) rotations of the columns, singular values sorted
  descending; a full U is completed with Householder QR.
* `eig`, `schur`, `hessenberg`, `tridiagonal`: NotImplementedError naming the primitive.

`cholesky`, `triangular_solve` and `lu` need no rule: JAX lowers them to StableHLO ops
(`stablehlo.cholesky`, `stablehlo.triangular_solve`, loops) that the compiler runs.
"""

from __future__ import annotations

from typing import Any, Callable

RULES: list[tuple[Any, Callable[..., Any]]] = []
"""`(primitive, lowering rule)` pairs installed for the `wgpu` platform."""

_SWEEPS = 12


def _jacobi_eigh_2d(a):
    import jax.numpy as jnp
    from jax import lax

    n = a.shape[-1]
    dtype = a.dtype
    v = jnp.eye(n, dtype=dtype)
    if n < 2:
        return v, jnp.diagonal(a)
    pairs = [(p, q) for p in range(n - 1) for q in range(p + 1, n)]
    ps = jnp.array([p for p, _ in pairs], jnp.int32)
    qs = jnp.array([q for _, q in pairs], jnp.int32)
    idx = jnp.arange(n)

    def rotate(k, state):
        a, v = state
        p, q = ps[k], qs[k]
        app, aqq, apq = a[p, p], a[q, q], a[p, q]
        tiny = jnp.finfo(dtype).tiny
        theta = (aqq - app) / (2 * jnp.where(jnp.abs(apq) > tiny, apq, 1))
        t = jnp.sign(theta) / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1))
        t = jnp.where(theta == 0, 1, t)
        t = jnp.where(jnp.abs(apq) > tiny, t, 0)
        c = 1 / jnp.sqrt(t * t + 1)
        s = t * c
        # Rows p and q, then columns p and q, of A; columns of V.
        rp, rq = a[p, :], a[q, :]
        a = jnp.where((idx == p)[:, None], (c * rp - s * rq)[None, :], a)
        a = jnp.where((idx == q)[:, None], (s * rp + c * rq)[None, :], a)
        cp, cq = a[:, p], a[:, q]
        a = jnp.where((idx == p)[None, :], (c * cp - s * cq)[:, None], a)
        a = jnp.where((idx == q)[None, :], (s * cp + c * cq)[:, None], a)
        vp, vq = v[:, p], v[:, q]
        v = jnp.where((idx == p)[None, :], (c * vp - s * vq)[:, None], v)
        v = jnp.where((idx == q)[None, :], (s * vp + c * vq)[:, None], v)
        return a, v

    def sweep(_, state):
        return lax.fori_loop(0, len(pairs), rotate, state)

    a, v = lax.fori_loop(0, _SWEEPS, sweep, (a, v))
    return v, jnp.diagonal(a)


def _eigh_impl(x, *, lower=True, sort_eigenvalues=True, subset_by_index=None, **_):
    import jax
    import jax.numpy as jnp

    if jnp.iscomplexobj(x):
        raise NotImplementedError("eigh of complex matrices is not implemented on wgpu")
    if subset_by_index not in (None, (0, x.shape[-1]), (0, -1)):
        raise NotImplementedError("eigh with subset_by_index is not implemented on wgpu")
    tri = jnp.tril(x) if lower else jnp.triu(x)
    sym = tri + jnp.swapaxes(tri, -1, -2) - jnp.eye(x.shape[-1], dtype=x.dtype) * x
    fn = _jacobi_eigh_2d
    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    v, w = fn(sym)
    if sort_eigenvalues:
        order = jnp.argsort(w, axis=-1)
        w = jnp.take_along_axis(w, order, axis=-1)
        v = jnp.take_along_axis(v, order[..., None, :], axis=-1)
    return [v, w]


def _householder_qr_2d(a, full_matrices):
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape
    k = min(m, n)
    dtype = a.dtype
    q = jnp.eye(m, dtype=dtype)
    rows = jnp.arange(m)

    def step(j, state):
        r, q = state
        col = jnp.where(rows >= j, r[:, j], 0)
        alpha = jnp.linalg.norm(col)
        x0 = r[j, j]
        alpha = jnp.where(x0 > 0, -alpha, alpha)
        u = col - jnp.where(rows == j, alpha, 0)
        un = jnp.linalg.norm(u)
        u = jnp.where(un > 0, u / jnp.where(un > 0, un, 1), 0)
        r = r - 2 * u[:, None] * (u[None, :] @ r)
        q = q - 2 * (q @ u[:, None]) * u[None, :]
        return r, q

    r, q = lax.fori_loop(0, k, step, (a, q))
    r = jnp.triu(r)
    if not full_matrices:
        q, r = q[:, :k], r[:k, :]
    return q, r


def _qr_impl(x, *, pivoting=False, full_matrices=True, **_):
    import jax
    import jax.numpy as jnp

    if pivoting:
        raise NotImplementedError("qr with pivoting is not implemented on wgpu")
    if jnp.iscomplexobj(x):
        raise NotImplementedError("qr of complex matrices is not implemented on wgpu")

    def fn(a):
        return _householder_qr_2d(a, full_matrices)

    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    q, r = fn(x)
    return [q, r]


def _jacobi_svd_2d(a, full_matrices, compute_uv):
    """SVD of one m x n matrix with m >= n: returns s (descending), u, vt."""
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape
    dtype = a.dtype
    v = jnp.eye(n, dtype=dtype)
    idx = jnp.arange(n)
    pairs = [(p, q) for p in range(n - 1) for q in range(p + 1, n)]

    def rotate(k, state):
        w, v = state
        p, q = ps[k], qs[k]
        wp, wq = w[:, p], w[:, q]
        alpha, beta, gamma = wp @ wp, wq @ wq, wp @ wq
        tiny = jnp.finfo(dtype).tiny
        live = jnp.abs(gamma) > tiny
        zeta = (beta - alpha) / (2 * jnp.where(live, gamma, 1))
        t = jnp.sign(zeta) / (jnp.abs(zeta) + jnp.sqrt(zeta * zeta + 1))
        t = jnp.where(zeta == 0, 1, t)
        t = jnp.where(live, t, 0)
        c = 1 / jnp.sqrt(t * t + 1)
        s = t * c
        w = jnp.where((idx == p)[None, :], (c * wp - s * wq)[:, None], w)
        w = jnp.where((idx == q)[None, :], (s * wp + c * wq)[:, None], w)
        vp, vq = v[:, p], v[:, q]
        v = jnp.where((idx == p)[None, :], (c * vp - s * vq)[:, None], v)
        v = jnp.where((idx == q)[None, :], (s * vp + c * vq)[:, None], v)
        return w, v

    w = a
    if pairs:
        ps = jnp.array([p for p, _ in pairs], jnp.int32)
        qs = jnp.array([q for _, q in pairs], jnp.int32)

        def sweep(_, state):
            return lax.fori_loop(0, len(pairs), rotate, state)

        w, v = lax.fori_loop(0, _SWEEPS, sweep, (w, v))
    sv = jnp.sqrt(jnp.sum(w * w, axis=0))
    order = jnp.argsort(-sv)
    sv = sv[order]
    if not compute_uv:
        return sv, None, None
    w, v = w[:, order], v[:, order]
    u = w / jnp.where(sv > 0, sv, 1)[None, :]
    if full_matrices and m > n:
        q, _ = _householder_qr_2d(u, True)
        u = jnp.concatenate([u, q[:, n:]], axis=1)
    return sv, u, v.T


def _svd_impl(x, *, full_matrices=True, compute_uv=True, subset_by_index=None, **_):
    import jax
    import jax.numpy as jnp

    if jnp.iscomplexobj(x):
        raise NotImplementedError("svd of complex matrices is not implemented on wgpu")
    m, n = x.shape[-2:]
    if subset_by_index not in (None, (0, min(m, n)), (0, -1)):
        raise NotImplementedError("svd with subset_by_index is not implemented on wgpu")
    wide = m < n

    def fn(a):
        if wide:
            s, u, vt = _jacobi_svd_2d(a.T, full_matrices, compute_uv)
            return (s,) if not compute_uv else (s, vt.T, u.T)
        s, u, vt = _jacobi_svd_2d(a, full_matrices, compute_uv)
        return (s,) if not compute_uv else (s, u, vt)

    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    return list(fn(x))


def _unsupported(name):
    def rule(ctx, *args, **kwargs):
        raise NotImplementedError(
            f"{name} has no lowering for the wgpu platform yet (jax-wgpu); compute it on cpu: "
            f"jax.device_put(x, jax.devices('cpu')[0])"
        )

    return rule


def _rules():
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    rules = [
        (linalg.eigh_p, mlir.lower_fun(_eigh_impl, multiple_results=True)),
        (linalg.qr_p, mlir.lower_fun(_qr_impl, multiple_results=True)),
        (linalg.svd_p, mlir.lower_fun(_svd_impl, multiple_results=True)),
    ]
    for name in ["eig_p", "schur_p", "hessenberg_p", "tridiagonal_p"]:
        prim = getattr(linalg, name, None)
        if prim is not None:
            rules.append((prim, _unsupported(name[:-2])))
    return rules


def register(platform: str) -> None:
    """Installs the rules for `platform`."""
    from jax._src.interpreters import mlir

    for primitive, rule in RULES or _rules():
        mlir.register_lowering(primitive, rule, platform=platform)
