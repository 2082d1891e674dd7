"""Ops the device cannot run, run on the host inside the same executable (hybrid execution).

`eig`, `schur`, `hessenberg`, `tridiagonal` (which JAX lowers to LAPACK custom calls on cpu),
and the complex (or pivoted / subset) variants of `eigh`, `svd` and `qr` that the device rules
in `lowerings.py` do not cover, lower to a host call (`callbacks.emit_host_call`) of
numpy/scipy's LAPACK — the same routines JAX's cpu backend calls. The executable warns once,
at its first run, naming the ops that ran on the host; `WGPU_HLO_HOST_OPS=error` makes such an
op a lowering error instead.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from . import callbacks


def _refuse_if_asked(name: str) -> None:
    if os.environ.get(callbacks.HOST_OPS_ENV, "").strip().lower() == "error":
        raise NotImplementedError(
            f"{name} would run on the host (numpy/scipy) on wgpu, and "
            f"{callbacks.HOST_OPS_ENV}=error forbids host ops"
        )


def _batched(fn: Callable[..., tuple], xs: list, out_avals) -> tuple:
    """Applies `fn` to every matrix of `xs[0]` with the matching entries of the other operands
    (batch dimensions first, the same for all), casting each result to its aval's dtype."""
    batch = xs[0].shape[:-2]
    outs = [np.empty(tuple(a.shape), np.dtype(a.dtype)) for a in out_avals]
    for idx in np.ndindex(*batch):
        for out, r in zip(outs, fn(*(x[idx] for x in xs))):
            out[idx] = np.asarray(r).astype(out.dtype, copy=False)
    return tuple(outs)


def host_rule(name: str, compute: Callable[..., Callable[..., tuple]]):
    """A lowering rule running `name` on the host: `compute(**params)` gives the function of
    one matrix (and the matching entries of any further operands)."""

    def rule(ctx, *xs, **params):
        _refuse_if_asked(name)
        per_matrix = compute(**params)
        out_avals = list(ctx.avals_out)

        def fn(*arrays):
            return _batched(per_matrix, list(arrays), out_avals)

        results, _ = callbacks.emit_host_call(
            ctx, fn, None, list(xs), ctx.avals_in, out_avals, has_side_effect=False,
            name=name, host_op=name,
        )
        return results

    return rule


def _eig(*, compute_left_eigenvectors=True, compute_right_eigenvectors=True, **_):
    import scipy.linalg

    def one(a):
        w, vl, vr = scipy.linalg.eig(a, left=True, right=True)
        out = [w]
        if compute_left_eigenvectors:
            out.append(vl)
        if compute_right_eigenvectors:
            out.append(vr)
        return tuple(out)

    return one


def _schur(*, compute_schur_vectors=True, sort_eig_vals=False, **_):
    import scipy.linalg

    if sort_eig_vals:
        raise NotImplementedError("The sort feature of LAPACK's gees routine is not implemented.")

    def one(a):
        output = "complex" if np.iscomplexobj(a) else "real"
        t, z = scipy.linalg.schur(a, output=output)
        return (t, z) if compute_schur_vectors else (t,)

    return one


def _hessenberg(**_):
    import scipy.linalg

    def one(a):
        (gehrd,) = scipy.linalg.lapack.get_lapack_funcs(("gehrd",), (a,))
        n = a.shape[-1]
        h, tau, info = gehrd(a, lo=0, hi=max(n - 1, 0))
        if info != 0:
            return np.full_like(h, np.nan), np.full(max(n - 1, 0), np.nan, tau.dtype)
        return h, tau[: max(n - 1, 0)]

    return one


def _tridiagonal(*, lower=True, **_):
    import scipy.linalg

    def one(a):
        routine = "hetrd" if np.iscomplexobj(a) else "sytrd"
        (trd,) = scipy.linalg.lapack.get_lapack_funcs((routine,), (a,))
        c, d, e, tau, info = trd(a, lower=1 if lower else 0)
        if info != 0:
            c, d, e, tau = (np.full_like(v, np.nan) for v in (c, d, e, tau))
        return c, d, e, tau

    return one


def _eigh(*, lower=True, sort_eigenvalues=True, subset_by_index=None, **_):
    import scipy.linalg

    def one(a):
        n = a.shape[-1]
        subset = None
        if subset_by_index is not None and tuple(subset_by_index) not in ((0, n), (0, -1)):
            lo, hi = subset_by_index
            subset = [lo, hi - 1]
        w, v = scipy.linalg.eigh(a, lower=lower, subset_by_index=subset)
        return v, w

    return one


def _svd(*, full_matrices=True, compute_uv=True, subset_by_index=None, **_):
    def one(a):
        if not compute_uv:
            s = np.linalg.svd(a, compute_uv=False)
            out = (s,)
        else:
            u, s, vt = np.linalg.svd(a, full_matrices=full_matrices)
            out = (s, u, vt)
        if subset_by_index is not None:
            lo, hi = subset_by_index
            if (lo, hi) not in ((0, min(a.shape)), (0, -1)):
                s = out[0][lo:hi]
                out = (s,) if not compute_uv else (s, out[1][:, lo:hi], out[2][lo:hi, :])
        return out

    return one


def _qr(*, pivoting=False, full_matrices=True, **_):
    import scipy.linalg

    def one(a):
        mode = "full" if full_matrices else "economic"
        if pivoting:
            q, r, p = scipy.linalg.qr(a, mode=mode, pivoting=True)
            return q, r, p
        q, r = scipy.linalg.qr(a, mode=mode)
        return q, r

    return one


def _geqrf(**_):
    import scipy.linalg.lapack

    def one(a):
        (geqrf,) = scipy.linalg.lapack.get_lapack_funcs(("geqrf",), (a,))
        qr, tau, _, info = geqrf(a)
        if info != 0:
            raise ValueError(f"LAPACK geqrf failed: info {info}")
        return qr, tau

    return one


def _householder_product(**_):
    import scipy.linalg.lapack

    def one(a, taus):
        m, n = a.shape
        complex_ = np.iscomplexobj(a)
        (orgqr,) = scipy.linalg.lapack.get_lapack_funcs(("ungqr" if complex_ else "orgqr",), (a,))
        if n == 0 or taus.shape[0] == 0:
            return (np.eye(m, n, dtype=a.dtype),)
        q, _, info = orgqr(a, taus)
        if info != 0:
            raise ValueError(f"LAPACK orgqr failed: info {info}")
        return (q[:, :n],)

    return one


HOST_RULES: dict[str, Callable[..., Any]] = {
    "geqrf": _geqrf,
    "householder_product": _householder_product,
    "eig": _eig,
    "schur": _schur,
    "hessenberg": _hessenberg,
    "tridiagonal": _tridiagonal,
    "eigh": _eigh,
    "svd": _svd,
    "qr": _qr,
}
"""Per primitive name, the host implementation's factory (params -> function of a matrix)."""


def rule(name: str):
    """The host lowering rule of primitive `name`."""
    return host_rule(name, HOST_RULES[name])


# ---------------------------------------------------------------------------------------------
# cholesky / triangular_solve beyond f32 and f64: f16/bf16 computed in f32 on the device (as
# XLA's backends upcast them), complex on the host.


def _tri_mask(a: np.ndarray, lower: bool, unit_diagonal: bool) -> np.ndarray:
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        idx = np.arange(t.shape[-1])
        t[..., idx, idx] = 1
    return t


def _host_cholesky(a: np.ndarray, *, lower: bool) -> np.ndarray:
    out = np.empty_like(a)
    for idx in np.ndindex(*a.shape[:-2]):
        m = a[idx]
        try:
            l_factor = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            # Like LAPACK through jax cpu: not positive definite gives NaNs, not an exception.
            l_factor = np.full_like(m, np.nan)
        out[idx] = l_factor if lower else np.conj(l_factor.T)
    return out


def _host_triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    import scipy.linalg

    out = np.empty(b.shape, b.dtype)
    for idx in np.ndindex(*b.shape[:-2]):
        t = _tri_mask(np.array(a[idx]), lower, unit_diagonal)
        if conjugate_a:
            t = np.conj(t)
        low = lower
        if transpose_a:
            t, low = t.T, not lower
        rhs = b[idx]
        if left_side:  # op(a) x = b
            out[idx] = scipy.linalg.solve_triangular(t, rhs, lower=low)
        else:  # x op(a) = b  <=>  op(a)^T x^T = b^T
            out[idx] = scipy.linalg.solve_triangular(t.T, rhs.T, lower=not low).T
    return out


def _is(dtype, kinds) -> bool:
    return np.dtype(dtype).name in kinds


_NARROW = ("float16", "bfloat16")


def _jax_rule(prim):
    """JAX's platform-independent lowering rule of `prim`."""
    from jax._src.interpreters import mlir

    rule = mlir._lowerings[prim]  # noqa: SLF001 - the platform-independent rule
    return getattr(rule, "rule", rule)  # a LoweringRuleEntry from jax 0.11 on


def _narrow_or_complex(prim, name: str, host_fn, default=None):
    """A rule for `prim` on wgpu: f16/bf16 through f32, complex on the host, everything else
    through `default` (JAX's own rule when None)."""
    from jax._src.interpreters import mlir

    if default is None:
        default = _jax_rule(prim)

    def rule(ctx, *args, **params):
        dtype = ctx.avals_in[0].dtype
        if _is(dtype, _NARROW):
            import jax.numpy as jnp

            def upcast(*xs):
                ys = prim.bind(*[x.astype(jnp.float32) for x in xs], **params)
                return ys.astype(dtype)

            return mlir.lower_fun(upcast, multiple_results=False)(ctx, *args)
        if np.issubdtype(np.dtype(dtype), np.complexfloating):
            _refuse_if_asked(name)
            out_avals = list(ctx.avals_out)

            def fn(*xs):
                return (np.asarray(host_fn(*xs, **params)).astype(out_avals[0].dtype),)

            results, _ = callbacks.emit_host_call(
                ctx, fn, None, list(args), ctx.avals_in, out_avals, has_side_effect=False,
                name=name, host_op=name,
            )
            return results
        return default(ctx, *args, **params)

    return rule


def register_solvers(platform: str) -> None:
    """Installs the cholesky / triangular_solve rules for `platform`."""
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    from . import lowerings

    for prim, name, host_fn, default in [
        (
            linalg.cholesky_p,
            "cholesky",
            lambda a, **p: _host_cholesky(a, lower=True),
            lowerings.cholesky_rule(),
        ),
        (
            linalg.triangular_solve_p,
            "triangular_solve",
            _host_triangular_solve,
            lowerings.triangular_solve_rule(_jax_rule(linalg.triangular_solve_p)),
        ),
    ]:
        mlir.register_lowering(
            prim, _narrow_or_complex(prim, name, host_fn, default), platform=platform
        )
