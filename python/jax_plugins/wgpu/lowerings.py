"""Lowering rules JAX lacks for a platform it does not know.

JAX lowers a few linear-algebra primitives to LAPACK/cuSOLVER custom calls registered only for
`cpu`, `cuda`, `rocm` and `tpu` (or has no rule at all for other platforms: `eigh`). For
`wgpu` each gets a rule here that emits plain StableHLO, written with `jax.lax` (loops whose
steps work on whole matrices, so the number of loop steps grows with n, not n^2), or a rule
that runs it on the host:

* `eigh` (real symmetric): parallel two-sided Jacobi (round-robin ordering: n/2 disjoint
  rotations per step, n - 1 steps per sweep, sweeps until the off-diagonal part is below
  working precision), eigenvalues sorted ascending.
* `qr`: blocked Householder reflections (panels in compact WY form; full or reduced Q); each
  f32 panel's columns run in one `custom_call @wgpu_hlo.householder_panel` (`WGPU_HLO_QR=loop`:
  a loop of JAX ops, ~8 launches a column).
* `svd` (real): parallel one-sided Jacobi (Hestenes) rotations of column pairs, singular
  values sorted descending; a full U is completed with Householder QR.
* `eig`, `schur`, `hessenberg`, `tridiagonal`, and the complex (pivoted, subset) variants of
  `eigh`, `qr` and `svd`: run on the host (numpy/scipy LAPACK) inside the executable, through a
  host call (`host_ops.py`); `WGPU_HLO_HOST_OPS=error` makes them lowering errors instead.

Real f32 `eigh` and `svd` of matrices up to `_KERNEL_MAX_N` columns run instead as on-device
Jacobi kernels: the rules emit `stablehlo.custom_call @wgpu_hlo.eigh` / `@wgpu_hlo.svd`, which
the compiler plans as whole sweeps per launch with the convergence test on the device
(`src/codegen/op_kernels/jacobi.rs`); `WGPU_HLO_LINALG=jax` keeps the plain-JAX rules above.

Real f32/f64 `lu` whose state fits one binding runs as `custom_call @wgpu_hlo.lu` (`lu_rule`:
LAPACK's pivots; the compiler plans it tiled, three launches per block of columns,
`src/codegen/op_kernels/lu.rs`); larger ones by JAX-level panels (`_lu_blocked`), other
dtypes by JAX's rule (blocked; its panels loop over columns of StableHLO ops). Real
`cholesky` of 2048 columns or more runs by segments of blocks (`_cholesky_impl`, installed by
`host_ops.register_solvers`), its diagonal blocks and smaller matrices as `stablehlo.cholesky`.
Real `triangular_solve` of 256 or more rows with 32 or more right-hand sides runs by blocks
too (`_triangular_solve_impl`): products with the inverses of the diagonal blocks (one batched
`stablehlo.triangular_solve` against the identity) and with the rows solved before; smaller
systems as one `stablehlo.triangular_solve`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

RULES: list[tuple[Any, Callable[..., Any]]] = []
"""`(primitive, lowering rule)` pairs installed for the `wgpu` platform."""


def lower_fun(impl, multiple_results):
    """`mlir.lower_fun(impl)`, tracing `impl` under the numpy promotion rules the rules here are
    written for (implicit rank promotion, standard dtype promotion) whatever the user's program
    set: JAX's own tests run with `jax_numpy_rank_promotion='raise'`, under which the Jacobi
    rule's `x * own` of a matrix and a vector failed every f64 `eigh` (lobpcg_test)."""
    import functools

    import jax
    from jax._src.interpreters import mlir

    @functools.wraps(impl)
    def as_written(*args, **kwargs):
        with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
            return impl(*args, **kwargs)

    return mlir.lower_fun(as_written, multiple_results=multiple_results)

_MAX_SWEEPS = 20
"""Most Jacobi sweeps (each a full round-robin over all index pairs)."""


_JACOBI_TOL = 4
"""Jacobi eigh stops when no off-diagonal element exceeds this many epsilons of the matrix's
Frobenius norm."""


def _round_robin(size):
    """The position permutation taking one round of a round-robin tournament to the next.

    Positions `k` and `size // 2 + k` are paired; position 0 stays, the others rotate: after
    `size - 1` rounds every pair of indices has met once (`size` even)."""
    import numpy as np

    h = size // 2
    if h <= 1:
        return np.arange(size)
    sigma = np.zeros(size, np.int32)
    sigma[1] = h
    sigma[2:h] = np.arange(1, h - 1)
    sigma[h : 2 * h - 1] = np.arange(h + 1, 2 * h)
    sigma[2 * h - 1] = h - 1
    return sigma


def _rotation(alpha, beta, gamma, dtype):
    """Cosines and sines zeroing the off-diagonal `gamma` of 2x2 symmetric blocks
    `[[alpha, gamma], [gamma, beta]]` (vectors of them)."""
    import jax.numpy as jnp

    tiny = jnp.finfo(dtype).tiny
    live = jnp.abs(gamma) > tiny
    zeta = (beta - alpha) / (2 * jnp.where(live, gamma, 1))
    t = jnp.sign(zeta) / (jnp.abs(zeta) + jnp.sqrt(zeta * zeta + 1))
    t = jnp.where(zeta == 0, 1, t)
    t = jnp.where(live, t, 0)
    c = 1 / jnp.sqrt(t * t + 1)
    return c, t * c


def _pairing(size):
    """For the next round's positions: `src` (the position each takes its value from after
    this round's rotations, `_round_robin`), `mate` (the partner of `src` in this round) and
    `k` (the pair index of `src`)."""
    import numpy as np

    h = size // 2
    src = _round_robin(size)
    mate = np.where(src < h, src + h, src - h).astype(np.int32)
    k = np.where(src < h, src, src - h).astype(np.int32)
    return src, mate, k, src < h


def _rotation_coefficients(c, s, size):
    """Per next-round position: the coefficient of its own value (`own`) and of its partner's
    (`other`) in this round's rotation: a top position k becomes `c x_k - s x_(h+k)`, a bottom
    one `s x_k + c x_(h+k)`."""
    import jax.numpy as jnp

    _, _, k, top = _pairing(size)
    own = c[k]
    other = jnp.where(jnp.asarray(top), -s[k], s[k])
    return own, other


def _jacobi_eigh_2d(a):
    """Parallel (round-robin) two-sided Jacobi: each round rotates the n/2 disjoint pairs
    (k, n/2 + k) at once, then permutes the positions to the next round's pairing. Sweeps run
    until the off-diagonal part is negligible. Returns (vectors, values), values ascending."""
    import jax.numpy as jnp
    from jax import lax

    n = a.shape[-1]
    dtype = a.dtype
    if n < 2:
        return jnp.eye(n, dtype=dtype), jnp.diagonal(a)
    size = n + n % 2
    h = size // 2
    x = jnp.zeros((size, size), dtype).at[:n, :n].set(a)
    eye = jnp.eye(size, dtype=dtype)
    eps = jnp.finfo(dtype).eps

    src, mate, _, _ = _pairing(size)
    src, mate = jnp.asarray(src, jnp.uint32), jnp.asarray(mate, jnp.uint32)
    half = jnp.arange(h)

    def one_round(_, state):
        # Rotating the pairs (k, h + k) and moving to the next round's positions in one
        # expression: new x[a, b] combines x at rows {src[a], mate[a]} and columns {src[b],
        # mate[b]}.
        x, v, ids = state
        c, s = _rotation(x[half, half], x[half + h, half + h], x[half, half + h], dtype)
        own, other = _rotation_coefficients(c, s, size)
        oa, ob = own[:, None], other[:, None]
        x = oa * (x[src][:, src] * own + x[src][:, mate] * other) + ob * (
            x[mate][:, src] * own + x[mate][:, mate] * other
        )
        v = v[:, src] * own[None, :] + v[:, mate] * other[None, :]
        return x, v, ids[src]

    # Converged when every off-diagonal element is rounding noise: rotations leave residues
    # of a few ulps of the matrix's norm (an off-diagonal norm below eps * norm is not
    # reliably reachable).
    tol = _JACOBI_TOL * eps * jnp.sqrt(jnp.sum(x * x))
    off_mask = 1 - eye

    def cond(state):
        sweep, x, _, _ = state
        return (sweep < _MAX_SWEEPS) & (jnp.max(jnp.abs(x * off_mask)) > tol)

    def sweep(state):
        k, x, v, ids = state
        x, v, ids = lax.fori_loop(0, size - 1, one_round, (x, v, ids))
        return k + 1, x, v, ids

    _, x, v, ids = lax.while_loop(
        cond, sweep, (jnp.int32(0), x, eye, jnp.arange(size, dtype=jnp.int32))
    )
    w = jnp.sum(x * eye, axis=1)
    # Ascending, the padding position (index n) last.
    order = jnp.argsort(jnp.where(ids < n, w, jnp.inf))[:n]
    return v[:n][:, order], w[order]


_KERNEL_MAX_N = 1024
"""Largest n (columns; the smaller dimension for svd) the device Jacobi kernels take."""

_KERNEL_TARGETS = {"eigh": "wgpu_hlo.eigh", "svd": "wgpu_hlo.svd"}
_KERNEL_PRIMITIVES: dict = {}


def _use_kernel(dtype, n) -> bool:
    import os

    return (
        os.environ.get("WGPU_HLO_LINALG", "") != "jax"
        and np.dtype(dtype) == np.float32
        and 1 <= n <= _KERNEL_MAX_N
    )


def _kernel_primitive(kind):
    """The primitive `wgpu_<kind>_jacobi` that lowers to `custom_call @wgpu_hlo.<kind>`:
    eigh: `a [..., n, n]` -> `(w [..., n] ascending, v [..., n, n])`; svd (`a [..., m, n]`,
    m >= n): `(s [..., n] descending,)` or, with `compute_uv`, `(s, u [..., m, n], v [..., n, n])`."""
    prim = _KERNEL_PRIMITIVES.get(kind)
    if prim is not None:
        return prim
    from jax._src.core import Primitive
    from jax._src import core
    from jax._src.interpreters import mlir

    prim = Primitive(f"wgpu_{kind}_jacobi")
    prim.multiple_results = True

    def abstract(a, compute_uv=True):
        *batch, m, n = a.shape
        batch = tuple(batch)
        vec = core.ShapedArray(batch + (n,), a.dtype)
        mat = core.ShapedArray(batch + (n, n), a.dtype)
        if kind == "eigh":
            return [vec, mat]
        if not compute_uv:
            return [vec]
        return [vec, core.ShapedArray(batch + (m, n), a.dtype), mat]

    def lowering(ctx, a, **_):
        module_ctx = ctx.module_context
        types = [mlir.aval_to_ir_type(module_ctx, v) for v in ctx.avals_out]
        op = mlir.custom_call(
            _KERNEL_TARGETS[kind], result_types=types, operands=[a], api_version=1
        )
        return list(op.results)

    prim.def_abstract_eval(abstract)
    mlir.register_lowering(prim, lowering)
    _KERNEL_PRIMITIVES[kind] = prim
    return prim


def _nan_where_not_finite(x, outs, upper=()):
    """`outs` (results of a decomposition of the matrices `x`) with every matrix of `x` that
    holds an infinity or a NaN giving NaN results, as LAPACK's do (jax cpu): the Jacobi and
    Householder iterations otherwise turned NaN input into finite numbers (eigh, svd and qr of
    an all-NaN matrix returned finite vectors, a silently wrong answer). Results whose index
    is in `upper` (QR's R) keep zeros below the diagonal."""
    import jax.numpy as jnp

    ok = jnp.all(jnp.isfinite(x), axis=(-2, -1))
    batch = ok.ndim
    fixed = []
    for i, o in enumerate(outs):
        mask = ok.reshape(ok.shape + (1,) * (o.ndim - batch))
        nan = jnp.full_like(o, jnp.nan)
        if i in upper:
            nan = jnp.triu(nan)
        fixed.append(jnp.where(mask, o, nan))
    return fixed


def _eigh_impl(x, *, lower=True, sort_eigenvalues=True, subset_by_index=None, **_):
    import jax
    import jax.numpy as jnp

    if jnp.iscomplexobj(x):
        raise NotImplementedError("eigh of complex matrices is not implemented on wgpu")
    if subset_by_index not in (None, (0, x.shape[-1]), (0, -1)):
        raise NotImplementedError("eigh with subset_by_index is not implemented on wgpu")
    tri = jnp.tril(x) if lower else jnp.triu(x)
    sym = tri + jnp.swapaxes(tri, -1, -2) - jnp.eye(x.shape[-1], dtype=x.dtype) * x
    if _use_kernel(x.dtype, x.shape[-1]):
        w, v = _kernel_primitive("eigh").bind(sym)
        return _nan_where_not_finite(sym, [v, w])
    fn = _jacobi_eigh_2d
    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    v, w = fn(sym)
    if sort_eigenvalues:
        order = jnp.argsort(w, axis=-1)
        w = jnp.take_along_axis(w, order, axis=-1)
        v = jnp.take_along_axis(v, order[..., None, :], axis=-1)
    return _nan_where_not_finite(sym, [v, w])


_PANEL = 32
"""Columns per panel of the blocked Householder QR."""


def _householder_panel_loop(p0, j0):
    """The reflectors of panel `p0` (`m x b`) whose first column is column `j0` of the matrix,
    one column at a time in a loop of JAX ops (about 8 kernels a column): `(p, v, tau)`."""
    import jax.numpy as jnp
    from jax import lax

    m, b = p0.shape
    dtype = p0.dtype
    rows = jnp.arange(m)

    def step(jj, state):
        p, v, tau_p = state
        j = j0 + jj
        raw = lax.dynamic_index_in_dim(p, jj, 1, False)
        col = jnp.where(rows >= j, raw, 0)
        # Computed over the column's largest magnitude: squares of entries past 1e19
        # overflowed and below 1e-19 flushed to zero (R was NaN, or 4% off).
        top = jnp.max(jnp.abs(col))
        scale = jnp.where(top > 0, top, 1)
        x = col / scale
        alpha = jnp.sum(jnp.where(rows == j, x, 0))
        rest = jnp.where(rows > j, x, 0)
        xnorm = jnp.sqrt(jnp.sum(rest * rest))
        # LAPACK's conventions (what jax cpu and numpy return): sign(0) = +1, and no
        # reflection where the column is already zero below the diagonal.
        reflect = xnorm > 0
        norm = jnp.sqrt(alpha * alpha + xnorm * xnorm)
        beta = jnp.where(alpha >= 0, -norm, norm)
        safe_beta = jnp.where(reflect, beta, 1)
        tau = jnp.where(reflect, (beta - alpha) / safe_beta, 0)
        inv = 1 / jnp.where(reflect, alpha - beta, 1)
        vcol = jnp.where(reflect, rest * inv + jnp.where(rows == j, 1, 0).astype(dtype), 0)
        p = p - vcol[:, None] * (tau * (vcol @ p))[None, :]
        # The column itself: beta on the diagonal and zeros below, as LAPACK stores it.
        reduced = jnp.where(rows == j, beta * scale, jnp.where(rows > j, 0, raw))
        p = jnp.where(
            reflect & (jnp.arange(b) == jj)[None, :], reduced[:, None], p
        )
        v = lax.dynamic_update_index_in_dim(v, vcol, jj, 1)
        tau_p = lax.dynamic_update_index_in_dim(tau_p, tau, jj, 0)
        return p, v, tau_p

    return lax.fori_loop(0, b, step, (p0, jnp.zeros((m, b), dtype), jnp.zeros((b,), dtype)))


_PANEL_PRIMITIVE: list = []


def _householder_panel_primitive():
    """`wgpu_householder_panel(p, j0) -> (p, v, tau)`: `_householder_panel_loop` as
    `custom_call @wgpu_hlo.householder_panel` (one workgroup per panel runs its columns,
    `src/codegen/op_kernels/householder.rs`). Batched panels keep their batch dimensions
    in front; a batched `j0` runs the loop under `vmap`."""
    if _PANEL_PRIMITIVE:
        return _PANEL_PRIMITIVE[0]
    import jax
    from jax._src.core import Primitive
    from jax._src import core
    from jax._src.interpreters import batching, mlir

    prim = Primitive("wgpu_householder_panel")
    prim.multiple_results = True

    def abstract(p, j0):
        *batch, m, b = p.shape
        return [
            core.ShapedArray(p.shape, p.dtype),
            core.ShapedArray(p.shape, p.dtype),
            core.ShapedArray(tuple(batch) + (b,), p.dtype),
        ]

    def lowering(ctx, p, j0):
        types = [mlir.aval_to_ir_type(ctx.module_context, v) for v in ctx.avals_out]
        op = mlir.custom_call(
            "wgpu_hlo.householder_panel", result_types=types, operands=[p, j0], api_version=1
        )
        return list(op.results)

    def batch(args, dims):
        import jax.numpy as jnp

        (p, j0), (pd, jd) = args, dims
        if jd is None:
            return prim.bind(batching.moveaxis(p, pd, 0), j0), [0, 0, 0]
        j0 = batching.moveaxis(j0, jd, 0)
        if pd is None:
            p = jnp.broadcast_to(p, j0.shape[:1] + p.shape)
        else:
            p = batching.moveaxis(p, pd, 0)
        loop = _householder_panel_loop
        for _ in range(p.ndim - 3):
            loop = jax.vmap(loop, in_axes=(0, None))
        return list(jax.vmap(loop)(p, j0)), [0, 0, 0]

    prim.def_abstract_eval(abstract)
    mlir.register_lowering(prim, lowering)
    batching.primitive_batchers[prim] = batch
    _PANEL_PRIMITIVE.append(prim)
    return prim


_PANEL_KERNEL_ROWS = 8192
"""Most rows of a panel the kernel takes: its invocations walk a column's rows within the loop
bound (a 400000 x 2 panel, `pinv` of a tall matrix in JAX's linalg tests, would loop 50048
times); taller panels keep the loop."""


def _householder_panel(p0, j0):
    """One panel's reflectors (`_householder_panel_loop`): by the panel kernel for f32 panels
    of at most 64 columns and `_PANEL_KERNEL_ROWS` rows, unless `WGPU_HLO_QR=loop`."""
    import os

    import jax.numpy as jnp

    if (
        p0.dtype == jnp.float32
        and p0.shape[-1] <= 64
        and p0.shape[-2] <= _PANEL_KERNEL_ROWS
        and os.environ.get("WGPU_HLO_QR", "") != "loop"
    ):
        return tuple(_householder_panel_primitive().bind(p0, jnp.asarray(j0, jnp.int32)))
    return _householder_panel_loop(p0, j0)


_REFLECTOR_PRIMITIVES: dict = {}

_REFLECTOR_BYTES = 1 << 27
"""Most bytes of the matrices (all of a batch) that `_block_reflector` gives the kernel: 128
MiB, WebGPU's default binding limit, which the kernel updates in one binding. Larger ones go
as JAX ops, whose products the compiler splits over bindings (a 140000 x 256 QR, 143 MB:
23.8 s on lavapipe that way; the kernel refused it)."""


def _block_reflector_ops(c, v, t_inv, start, transpose):
    """`c - V T^T V^T c` (`transpose`) or `c - V T V^T c`, `T = t_inv^-1`, as JAX ops, on the
    columns from `start` on (`None`: all)."""
    import jax.numpy as jnp
    from jax import lax

    y = lax.linalg.triangular_solve(
        t_inv, jnp.swapaxes(v, -1, -2) @ c, left_side=True, lower=False, transpose_a=transpose
    )
    if start is None:
        return c - v @ y
    cols = jnp.arange(c.shape[-1])
    return jnp.where(cols >= start, c - v @ y, c)


def _block_reflector_primitive(transpose):
    """`wgpu_block_reflector(c, v, t_inv, start, row0)`: `_block_reflector_ops` on the columns
    from `start` on as `custom_call @wgpu_hlo.block_reflector[_t]` (one kernel, a column or a
    quad of columns per invocation, `src/codegen/op_kernels/block_reflector.rs`); `v` must be
    zero above row `row0`. Batch dimensions stay in front; a batched `start` or `row0` runs
    the ops under `vmap`."""
    if transpose in _REFLECTOR_PRIMITIVES:
        return _REFLECTOR_PRIMITIVES[transpose]
    import jax
    from jax._src.core import Primitive
    from jax._src import core
    from jax._src.interpreters import batching, mlir

    prim = Primitive("wgpu_block_reflector" + ("_t" if transpose else ""))

    def abstract(c, v, t_inv, start, row0):
        return core.ShapedArray(c.shape, c.dtype)

    def lowering(ctx, c, v, t_inv, start, row0):
        types = [mlir.aval_to_ir_type(ctx.module_context, ctx.avals_out[0])]
        target = "wgpu_hlo.block_reflector" + ("_t" if transpose else "")
        op = mlir.custom_call(
            target, result_types=types, operands=[c, v, t_inv, start, row0], api_version=1
        )
        return list(op.results)

    def batch(args, dims):
        import jax.numpy as jnp

        c, v, t_inv, start, row0 = args
        cd, vd, td, sd, rd = dims
        size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)

        def front(x, d):
            if d is None:
                return jnp.broadcast_to(x, (size,) + x.shape)
            return batching.moveaxis(x, d, 0)

        c, v, t_inv = front(c, cd), front(v, vd), front(t_inv, td)
        if sd is None and rd is None:
            return prim.bind(c, v, t_inv, start, row0), 0
        start = front(start, sd)
        ops = lambda c, v, t, s: _block_reflector_ops(c, v, t, s, transpose)
        for _ in range(c.ndim - 3):
            ops = jax.vmap(ops, in_axes=(0, 0, 0, None))
        return jax.vmap(ops)(c, v, t_inv, start), 0

    prim.def_abstract_eval(abstract)
    mlir.register_lowering(prim, lowering)
    batching.primitive_batchers[prim] = batch
    _REFLECTOR_PRIMITIVES[transpose] = prim
    return prim


def _block_reflector(c, v, t_inv, start, row0, transpose, masked=True):
    """`c - V T^T V^T c` (`transpose`: the trailing update of `_householder_factor`) or
    `c - V T V^T c` (the Q loop), `T = t_inv^-1`, on the columns from `start` on (`masked`;
    else all, where those left of `start` come out unchanged anyway); `v` is zero above row
    `row0`. On CPU adapters by the block-reflector kernel for f32 and panels of at most 64
    columns whose matrices fit `_REFLECTOR_BYTES` (`WGPU_HLO_QR_UPDATE=dots`: as JAX ops),
    elsewhere as JAX ops (tiled products on GPUs). Lavapipe, kernel time per call of a
    256 x 256 QR: the two loops' products, solves and masks 17.1 ms as JAX ops (4 kernels a
    panel each), 2.9-3.1 ms here (a quad of columns per lane; 5.1-5.6 ms with one)."""
    import math
    import os

    import jax.numpy as jnp

    if (
        c.dtype == jnp.float32
        and v.shape[-1] <= 64
        and math.prod(c.shape) * 4 <= _REFLECTOR_BYTES
        and os.environ.get("WGPU_HLO_QR_UPDATE", "") != "dots"
        and _cpu_adapter()
    ):
        return _block_reflector_primitive(transpose).bind(
            c, v, t_inv, jnp.asarray(start, jnp.int32), jnp.asarray(row0, jnp.int32)
        )
    return _block_reflector_ops(c, v, t_inv, start if masked else None, transpose)


def _householder_factor(a, run=None):
    """Blocked Householder QR of one `m x n` matrix (min(m, n) > 0): each panel of `_PANEL`
    columns is factored one reflection at a time (work on the panel only), then applied to
    the trailing columns at once in compact WY form, `H_1 ... H_b = I - V T V^T` with
    `T^-1 = triu(V^T V, 1) + diag(1 / tau)`. The reflectors are LAPACK's (`dlarfg`):
    `H = I - tau v v^T` with `v_j = 1`, `tau = (beta - alpha) / beta`, `v = x / (alpha - beta)`
    below the diagonal and `beta = -sign(alpha) |x|` on it, and a column already zero below
    the diagonal is left alone (`tau = 0`; its `v` is stored as 0). Unit-norm reflectors
    `I - 2 u u^T` (until 2026-11-29) rounded where LAPACK is exact: the QR of `[0; I]` gave
    R = -0.99999994 and Q entries of 6e-8 (JAX's QDWH then returned 1e-4 where cpu gives 0).
    Panels run in a loop (one set of kernels); the columns are padded to whole panels with
    zeros, whose reflectors are the identity. Returns R (`m x n`, upper), the reflectors `v`
    by columns (0 for `tau = 0`), the panels' `T^-1`, the panel width and the `tau`s. `run`:
    only the first `run` panels; R's rows below them then hold the transformed trailing
    columns (not made upper)."""
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape
    k = min(m, n)
    dtype = a.dtype
    b = min(_PANEL, max(k, 1))
    panels = -(-k // b)
    width = max(n, panels * b)
    r = jnp.zeros((m, width), dtype).at[:, :n].set(a)

    def panel(i, state):
        r, vs, t_invs, taus = state
        j0 = i * b

        p0 = lax.dynamic_slice_in_dim(r, j0, b, 1)
        p, v, tau_p = _householder_panel(p0, j0)
        inv_tau = jnp.where(tau_p != 0, 1 / jnp.where(tau_p != 0, tau_p, 1), 1)
        t_inv = jnp.triu(v.T @ v, 1) + jnp.diag(inv_tau)
        r = _block_reflector(r, v, t_inv, j0 + b, j0, transpose=True)
        r = lax.dynamic_update_slice_in_dim(r, p, j0, 1)
        vs = lax.dynamic_update_slice_in_dim(vs, v, j0, 1)
        taus = lax.dynamic_update_slice_in_dim(taus, tau_p, j0, 0)
        return r, vs, lax.dynamic_update_index_in_dim(t_invs, t_inv, i, 0), taus

    r, vs, t_invs, taus = lax.fori_loop(
        0,
        panels if run is None else run,
        panel,
        (
            r,
            jnp.zeros((m, width), dtype),
            jnp.zeros((panels, b, b), dtype),
            jnp.zeros((width,), dtype),
        ),
    )
    return (jnp.triu(r[:, :n]) if run is None else r[:, :n]), vs, t_invs, b, taus


def _householder_qr_2d(a, full_matrices, split=True):
    """Q and R of one matrix by `_householder_factor`: Q full (`m x m`) or reduced.

    From 16 panels on (`split`; 512 columns), only the first half of the panels runs over the
    whole matrix: the trailing window (rows and columns from the split) is factored as a
    matrix of its own (`split=False`), whose Q, framed by the identity, is where the first
    panels' reflections start. Each loop's products then cover its window, not the whole
    matrix, for a second set of kernels to compile. lavapipe, qr, ms (first call with empty
    caches, s): 512: 122-155 -> 101-118 (2.7 -> 5.4 s); split from 4 panels, 256: 32 -> 26
    (2.6 -> 4.0 s), and tall matrices (1000 x 150, 600 x 300) gained nothing."""
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape
    k = min(m, n)
    dtype = a.dtype
    if k == 0:
        # An empty matrix: Q is the identity (or has no columns), R is empty.
        q = jnp.eye(m, dtype=dtype) if full_matrices else jnp.zeros((m, 0), dtype)
        return q, jnp.zeros((m if full_matrices else 0, n), dtype)
    b = min(_PANEL, k)
    panels = -(-k // b)
    run = panels // 2 if split and panels >= 16 else panels
    r, vs, t_invs, b, _ = _householder_factor(a, run if run < panels else None)
    rows_q = m if full_matrices else k
    q0 = jnp.eye(m, rows_q, dtype=dtype)
    if run < panels:
        s = run * b
        q_w, r_w = _householder_qr_2d(r[s:, s:], full_matrices, split=False)
        r = jnp.concatenate(
            [jnp.triu(r[:s, :]),
             jnp.concatenate([jnp.zeros((r_w.shape[0], s), dtype), r_w], axis=1)],
            axis=0,
        )
        q0 = jnp.concatenate(
            [q0[:s, :],
             jnp.concatenate([jnp.zeros((m - s, s), dtype), q_w], axis=1)],
            axis=0,
        )
        panels = run

    # Q = P_0 P_1 ... (P_i = I - V_i T_i V_i^T, panel i's reflectors) applied to the first
    # columns of the identity, last panel first: only the k columns a reduced Q keeps (a tall
    # m x k matrix no longer builds an m x m Q).
    def back(t, q):
        i = panels - 1 - t
        v = lax.dynamic_slice_in_dim(vs, i * b, b, 1)
        t_inv = lax.dynamic_index_in_dim(t_invs, i, 0, False)
        return _block_reflector(q, v, t_inv, i * b, i * b, transpose=False, masked=False)

    q = lax.fori_loop(0, panels, back, q0)
    if not full_matrices:
        r = r[:k, :]
    return q, r


def _geqrf_impl(x):
    """`geqrf` as LAPACK returns it: R on and above the diagonal, below it the reflectors
    `v` (a unit first entry, implicit), and `tau` (`H = I - tau v v^T`): what
    `_householder_factor` computes."""
    import jax
    import jax.numpy as jnp

    if jnp.iscomplexobj(x):
        raise NotImplementedError("geqrf of complex matrices is not implemented on wgpu")
    m, n = x.shape[-2:]
    k = min(m, n)

    def fn(a):
        if k == 0:
            return a, jnp.zeros((0,), a.dtype)
        r, vs, _, _, taus = _householder_factor(a)
        v = jnp.zeros((m, n), a.dtype).at[:, :k].set(vs[:, :k])
        rows, cols = jnp.arange(m)[:, None], jnp.arange(n)[None, :]
        return jnp.where((rows > cols) & (cols < k), v, r), taus[:k]

    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    return list(fn(x))


def _householder_product_impl(a, taus):
    """`householder_product` (LAPACK's orgqr): the first n columns of `H_1 ... H_k`,
    `H_i = I - tau_i v_i v_i^T` with `v_i` below the diagonal of column i of `a` and a unit
    first entry, applied to the identity's columns last reflector first (any `tau`)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    if jnp.iscomplexobj(a):
        raise NotImplementedError(
            "householder_product of complex matrices is not implemented on wgpu"
        )
    m, n = a.shape[-2:]
    k = taus.shape[-1]

    def fn(a, taus):
        if k == 0 or n == 0:
            return jnp.eye(m, n, dtype=a.dtype)
        rows = jnp.arange(m)

        def step(t, q):
            i = k - 1 - t
            col = lax.dynamic_index_in_dim(a, i, 1, False)
            v = jnp.where(rows > i, col, 0) + jnp.where(rows == i, 1, 0).astype(a.dtype)
            tau = lax.dynamic_index_in_dim(taus, i, 0, False)
            return q - tau * v[:, None] * (v @ q)[None, :]

        return lax.fori_loop(0, k, step, jnp.eye(m, n, dtype=a.dtype))

    for _ in range(a.ndim - 2):
        fn = jax.vmap(fn)
    return [fn(a, taus)]


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
    return _nan_where_not_finite(x, [q, r], upper=(1,))


def _jacobi_svd_2d(a, full_matrices, compute_uv):
    """SVD of one m x n matrix with m >= n by parallel one-sided (Hestenes) Jacobi: each
    round orthogonalizes the n/2 disjoint column pairs (k, n/2 + k) at once, then permutes the
    columns to the next round's pairing; sweeps run until every pair is orthogonal to working
    precision. Returns s (descending), u, vt."""
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape
    dtype = a.dtype
    size = n + n % 2
    h = size // 2
    w = jnp.zeros((m, size), dtype).at[:, :n].set(a)
    v = jnp.eye(size, dtype=dtype)
    ids = jnp.arange(size, dtype=jnp.int32)
    eps = jnp.finfo(dtype).eps
    if size >= 2:
        src, mate, _, _ = _pairing(size)
        src, mate = jnp.asarray(src, jnp.uint32), jnp.asarray(mate, jnp.uint32)

        def one_round(_, state):
            # Rotating the column pairs (k, h + k) and moving to the next round's positions in
            # one expression per matrix.
            w, v, ids, worst = state
            top, bot = w[:, :h], w[:, h:]
            alpha = jnp.sum(top * top, axis=0)
            beta = jnp.sum(bot * bot, axis=0)
            gamma = jnp.sum(top * bot, axis=0)
            norms = jnp.sqrt(alpha * beta)
            worst = jnp.maximum(
                worst, jnp.max(jnp.abs(gamma) / jnp.where(norms > 0, norms, 1))
            )
            c, s = _rotation(alpha, beta, gamma, dtype)
            own, other = _rotation_coefficients(c, s, size)
            w = w[:, src] * own[None, :] + w[:, mate] * other[None, :]
            v = v[:, src] * own[None, :] + v[:, mate] * other[None, :]
            return w, v, ids[src], worst

        def cond(state):
            sweep, _, _, _, worst = state
            return (sweep < _MAX_SWEEPS) & (worst > m * eps)

        def sweep(state):
            k, w, v, ids, _ = state
            w, v, ids, worst = lax.fori_loop(
                0, size - 1, one_round, (w, v, ids, jnp.zeros((), dtype))
            )
            return k + 1, w, v, ids, worst

        _, w, v, ids, _ = lax.while_loop(
            cond, sweep, (jnp.int32(0), w, v, ids, jnp.ones((), dtype))
        )
    sv = jnp.sqrt(jnp.sum(w * w, axis=0))
    # Descending, the padding column (index n) last.
    order = jnp.argsort(-jnp.where(ids < n, sv, -1))[:n]
    sv = sv[order]
    if not compute_uv:
        return sv, None, None
    w, v = w[:, order], v[:n][:, order]
    u = _fill_zero_columns(w / jnp.where(sv > 0, sv, 1)[None, :])
    if full_matrices and m > n:
        q, _ = _householder_qr_2d(u, True)
        u = jnp.concatenate([u, q[:, n:]], axis=1)
    return sv, u, v.T


def _fill_zero_columns(u):
    """`u` (`... x m x k`, `m >= k`: left singular vectors by descending singular value) with
    its zero columns replaced by unit vectors orthogonal to the others and to each other. The
    Jacobi SVDs divide `A v` by its norm, which leaves the column of a singular value that is
    exactly 0 (a zero column of A, the zero matrix) zero: U was not orthogonal (LAPACK, and
    jax cpu, complete the basis). Those columns come last, so the Q of U's reduced QR
    completes them. Only computed when some column is zero (a `cond`)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    zero = jnp.sum(u * u, axis=-2) < 0.25

    def fill(u):
        qr = lambda a: _householder_qr_2d(a, False)[0]
        for _ in range(u.ndim - 2):
            qr = jax.vmap(qr)
        return jnp.where(zero[..., None, :], qr(u), u)

    return lax.cond(jnp.any(zero), fill, lambda u: u, u)


def _svd_impl(x, *, full_matrices=True, compute_uv=True, subset_by_index=None, **_):
    outs = _svd_outputs(
        x, full_matrices=full_matrices, compute_uv=compute_uv, subset_by_index=subset_by_index
    )
    return _nan_where_not_finite(x, outs)


def _svd_outputs(x, *, full_matrices, compute_uv, subset_by_index):
    import jax
    import jax.numpy as jnp

    if jnp.iscomplexobj(x):
        raise NotImplementedError("svd of complex matrices is not implemented on wgpu")
    m, n = x.shape[-2:]
    if subset_by_index not in (None, (0, min(m, n)), (0, -1)):
        raise NotImplementedError("svd with subset_by_index is not implemented on wgpu")
    wide = m < n
    if _use_kernel(x.dtype, min(m, n)):
        a = jnp.swapaxes(x, -1, -2) if wide else x
        prim = _kernel_primitive("svd")
        rows, cols = a.shape[-2:]
        if _svd_qr_first(rows, cols, compute_uv):
            # Tall: A = Q R, then the Jacobi kernel on the small R (U = Q U_R). Jacobi rounds
            # over columns of 10^5 rows pass the loop bound (pinv of 400000 x 2 failed).
            thin = lambda a: _householder_qr_2d(a, False)
            for _ in range(x.ndim - 2):
                thin = jax.vmap(thin)
            q, r = thin(a)
            if not compute_uv:
                return list(prim.bind(r, compute_uv=False))
            s, u, v = prim.bind(r, compute_uv=True)
            u = q @ _fill_zero_columns(u)
        elif not compute_uv:
            return list(prim.bind(a, compute_uv=False))
        else:
            s, u, v = prim.bind(a, compute_uv=True)
            u = _fill_zero_columns(u)
        if full_matrices and rows > cols:
            qr = lambda u: _householder_qr_2d(u, True)[0]
            for _ in range(x.ndim - 2):
                qr = jax.vmap(qr)
            u = jnp.concatenate([u, qr(u)[..., cols:]], axis=-1)
        if wide:
            return [s, v, jnp.swapaxes(u, -1, -2)]
        return [s, u, jnp.swapaxes(v, -1, -2)]

    def fn(a):
        if wide:
            s, u, vt = _jacobi_svd_2d(a.T, full_matrices, compute_uv)
            return (s,) if not compute_uv else (s, vt.T, u.T)
        s, u, vt = _jacobi_svd_2d(a, full_matrices, compute_uv)
        return (s,) if not compute_uv else (s, u, vt)

    for _ in range(x.ndim - 2):
        fn = jax.vmap(fn)
    return list(fn(x))


_SVD_JACOBI_MAX_ROWS = 12288
"""Most rows the Jacobi kernel takes directly: a round loops over about half the rows in one
invocation on CPU adapters, within 8192 iterations (65536 x 4 is refused; 16000 x 100 runs)."""


def _svd_qr_first(rows, cols, compute_uv) -> bool:
    """Whether the svd of a `rows x cols` matrix (rows > cols) starts with a QR (then Jacobi on
    the `cols x cols` R; `WGPU_HLO_SVD_QR_FIRST=0|1` forces it either way). Always past
    `_SVD_JACOBI_MAX_ROWS`. Otherwise by cost on CPU adapters: from twice the columns and
    rows x cols^2 of 1e5, where Jacobi's work (rows x cols^2 a sweep) passes the QR's launches
    and Jacobi on R; with U and V from 49 columns (`_SVD_BIDIAGONAL_FROM`: the direct route
    is the bidiagonal kernels, cheaper on tall matrices than Jacobi) from three times the
    columns and 1e6. On GPUs (not measured) from 256 rows and twice the columns.

    lavapipe, ms direct / QR first (2026-12-01, the QR's trailing updates by the
    block-reflector kernel), values and U V: 64x32 0.7 / 1.1 and 1.2 / 2.5; 80x40 5.0 / 2.6
    and 7.4 / 5.1; 120x40 7.3 / 2.7 and 8.8 / 4.7; 100x50 8.0 / 3.2 and 5.5 / 6.7; 200x50
    15 / 3.4 and 7.9 / 8.1; 150x100 7.4 / 8.6 and 13 / 15; 300x100 19 / 11 and 27 / 19;
    1000x100 60 / 21 and 81 / 28; 600x64 62 / 8.0 and 27 / 11; 400x40 18 / 4.4 and 20 / 5.6;
    1000x40 39 / 7.5 and 42 / 10; 3000x40 119 / 81 and 125 / 82; 2000x50 139 / 53 and 65 /
    58; 5000x10 12 / 9.4 and 16 / 13; 100x10 0.6 / 1.2 and 1.3 / 2.6; 250x200 35 / 36 and
    61 / 74; 300x200 42 / 46 and 74 / 82. (The rule before was set when a QR launched about
    8 kernels a column, 2026-11-29: QR first then paid only from rows x cols^2 of 3e7 for
    values, and 300x100 took 236 ms that way.)"""
    import os

    forced = os.environ.get("WGPU_HLO_SVD_QR_FIRST")
    forced_bidiagonal = os.environ.get("WGPU_HLO_SVD_BIDIAGONAL")
    if forced in ("0", "1"):
        return forced == "1" and rows > cols
    if rows <= cols:
        return False
    if rows > _SVD_JACOBI_MAX_ROWS:
        return True
    if not _cpu_adapter():
        return rows > 256 and rows > 2 * cols
    if compute_uv and cols >= _SVD_BIDIAGONAL_FROM and forced_bidiagonal != "0":
        return rows >= 3 * cols and rows * cols * cols >= 1e6
    return rows >= 2 * cols and rows * cols * cols >= 1e5


_SVD_BIDIAGONAL_FROM = 49
"""Smallest number of columns whose svd with U and V takes the bidiagonal kernels on CPU
adapters (`src/codegen/op_kernels/bidiagonal.rs`'s `CPU_MIN_N`)."""


def _cpu_adapter() -> bool:
    """Whether the wgpu device is a CPU adapter (lavapipe), as the compiler decides it:
    `WGPU_HLO_ADAPTER_CLASS=cpu|gpu` overrides the adapter's own type."""
    import os

    import jax

    forced = os.environ.get("WGPU_HLO_ADAPTER_CLASS", "").strip().lower()
    if forced in ("cpu", "gpu"):
        return forced == "cpu"
    try:
        return getattr(jax.devices("wgpu")[0], "device_type", "") == "Cpu"
    except RuntimeError:
        return False


def _real(aval) -> bool:
    return not np.issubdtype(np.dtype(aval.dtype), np.complexfloating)


def _whole(subset_by_index, k) -> bool:
    return subset_by_index is None or tuple(subset_by_index) in ((0, k), (0, -1))


def _eigh_on_device(aval, *, subset_by_index=None, **_):
    return _real(aval) and _whole(subset_by_index, aval.shape[-1])


def _qr_on_device(aval, *, pivoting=False, **_):
    return _real(aval) and not pivoting


def _svd_on_device(aval, *, subset_by_index=None, **_):
    return _real(aval) and _whole(subset_by_index, min(aval.shape[-2:]))


_CHOLESKY_BLOCK = 64
"""Columns per diagonal block of the blocked Cholesky factorization."""

_CHOLESKY_BLOCKED_N = 2048
"""Smallest n factored here by segments of blocks; smaller matrices are one `stablehlo.cholesky`,
which the compiler plans as a tiled factorization (`src/codegen/op_kernels/linalg.rs`,
`tiled`: three launches per 64 columns). lavapipe, 2 cores, ms per call (segments here, the
tiled plan): 256 x 256 11.8-13.7 and 3.8-3.9; 512: 29-38 and 14; 1024: 81-112 and 55;
2048: 472 and 427. The first call of 1024 x 1024 compiles 376 ms here, 199 ms as the plan."""

_CHOLESKY_PLAN_BYTES = 1 << 27
"""Most bytes of the tiled plan's state (twice the matrices: the factor and its transpose) that
this rule leaves to it: 128 MiB, WebGPU's default binding limit. The plan falls back to one
launch per column where its state does not fit the adapter's binding; a large batch is
factored here by segments instead."""


_CHOLESKY_BLOCK_PRIMITIVE: list = []


def _cholesky_block_primitive():
    """`wgpu_cholesky_block`: `stablehlo.cholesky` (lower) of the matrices it is given, for the
    diagonal blocks (binding `cholesky_p` there would come back to this rule)."""
    if _CHOLESKY_BLOCK_PRIMITIVE:
        return _CHOLESKY_BLOCK_PRIMITIVE[0]
    from jax._src.core import Primitive
    from jax._src import core
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    prim = Primitive("wgpu_cholesky_block")
    prim.def_abstract_eval(lambda a: core.ShapedArray(a.shape, a.dtype))
    mlir.register_lowering(
        prim, lambda ctx, a: [hlo.cholesky(a, lower=ir.BoolAttr.get(True))]
    )
    _CHOLESKY_BLOCK_PRIMITIVE.append(prim)
    return prim


_CHOLESKY_SEGMENTS = 8
"""Most column segments of the blocked Cholesky factorization (`_cholesky_segments`)."""

_CHOLESKY_SEGMENT_BLOCKS = 8
"""Fewest blocks per column segment. Each segment compiles its own kernels: more segments do
less work but cost more to compile (lavapipe, 2 cores, empty pipeline and Mesa shader caches,
which keep what a first call compiled for later processes; first call, then each call):

| n | one loop (before) | 16-block segments | 8-block segments | 4-block segments |
| --- | --- | --- | --- | --- |
| 1000 | 3.0 s, 0.21 s | 3.1 s, 0.18 s | 5.8 s, 0.11 s | 11.7 s, 0.086 s |
| 2000 | 4.0 s, 1.30 s | 7.3 s, 0.62 s | 13.1 s, 0.40-0.46 s | 26 s, 0.33 s |
| 4000 | 11.6 s, 8.3 s | 15.7 s, 2.56 s | 29.4 s, 1.99 s | 29 s, 1.99 s |

A GPU compiles faster, but its Cholesky is bound by launches more than by flops until n is in
the thousands (not measured yet): the same rule serves both."""


def _cholesky_segments(size):
    """The column segments `[(c0, c1), ...]` of a padded `size`: whole blocks, at least
    `_CHOLESKY_SEGMENT_BLOCKS` of them each, at most `_CHOLESKY_SEGMENTS` segments (the last
    may be narrower)."""
    blocks = size // _CHOLESKY_BLOCK
    per = max(_CHOLESKY_SEGMENT_BLOCKS, -(-blocks // _CHOLESKY_SEGMENTS))
    width = per * _CHOLESKY_BLOCK
    return [(c0, min(c0 + width, size)) for c0 in range(0, size, width)]


def _cholesky_panel(p):
    """The columns of the factor that panel `p` (`..., m, w`: the rows from its diagonal down
    of `w` columns whose earlier columns' contributions are already subtracted) holds: a loop
    over its blocks of `_CHOLESKY_BLOCK` columns, each factoring its diagonal block with the
    compiler's `stablehlo.cholesky` kernels, inverting it (a triangular solve against the
    identity), forming the rows below as a product with that inverse, and subtracting their
    products from the panel's later columns. Every step runs the same kernels on the whole
    panel."""
    import jax.numpy as jnp
    from jax import lax

    block = _cholesky_block_primitive()
    b = _CHOLESKY_BLOCK
    m, w = p.shape[-2], p.shape[-1]
    batch = p.shape[:-2]
    zero = (0,) * len(batch)
    rows = jnp.arange(m)[:, None]
    eye = jnp.broadcast_to(jnp.eye(b, dtype=p.dtype), batch + (b, b))

    def step(j, state):
        p, out = state
        j0 = j * b
        ljj = block.bind(lax.dynamic_slice(p, zero + (j0, j0), batch + (b, b)))
        col = lax.dynamic_slice(p, zero + (0, j0), batch + (m, b))
        # L_ij = A_ij L_jj^-T as a product with the block's inverse: a right-side solve
        # runs one thread per row of the panel (256 x 64: 7 ms on lavapipe, the product 1).
        inv = lax.linalg.triangular_solve(ljj, eye, left_side=True, lower=True)
        lij = jnp.matmul(col, jnp.swapaxes(inv, -1, -2), precision=lax.Precision.HIGHEST)
        lij = jnp.where(rows >= j0 + b, lij, 0)
        p = p - jnp.matmul(
            lij, jnp.swapaxes(lij[..., :w, :], -1, -2), precision=lax.Precision.HIGHEST
        )
        diag = lax.dynamic_update_slice(jnp.zeros_like(col), ljj, zero + (j0, 0))
        out = lax.dynamic_update_slice(out, lij + diag, zero + (0, j0))
        return p, out

    return lax.fori_loop(0, w // b, step, (p, jnp.zeros_like(p)))[1]


def _cholesky_impl(x):
    """Blocked Cholesky from `_CHOLESKY_BLOCKED_N` columns (or where a batch would pass
    `_CHOLESKY_PLAN_BYTES` in the compiler's tiled plan), by column segments
    (`_cholesky_segments`) of static, shrinking shapes: a segment's panel (its columns, from
    its diagonal down) loses the contributions of all earlier columns in one product, then is
    factored by blocks (`_cholesky_panel`). That is about 0.5 n³ flops with 8 segments, where
    one loop over the whole padded matrix (one segment) updates it all at every block: 2n³.
    The column kernels alone launch once per column and reread the columns before (lavapipe:
    1024 x 1024 2.6 s; by blocks 0.2 s). As XLA, every matrix with a pivot that is not
    positive comes back as NaNs."""
    import jax.numpy as jnp
    from jax import lax

    n = x.shape[-1]
    b = _CHOLESKY_BLOCK
    state = 2 * x.size * np.dtype(x.dtype).itemsize
    small = n < _CHOLESKY_BLOCKED_N and (n < _CHOLESKY_BLOCK or state <= _CHOLESKY_PLAN_BYTES)
    if small or not np.issubdtype(np.dtype(x.dtype), np.floating):
        return [_cholesky_block_primitive().bind(x)]
    # Padded to whole blocks with the identity, so the padded matrix stays positive definite.
    size = -(-n // b) * b
    batch = x.shape[:-2]
    pad = [(0, 0)] * len(batch) + [(0, size - n), (0, size - n)]
    tail = jnp.arange(size) >= n
    eye_tail = tail[:, None] & tail[None, :] & jnp.eye(size, dtype=bool)
    a = jnp.pad(x, pad) + jnp.where(eye_tail, 1, 0).astype(x.dtype)
    factor = jnp.zeros_like(a)
    for c0, c1 in _cholesky_segments(size):
        panel = a[..., c0:, c0:c1]
        if c0:
            done = factor[..., c0:, :c0]
            panel = panel - jnp.matmul(
                done, jnp.swapaxes(done[..., : c1 - c0, :], -1, -2),
                precision=lax.Precision.HIGHEST,
            )
        factor = factor.at[..., c0:, c0:c1].set(_cholesky_panel(panel))
    factor = factor[..., :n, :n]
    diag = jnp.diagonal(factor, axis1=-2, axis2=-1)
    ok = jnp.all(diag > 0, axis=-1)[..., None, None]
    return [jnp.where(ok, factor, jnp.full_like(factor, jnp.nan))]


_TRSM_BLOCK = 64
"""Rows of the smallest diagonal block of the blocked triangular solve."""

_TRSM_LEAVES = 32
"""Most diagonal blocks of the blocked triangular solve: larger systems double the block."""

_TRSM_BLOCKED_K = 256
"""Smallest system solved by blocks."""

_TRSM_BLOCKED_RHS = 32
"""Fewest right-hand sides solved by blocks: the compiler's kernel solves one right-hand side
per thread, in few launches for a vector (a Gaussian process's `cho_solve` of y); with a
matrix of them its threads read every solved row again (lavapipe, 1000 x 1000 with 1000
right-hand sides: 0.9 s; by blocks 0.07 s)."""


def _trsm_leaf(size):
    """Rows per diagonal block of a blocked solve of `size` rows: `_TRSM_BLOCK`, doubled until
    there are at most `_TRSM_LEAVES` blocks."""
    leaf = _TRSM_BLOCK
    while -(-size // leaf) > _TRSM_LEAVES:
        leaf *= 2
    return leaf


def _trsm_split(blocks):
    """Where a blocked solve of `blocks` diagonal blocks splits: the largest power of two below
    `blocks`, so that the left halves (and the products with them) keep a few shapes."""
    return 1 << ((blocks - 1).bit_length() - 1)


def _lower_solve_blocked(l, c, unit_diagonal):
    """`L Y = C` for lower-triangular `L` (`..., K, K`; only its lower triangle is read), as
    XLA's GPU expander does it, by the inverses of its diagonal blocks (`_trsm_leaf` rows; all
    found by one batched `stablehlo.triangular_solve` against the identity), and recursively:
    `Y1` from the leading rows, then `Y2` from `C2 - L21 Y1`. The shapes are static, so no
    product reads the upper triangle or masked zeros: about k²n/2 multiply-adds, where a loop
    over whole padded matrices (each step's product masked to the rows solved before) did
    k²n and solved each diagonal block with one thread per right-hand side (lavapipe,
    1000 x 1000 with 1000 right-hand sides: 0.18 s by that loop, 0.07 s now; 512 x 512 with
    512: 48 and 16-26 ms). Each level of the recursion has its own shapes, so a first call
    compiles more kernels (on lavapipe with empty caches, 1000 x 1000: 1.3 s by the loop,
    4.2 s now; a loop over 8-block segments inside the recursion compiled in 2.4 s but ran in
    85-115 ms)."""
    import jax.numpy as jnp
    from jax import lax

    k = l.shape[-1]
    leaf = _trsm_leaf(k)
    size = -(-k // leaf) * leaf
    batch = l.shape[:-2]
    # Padded to whole blocks with the identity (solving the padded rows to zero).
    pad = [(0, 0)] * len(batch) + [(0, size - k), (0, size - k)]
    tail = jnp.arange(size) >= k
    eye_tail = tail[:, None] & tail[None, :] & jnp.eye(size, dtype=bool)
    l = jnp.pad(l, pad) + jnp.where(eye_tail, 1, 0).astype(l.dtype)
    c = jnp.pad(c, [(0, 0)] * len(batch) + [(0, size - k), (0, 0)])
    blocks = size // leaf
    diag = jnp.stack(
        [l[..., i * leaf : (i + 1) * leaf, i * leaf : (i + 1) * leaf] for i in range(blocks)],
        axis=-3,
    )
    eye = jnp.broadcast_to(jnp.eye(leaf, dtype=l.dtype), diag.shape)
    inv = lax.linalg.triangular_solve(
        diag, eye, left_side=True, lower=True, unit_diagonal=unit_diagonal
    )

    def mm(x, y):
        return jnp.matmul(x, y, precision=lax.Precision.HIGHEST)

    def solve(b0, b1, rhs):
        if b1 - b0 == 1:
            return mm(inv[..., b0, :, :], rhs)
        h = b0 + _trsm_split(b1 - b0)
        r0, r1, r2 = b0 * leaf, h * leaf, b1 * leaf
        y1 = solve(b0, h, rhs[..., : r1 - r0, :])
        y2 = solve(h, b1, rhs[..., r1 - r0 :, :] - mm(l[..., r1:r2, r0:r1], y1))
        return jnp.concatenate([y1, y2], axis=-2)

    return solve(0, blocks, c)[..., :k, :]


def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """A real `triangular_solve` as a lower-triangular solve from the left
    (`_lower_solve_blocked`): `op(a) x = b`, or `x op(a) = b` as `op(a)^T x^T = b^T`; an upper
    system with its rows and columns reversed is a lower one. (Real: `conjugate_a` changes
    nothing.)"""
    import jax.numpy as jnp

    del conjugate_a
    t, low, rhs = a, lower, b
    if transpose_a:
        t, low = jnp.swapaxes(t, -1, -2), not low
    if not left_side:
        t, low, rhs = jnp.swapaxes(t, -1, -2), not low, jnp.swapaxes(rhs, -1, -2)
    if not low:
        t, rhs = jnp.flip(t, (-1, -2)), jnp.flip(rhs, -2)
    y = _lower_solve_blocked(t, rhs, unit_diagonal)
    if not low:
        y = jnp.flip(y, -2)
    if not left_side:
        y = jnp.swapaxes(y, -1, -2)
    return [y]


def triangular_solve_rule(default):
    """The rule of real `triangular_solve` on wgpu: by blocks (`_triangular_solve_impl`) from
    `_TRSM_BLOCKED_K` rows and `_TRSM_BLOCKED_RHS` right-hand sides, else `default` (one
    `stablehlo.triangular_solve`)."""
    blocked = lower_fun(_triangular_solve_impl, multiple_results=True)

    def rule(ctx, a, b, **params):
        av, bv = ctx.avals_in[0], ctx.avals_in[1]
        k = av.shape[-1]
        rhs = bv.shape[-1] if params.get("left_side") else bv.shape[-2]
        if (
            np.issubdtype(np.dtype(av.dtype), np.floating)
            and k >= _TRSM_BLOCKED_K
            and rhs >= _TRSM_BLOCKED_RHS
        ):
            return blocked(ctx, a, b, **params)
        return default(ctx, a, b, **params)

    return rule


def cholesky_rule():
    """The rule of real `cholesky` on wgpu (`host_ops.register_solvers` installs it, with
    f16/bf16 through f32 and complex on the host): blocked, `_cholesky_impl`."""
    return lower_fun(_cholesky_impl, multiple_results=True)


_LU_MAX = 8192
"""Largest m and n the device LU kernel takes (`src/codegen/op_kernels/lu.rs`)."""

_LU_KERNEL_WORK = {"cpu": 600**3, "gpu": 2048**3}
"""Largest m * n * min(m, n) the one-workgroup LU kernel takes per adapter class; larger
ones go by panels (`_lu_blocked`). lavapipe, square f32, kernel against JAX's rule: 64: 1.9 / 50 ms, 128: 8.9 /
114, 256: 59 / 268, 384: 203 / 403, 512: 449 / 607, 768: 1750 / 1063 (one workgroup runs on
one core there). On GPUs one workgroup holds hundreds of lanes and JAX's rule launches ~18
kernels a column (not measured yet)."""


def _lu_on_device(m, n) -> bool:
    return m * n * min(m, n) <= _LU_KERNEL_WORK["cpu" if _cpu_adapter() else "gpu"]


_LU_PLAN_BYTES = 1 << 27
"""Most bytes of the LU's state (the matrices, their pivots and permutations) that the rule
leaves to `custom_call @wgpu_hlo.lu`, which the compiler plans as a tiled factorization
(`src/codegen/op_kernels/lu.rs`, `tiled`: three launches per block of columns): 128 MiB,
WebGPU's default binding limit. Larger ones go by JAX-level panels (`_lu_blocked`), whose
products the compiler splits over bindings."""

_LU_PANEL = 64
"""Columns of the panels of the blocked LU (`_lu_blocked`). lavapipe, 1024 x 1024 (ms): 32:
688, 64: 643; the one-workgroup kernel's panels take half the time."""

_LU_BLOCKED_FROM = {"cpu": 160, "gpu": 512}
"""Smallest min(m, n) that `_lu_blocked` factors (panels through the LU kernel, products for
the rest) instead of the one-workgroup kernel. lavapipe, square f32, kernel / blocked, ms:
192: 28 / 30, 256: 59 / 54, 384: 210 / 91, 512: 485 / 150; again on 2026-11-30 (solve, an
AMD host, with the split of `_lu_blocked`): 128: 3.8 / 4.7, 160: 9.5 / 8.4, 192: 15.1 / 8.8,
256: 33.3 / 13.4, 300: 54 / 19.9. The GPU value is a guess: not measured on a GPU."""


def _lu_panel_step(a, perm, piv, j, b):
    """One panel of `_lu_blocked`: columns `j .. j + b` (`j` may be traced; `b` static)."""
    import jax.numpy as jnp
    from jax import lax

    m, n = a.shape[-2], a.shape[-1]
    rows = jnp.arange(m, dtype=jnp.int32)
    cols = jnp.arange(n, dtype=jnp.int32)
    # The panel's rows from j down, first, then zeros where the rows above j were: zero rows
    # at the bottom are never chosen as pivots (LAPACK takes the first of equal magnitudes)
    # and stay in place, so this factors exactly the rows from j down.
    panel = lax.dynamic_slice_in_dim(a, j, b, axis=-1)
    rolled = jnp.take(panel, (rows + j) % m, axis=-2)
    rolled = jnp.where((rows < m - j)[:, None], rolled, jnp.zeros((), a.dtype))
    lu_r, piv_r, perm_r = lax.linalg.lu(rolled)
    piv = lax.dynamic_update_slice_in_dim(piv, piv_r + j, j, axis=-1)
    # Rows above j stay; row j + t takes row j + perm_r[t].
    moved = jnp.take_along_axis(perm_r, jnp.broadcast_to((rows - j) % m, perm_r.shape), axis=-1)
    source = jnp.where(rows < j, rows, j + moved)
    a = jnp.take_along_axis(a, source[..., :, None], axis=-2)
    perm = jnp.take_along_axis(perm, source, axis=-1)
    # The factored panel back in its place.
    below = (rows >= j)[:, None]
    factored = jnp.where(below, jnp.take(lu_r, (rows - j) % m, axis=-2),
                         lax.dynamic_slice_in_dim(a, j, b, axis=-1))
    a = lax.dynamic_update_slice_in_dim(a, factored, j, axis=-1)
    if n > b:
        # The block row of U right of the panel, then the trailing matrix.
        block = lax.dynamic_slice_in_dim(a, j, b, axis=-2)
        u = lax.linalg.triangular_solve(lu_r[..., :b, :b], block, left_side=True, lower=True,
                                        unit_diagonal=True)
        right = cols >= j + b
        a = lax.dynamic_update_slice_in_dim(a, jnp.where(right, u, block), j, axis=-2)
        zero = jnp.zeros((), a.dtype)
        lower = jnp.where((rows >= j + b)[:, None], factored, zero)
        update = jnp.matmul(lower, jnp.where(right, u, zero), precision=lax.Precision.HIGHEST)
        a = jnp.where((rows >= j + b)[:, None] & right, a - update, a)
    return a, perm, piv


def _lu_blocked(a, split=True):
    """LU with partial pivoting of `a` (`..., m, n`) by panels of `_LU_PANEL` columns, as
    LAPACK's getrf: each panel (its rows from the diagonal down) is factored by
    `lax.linalg.lu` (whose rule takes the one-workgroup kernel for such narrow matrices), its
    row interchanges applied to every column, the block row of U solved by the panel's unit
    lower triangle, and the trailing matrix updated by one product. The panels run in a
    `fori_loop` over full-height shapes (masks and a rotation of the rows instead of shrinking
    slices), so one set of kernels serves every panel: unrolled with shrinking shapes, a
    512 x 512 LU compiled 64 kernels, 8.8 s on lavapipe. `split`: from eight panels, a second
    set of kernels takes the second half on the trailing window (below). Returns JAX's `lu`
    results."""
    import jax.numpy as jnp
    from jax import lax

    *batch, m, n = a.shape
    k = min(m, n)
    nb = min(_LU_PANEL, k)
    perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (*batch, m))
    piv = jnp.zeros((*batch, k), jnp.int32)
    steps = k // nb
    # From eight panels on (512 columns), the loop runs the first half of them and the
    # trailing matrix (the Schur complement by then) is factored as a problem of its own
    # (`split=False`: once), on its smaller shapes: its panels' products, masks and panel
    # kernel cover the window, not the whole matrix, for a second set of kernels to compile.
    # lavapipe, solve (ms, first call with empty caches in s): 512: 54 -> 47 (1.7 -> 3.1 s),
    # 1000: 289 -> 200 (3.4 -> 4.9 s); from four panels, 384: 32 -> 25 (+1.4 s of first call
    # for 7 ms a call: not taken). Splitting the window again (down to one panel) gave 41 and
    # 196 ms for 4.8 and 7.6 s of first call.
    first = steps // 2 if split and steps >= 8 else steps
    a, perm, piv = lax.fori_loop(
        0, first, lambda s, c: _lu_panel_step(*c, s * nb, nb), (a, perm, piv)
    )
    if first < steps:
        s = first * nb
        lu_w, piv_w, perm_w = _lu_blocked(a[..., s:, s:], split=False)
        # The window's row interchanges reach the rows of L left of it.
        left = jnp.take_along_axis(a[..., s:, :s], perm_w[..., :, None], axis=-2)
        a = jnp.concatenate(
            [a[..., :s, :], jnp.concatenate([left, lu_w], axis=-1)], axis=-2
        )
        piv = jnp.concatenate([piv[..., :s], piv_w + s], axis=-1)
        perm = jnp.concatenate(
            [perm[..., :s], jnp.take_along_axis(perm[..., s:], perm_w, axis=-1)], axis=-1
        )
    elif k % nb:
        a, perm, piv = _lu_panel_step(a, perm, piv, steps * nb, k % nb)
    return [a, piv, perm]


def lu_rule(default):
    """The rule of `lu` on wgpu, for real f32/f64 matrices: through `custom_call
    @wgpu_hlo.lu` (LAPACK's pivots; the compiler's tiled plan) where the state fits
    `_LU_PLAN_BYTES`; past it, or with `WGPU_HLO_LU=blocked` (the rule before the tiled
    plan), narrow or small ones through the custom call and ones wider than a panel with
    min(m, n) from `_LU_BLOCKED_FROM` or past the kernel's work bound by JAX-level panels
    (`_lu_blocked`); everything else (complex, past `_LU_MAX`) through `default` (JAX's
    blocked rule, whose panels loop over columns with ~18 kernel launches a column).
    `WGPU_HLO_LINALG=jax` keeps `default`; `WGPU_HLO_LU=kernel` (or `workgroup`, which also
    has the compiler take its one-workgroup kernels) never takes panels.

    Since 2026-12-01, by the tiled plan (lavapipe, ms per `solve`; before: JAX-level panels,
    from 160 columns): 128: 2.7 (4.7), 256: 5.8 (13-24), 512: 23 (49-62), 1024: 117 (233);
    first calls with the shader caches warm 0.5 s (4.4 s) at 512.

    lavapipe, square f32 (ms; kernel / panels / JAX's rule): 256: 59 / 54 / 268, 512: 485 /
    150 / 640, 1024: - / 643 / 1600; first calls with empty caches: 512: 0.5 / 1.8 / 1.1 s."""
    import os

    from jax._src.interpreters import mlir

    blocked = lower_fun(_lu_blocked, multiple_results=True)

    def rule(ctx, a, **params):
        av = ctx.avals_in[0]
        m, n = av.shape[-2], av.shape[-1]
        if (
            os.environ.get("WGPU_HLO_LINALG", "") == "jax"
            or np.dtype(av.dtype) not in (np.dtype(np.float32), np.dtype(np.float64))
            or not (1 <= m <= _LU_MAX and 1 <= n <= _LU_MAX)
        ):
            return default(ctx, a, **params)
        mode = os.environ.get("WGPU_HLO_LU", "").strip()
        batch = int(np.prod(av.shape[:-2], dtype=np.int64))
        # The tiled plan's state: rows padded to whole vec4s, a whole vec4 per matrix.
        words = -(-(m * (-(-n // 4) * 4) + min(m, n) + m) // 4) * 4
        state = batch * words * np.dtype(av.dtype).itemsize
        if mode == "blocked" or state > _LU_PLAN_BYTES:
            cls = "cpu" if _cpu_adapter() else "gpu"
            # A panel (at most `_LU_PANEL` columns) always takes the kernel: `_lu_blocked`'s
            # own panels come back here.
            if (
                min(m, n) > _LU_PANEL
                and (min(m, n) >= _LU_BLOCKED_FROM[cls] or not _lu_on_device(m, n))
                and mode not in ("kernel", "workgroup")
            ):
                return blocked(ctx, a)
            if not _lu_on_device(m, n):
                return default(ctx, a, **params)
        types = [mlir.aval_to_ir_type(ctx.module_context, v) for v in ctx.avals_out]
        op = mlir.custom_call("wgpu_hlo.lu", result_types=types, operands=[a], api_version=1)
        return list(op.results)

    return rule


def _device_or_host(name, impl, on_device):
    """The device rule of `impl` where `on_device(operand aval, **params)`, else the host's."""
    from . import host_ops

    device = lower_fun(impl, multiple_results=True)
    host = host_ops.rule(name)

    def rule(ctx, *xs, **params):
        if on_device(ctx.avals_in[0], **params):
            return device(ctx, *xs, **params)
        return host(ctx, *xs, **params)

    return rule


def _rules():
    from jax._src.lax import linalg

    from . import host_ops

    rules = [
        (linalg.lu_p, lu_rule(host_ops._jax_rule(linalg.lu_p))),  # noqa: SLF001
        (linalg.eigh_p, _device_or_host("eigh", _eigh_impl, _eigh_on_device)),
        (linalg.qr_p, _device_or_host("qr", _qr_impl, _qr_on_device)),
        (linalg.svd_p, _device_or_host("svd", _svd_impl, _svd_on_device)),
    ]
    # Real on the device, complex on the host (LAPACK through scipy).
    for name, impl in [("geqrf", _geqrf_impl), ("householder_product", _householder_product_impl)]:
        prim = getattr(linalg, f"{name}_p", None)
        if prim is not None:
            rules.append((prim, _device_or_host(name, impl, lambda aval, **_: _real(aval))))
    for name in ["eig", "schur", "hessenberg", "tridiagonal"]:
        prim = getattr(linalg, f"{name}_p", None)
        if prim is not None:
            rules.append((prim, host_ops.rule(name)))
    return rules


def register(platform: str) -> None:
    """Installs the rules for `platform`."""
    from jax._src.interpreters import mlir

    for primitive, rule in RULES or _rules():
        mlir.register_lowering(primitive, rule, platform=platform)
