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


def _batched(fn: Callable[..., tuple], xs: list, out_avals, screen: bool = True) -> tuple:
    """Applies `fn` to every matrix of `xs[0]` with the matching entries of the other operands
    (batch dimensions first, the same for all), casting each result to its aval's dtype.

    A matrix LAPACK fails on (no convergence), and with `screen` one with an infinity or a NaN,
    gives NaN results (zeros for integer ones), as jax cpu's checks of LAPACK's `info` do, not
    an exception: scipy's finiteness checks and numpy's LinAlgError made every such call an
    INTERNAL error on wgpu. Without `screen` LAPACK computes with them (QR, whose R keeps its
    zeros below the diagonal as on cpu)."""
    batch = xs[0].shape[:-2]
    outs = [np.empty(tuple(a.shape), np.dtype(a.dtype)) for a in out_avals]
    for idx in np.ndindex(*batch):
        results = None
        # LAPACK is not called at all on such a matrix (its reference routines report NaN
        # entries as illegal arguments on stderr, and some return finite garbage).
        if not screen or np.all(np.isfinite(xs[0][idx])):
            try:
                results = fn(*(x[idx] for x in xs))
            except (np.linalg.LinAlgError, ValueError):
                results = None
        if results is None:
            for out in outs:
                out[idx] = np.nan if np.issubdtype(out.dtype, np.inexact) else 0
            continue
        for out, r in zip(outs, results):
            out[idx] = np.asarray(r).astype(out.dtype, copy=False)
    return tuple(outs)


def host_rule(name: str, compute: Callable[..., Callable[..., tuple]]):
    """A lowering rule running `name` on the host: `compute(**params)` gives the function of
    one matrix (and the matching entries of any further operands). Matrices with non-finite
    entries give NaN results without calling LAPACK, but for the QR family (see `_batched`)."""
    screen = name not in ("qr", "geqrf", "householder_product")

    def rule(ctx, *xs, **params):
        _refuse_if_asked(name)
        per_matrix = compute(**params)
        out_avals = list(ctx.avals_out)

        def fn(*arrays):
            return _batched(per_matrix, list(arrays), out_avals, screen)

        results, _ = callbacks.emit_host_call(
            ctx, fn, None, list(xs), ctx.avals_in, out_avals, has_side_effect=False,
            name=name, host_op=name,
        )
        return results

    return rule


def _eig(*, compute_left_eigenvectors=True, compute_right_eigenvectors=True, **_):
    import scipy.linalg

    def one(a):
        w, vl, vr = scipy.linalg.eig(a, left=True, right=True, check_finite=False)
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
        t, z = scipy.linalg.schur(a, output=output, check_finite=False)
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
        w, v = scipy.linalg.eigh(a, lower=lower, subset_by_index=subset, check_finite=False)
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
            q, r, p = scipy.linalg.qr(a, mode=mode, pivoting=True, check_finite=False)
            return q, r, p
        q, r = scipy.linalg.qr(a, mode=mode, check_finite=False)
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
            out[idx] = scipy.linalg.solve_triangular(t, rhs, lower=low, check_finite=False)
        else:  # x op(a) = b  <=>  op(a)^T x^T = b^T
            out[idx] = scipy.linalg.solve_triangular(
                t.T, rhs.T, lower=not low, check_finite=False
            ).T
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
    if default is None:
        default = _jax_rule(prim)

    def rule(ctx, *args, **params):
        dtype = ctx.avals_in[0].dtype
        if _is(dtype, _NARROW):
            import jax.numpy as jnp

            def upcast(*xs):
                ys = prim.bind(*[x.astype(jnp.float32) for x in xs], **params)
                return ys.astype(dtype)

            from .lowerings import lower_fun

            return lower_fun(upcast, multiple_results=False)(ctx, *args)
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


def _perturbed_pivot(pivot, row, perturb, finfo):
    """The pivot (and right-hand-side row, scaled together) to divide by in the back
    substitution of a numerically singular tridiagonal system: a pivot below 1 that would
    overflow `row / pivot` is pushed away from zero by `perturb`, doubled until it does not;
    one below the smallest safe number is instead scaled up with its row when the row is
    small enough (LAPACK xLAGTS's rule, which jax cpu applies)."""
    safemin = max(finfo.tiny, (1 / finfo.max) * (1 + finfo.eps))
    bignum = 1 / safemin
    size = abs(pivot)
    if size >= 1:
        return pivot, row
    step = max(abs(perturb), safemin)
    step = -step if np.real(pivot) < 0 else step
    largest = float(np.max(np.abs(row))) if row.size else 0.0
    while size < 1:
        if size < safemin:
            if size == 0 or largest * safemin > size:
                pivot, step = pivot + step, step * 2
            else:
                return pivot * bignum, row * bignum
        elif largest > size * bignum:
            pivot, step = pivot + step, step * 2
        else:
            break
        size = abs(pivot)
    return pivot, row


def _tridiagonal_solve_perturbed_one(dl, d, du, b):
    """`T x = b` for one tridiagonal `T` (`dl[1:]` below, `d` on, `du[:-1]` above the
    diagonal) and `b` of shape `n x k`: Gaussian elimination with row interchanges chosen by
    scaled magnitudes (U then has two superdiagonals), then back substitution through
    [`_perturbed_pivot`], so that a singular `T` (`T' - lambda I` at an eigenvalue, as
    inverse iteration solves) gives a large finite solution instead of infinities."""
    n = d.shape[0]
    dtype = np.result_type(d, b)
    finfo = np.finfo(np.real(np.zeros((), dtype)).dtype)
    x = np.array(b, dtype=dtype, copy=True)
    if n == 0:
        return x
    if n == 1:
        pivot, row = _perturbed_pivot(d[0], x[0], finfo.eps * abs(d[0]), finfo)
        x[0] = row * (1 / pivot)
        return x
    u = np.zeros((n, 3), dtype)
    u[0, 0], u[0, 1] = d[0], du[0]
    largest_u = max(abs(u[0, 0]), abs(u[0, 1]))
    scale = abs(u[0, 0]) + abs(u[0, 1])
    for k in range(n - 1):
        u[k + 1, 0] = d[k + 1]
        next_scale = abs(dl[k + 1]) + abs(u[k + 1, 0]) + (abs(du[k + 1]) if k < n - 2 else 0)
        if dl[k + 1] == 0:
            scale = next_scale
            u[k + 1, 1], u[k, 2] = du[k + 1], 0
        else:
            this = 0.0 if u[k, 0] == 0 else abs(u[k, 0]) / scale
            below = abs(dl[k + 1]) / next_scale
            if below <= this:
                scale = next_scale
                factor = dl[k + 1] / u[k, 0]
                u[k + 1, 0] -= factor * u[k, 1]
                u[k + 1, 1], u[k, 2] = du[k + 1], 0
                x[k + 1] = x[k + 1] - factor * x[k]
            else:
                factor = u[k, 0] / dl[k + 1]
                upper = u[k, 1]
                u[k, 0], u[k + 1, 0], u[k, 1] = dl[k + 1], upper - factor * d[k + 1], d[k + 1]
                if k < n - 2:
                    u[k, 2], u[k + 1, 1] = du[k + 1], -factor * du[k + 1]
                x[k], x[k + 1] = x[k + 1].copy(), x[k] - factor * x[k + 1]
                scale = abs(u[k + 1, 0]) + abs(u[k + 1, 1])
        if k < n - 2:
            largest_u = max(largest_u, *np.abs(u[k]))
    largest_u = max(largest_u, abs(u[n - 1, 0]))
    perturb = finfo.eps * largest_u
    for k in range(n - 1, -1, -1):
        row = x[k].copy()
        if k + 1 < n:
            row -= u[k, 1] * x[k + 1]
        if k + 2 < n:
            row -= u[k, 2] * x[k + 2]
        pivot, row = _perturbed_pivot(u[k, 0], row, perturb, finfo)
        x[k] = row * (1 / pivot)
    return x


def _host_tridiagonal_solve_perturbed(dl, d, du, b):
    out = np.empty(b.shape, b.dtype)
    for idx in np.ndindex(*b.shape[:-2]):
        out[idx] = _tridiagonal_solve_perturbed_one(dl[idx], d[idx], du[idx], b[idx])
    return out


def tridiagonal_solve_rule(default):
    """`tridiagonal_solve` on wgpu: JAX's own rule (`default`, a scan), and with
    `perturb_singular=True` (inverse iteration in `eigh_tridiagonal`, for which JAX has only
    LAPACK- and CUDA-backed kernels) on the host."""

    def rule(ctx, dl, d, du, b, *, perturb_singular=False, **params):
        if not perturb_singular:
            return default(ctx, dl, d, du, b, perturb_singular=False, **params)
        _refuse_if_asked("tridiagonal_solve")
        out_avals = list(ctx.avals_out)

        def fn(*xs):
            return (np.asarray(_host_tridiagonal_solve_perturbed(*xs)).astype(out_avals[0].dtype),)

        results, _ = callbacks.emit_host_call(
            ctx, fn, None, [dl, d, du, b], ctx.avals_in, out_avals, has_side_effect=False,
            name="tridiagonal_solve", host_op="tridiagonal_solve",
        )
        return results

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
    prim = getattr(linalg, "tridiagonal_solve_p", None)
    if prim is not None:
        mlir.register_lowering(
            prim, tridiagonal_solve_rule(_jax_rule(prim)), platform=platform
        )
