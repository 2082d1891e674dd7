"""Linear algebra at realistic sizes on `wgpu` against JAX's `cpu` backend in the same process.

The sizes are where one-thread-per-matrix kernels break (llvmpipe stops a shader invocation's
loops after 65535 iterations) and where host-driven loops of one rotation per step are too
slow. Tests marked `slow` (minutes on lavapipe) run only with `JAX_WGPU_SLOW_TESTS=1`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

from conftest import cpu_kernel_class

slow = pytest.mark.skipif(
    not os.environ.get("JAX_WGPU_SLOW_TESTS"), reason="slow on lavapipe: JAX_WGPU_SLOW_TESTS=1"
)

CPU = jax.devices("cpu")[0]


def on(device, f, *args):
    args = [jax.device_put(a, device) for a in args]
    return jax.tree_util.tree_map(np.asarray, jax.jit(f)(*args))


def spd(n, batch=(), seed=0, dtype=np.float32):
    """Well-conditioned SPD matrices: M M^T / n + I."""
    m = np.random.default_rng(seed).standard_normal(batch + (n, n))
    return (m @ np.swapaxes(m, -1, -2) / n + np.eye(n)).astype(dtype)


def rand(shape, seed=1, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert not np.isnan(got).any()
    err = np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))
    assert err <= tol, f"relative error {err:.3g} > {tol}"


@pytest.mark.parametrize("n", [100, 256, 512])
def test_cholesky_and_cho_solve(gpu, n):
    a, b = spd(n), rand((n, 3))

    def f(a, b):
        return jnp.linalg.cholesky(a), jsl.cho_solve(jsl.cho_factor(a), b)

    g, c = on(gpu, f, a, b), on(CPU, f, a, b)
    assert_close(g[0], c[0], 1e-5)
    assert_close(g[1], c[1], 1e-4)


def test_cholesky_upper_batched(gpu):
    a = spd(130, (2,), seed=3)
    f = lambda a: jsl.cholesky(a, lower=False)
    assert_close(on(gpu, f, a), on(CPU, f, a), 1e-5)


@slow
def test_cholesky_1024(gpu):
    a = spd(1024, seed=4)
    assert_close(on(gpu, jnp.linalg.cholesky, a), on(CPU, jnp.linalg.cholesky, a), 1e-5)


def test_cholesky_f64(gpu):
    if not jax.config.jax_enable_x64:
        pytest.skip("needs jax_enable_x64")
    a = spd(200, seed=5, dtype=np.float64)
    assert_close(on(gpu, jnp.linalg.cholesky, a), on(CPU, jnp.linalg.cholesky, a), 1e-12)


def test_cholesky_not_positive_definite_is_nan(gpu):
    a = spd(100, seed=6)
    a[50, 50] = -10.0
    g, c = on(gpu, jnp.linalg.cholesky, a), on(CPU, jnp.linalg.cholesky, a)
    # NaN wherever cpu has NaN (its whole factor; JAX zeroes the other triangle), no garbage.
    assert np.isnan(c).any()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    np.testing.assert_array_equal(g[~np.isnan(g)], c[~np.isnan(c)])


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_triangular_solve(gpu, left_side, lower, transpose_a, unit_diagonal):
    n, k = 300, 4
    # Off-diagonal entries of size 1/n, diagonal near 1: well conditioned either way.
    a = rand((2, n, n), seed=7) / n + np.eye(n, dtype=np.float32)
    b = rand((2, n, k) if left_side else (2, k, n), seed=8)

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                           transpose_a=transpose_a, unit_diagonal=unit_diagonal)

    assert_close(on(gpu, f, a, b), on(CPU, f, a, b), 1e-5)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [False, True])
def test_triangular_solve_few_vectors(gpu, left_side, lower, transpose_a):
    # 1-3 right-hand sides of 128 rows or more: a workgroup per vector; on CPU adapters with
    # subgroups one subgroup, each lane's rows in a private array (`vectors_in_subgroups`):
    # rows not a multiple of the lanes, a batch of two single vectors, and 2040 rows (255 a
    # lane, over several launches).
    for n, nv, batch in [(517, 1, ()), (517, 3, ()), (300, 1, (2,)), (2040, 1, ())]:
        a = rand(batch + (n, n), seed=n) / n + np.eye(n, dtype=np.float32)
        b = rand(batch + ((n, nv) if left_side else (nv, n)), seed=n + 1)

        def f(a, b):
            return lax.linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                               transpose_a=transpose_a, unit_diagonal=transpose_a)

        assert_close(on(gpu, f, a, b), on(CPU, f, a, b), 1e-5)


def test_triangular_solve_1024(gpu):
    n = 1024
    a = rand((n, n), seed=9) / n + np.eye(n, dtype=np.float32)
    b = rand((n, 2), seed=10)
    f = lambda a, b: jsl.solve_triangular(a, b, lower=True)
    assert_close(on(gpu, f, a, b), on(CPU, f, a, b), 1e-5)


@pytest.mark.parametrize("lower", [True, False])
def test_triangular_solve_long_vector(gpu, lower):
    # One right-hand side of 3000 rows: a workgroup per vector, over several launches (each
    # loads the rows left into workgroup memory and stores them back).
    n = 3000
    a = rand((n, n), seed=11) / n + np.eye(n, dtype=np.float32)
    b = rand((n, 1), seed=12)
    f = lambda a, b: jsl.solve_triangular(a, b, lower=lower, trans=1)
    assert_close(on(gpu, f, a, b), on(CPU, f, a, b), 1e-5)


def test_blocked_triangular_solve_tree():
    """The blocked solve's diagonal blocks (64 rows, doubled past 32 of them) and its splits
    (the largest power of two below the blocks, so left halves keep a few shapes)."""
    from jax_plugins.wgpu.lowerings import _trsm_leaf, _trsm_split

    assert [_trsm_leaf(k) for k in (256, 1000, 2048, 2049, 4096, 10000)] == [
        64, 64, 64, 128, 128, 512]
    assert [_trsm_split(b) for b in (2, 3, 4, 5, 8, 11, 16, 17, 32)] == [
        1, 2, 2, 4, 4, 8, 8, 16, 16]


@pytest.mark.parametrize("k, nrhs", [(700, 48), pytest.param(2100, 40, marks=slow)])
def test_blocked_triangular_solve_sizes(gpu, k, nrhs):
    # 700: 11 blocks of 64 (8 + 2 + 1, a padded last block); 2100: 17 blocks of 128. Lower
    # from the left and upper transposed from the right (flipped and transposed to lower).
    rng = np.random.default_rng(k)
    a = (rng.standard_normal((k, k)) / np.sqrt(k) + 2 * np.eye(k)).astype(np.float32)
    b = rand((k, nrhs), seed=3)
    for f, x in [
        (lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True), b),
        (lambda a, b: lax.linalg.triangular_solve(
            a, b, left_side=False, lower=False, transpose_a=True), b.T),
    ]:
        assert_close(on(gpu, f, a, x), on(CPU, f, a, x), 2e-5)


def check_lu(gpu, a, tol):
    """`lax.linalg.lu` of `a` on `gpu`: the same pivots and permutation as LAPACK on the cpu
    backend, the factors within `tol`."""
    g, c = on(gpu, lax.linalg.lu, a), on(CPU, lax.linalg.lu, a)
    assert g[0].dtype == a.dtype
    np.testing.assert_array_equal(g[1], c[1])
    np.testing.assert_array_equal(g[2], c[2])
    assert_close(g[0], c[0], tol)


def test_lu_and_solve_256(gpu):
    a, b = rand((256, 256), seed=11), rand((256, 2), seed=12)
    f = lambda a, b: (jsl.lu(a)[2], jnp.linalg.solve(a, b))
    g, c = on(gpu, f, a, b), on(CPU, f, a, b)
    assert_close(g[0], c[0], 1e-4)
    assert_close(g[1], c[1], 1e-3)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (5, 3), (3, 5), (3, 7, 7), (130, 100),
                                   (100, 130), (150, 150)])
def test_lu_kernel_pivots_as_lapack(gpu, shape):
    # The device LU (`custom_call @wgpu_hlo.lu`): the same pivots and permutation as LAPACK,
    # factors to rounding, for square, wide, tall and batched matrices.
    a = rand(shape, seed=sum(shape))
    check_lu(gpu, a, 1e-4)


def test_lu_kernel_ties_zero_pivots_and_f64(gpu):
    # Ties in magnitude take the first row (isamax); a zero column leaves its pivot in place
    # and the column unscaled; f64 keeps f64.
    a = np.array([[1, -2, 2, 0], [2, 1, -2, 0], [-2, 2, 1, 0], [1, 1, 1, 0]], np.float32)
    check_lu(gpu, a, 1e-6)
    with jax.enable_x64(True):
        check_lu(gpu, rand((2, 40, 40), seed=5).astype(np.float64), 1e-12)


@pytest.mark.parametrize("shape", [(400, 400), (700, 350), (350, 700), (2, 333, 333), (520, 520)])
def test_lu_panels_pivots_as_lapack(gpu, shape):
    # By default the compiler's tiled plan (`custom_call @wgpu_hlo.lu`). With
    # `WGPU_HLO_LU=blocked` (scripts/test.sh runs these tests so too), min(m, n) of 160 or
    # more on CPU adapters (512 on GPUs: 520 x 520 in both runs) goes by JAX-level 64-column
    # panels in a fori_loop (each panel through the kernel, its rows rotated so that one
    # shape serves every step; remainder panels for 333 and 520), the block row by a
    # triangular solve, the trailing matrix by a product; from eight panels the second half
    # on the trailing window (its row interchanges applied to the rows of L left of it;
    # 520 x 520: four panels, then a 264 x 264 window with a remainder panel). The same
    # pivots as LAPACK; factors to f32 rounding (350 x 700: wgpu and cpu are 7.2e-5 and
    # 5.5e-5 from an f64 LU, 1.3e-4 from each other).
    a = rand(shape, seed=sum(shape) + 1)
    check_lu(gpu, a, 3e-4)


@pytest.mark.parametrize("shape", [(33, 33), (65, 70), (70, 133), (133, 70), (3, 97, 97),
                                   (513, 100), (4100, 40), (3000, 8, 8), (500, 20, 12)])
def test_lu_tiled(gpu, shape):
    # The tiled plan of `custom_call @wgpu_hlo.lu` (blocks of 32 columns on CPU adapters, 64
    # on GPUs; rows padded to whole vec4s): one block and a column more, wide and tall with
    # a block row of U or a trailing matrix that is not a whole block, batched, 4100 rows
    # (past the rows a CPU adapter's panel holds in registers: the panel in the state),
    # batches of small matrices (a workgroup of one subgroup each). The same pivots as
    # LAPACK, factors to rounding.
    a = rand(shape, seed=sum(shape) + 7)
    check_lu(gpu, a, 1e-4)


def test_lu_tiled_ties_singular_and_f64(gpu):
    # Small integers (ties in magnitude everywhere: the first row in LAPACK's order after the
    # interchanges so far), a zero column and a repeated row, f64.
    rng = np.random.default_rng(3)
    ints = rng.integers(-2, 3, (96, 96)).astype(np.float32)
    singular = rand((100, 100), seed=4)
    singular[:, 7] = 0
    singular[50] = singular[10]
    for a in (ints, singular):
        check_lu(gpu, a, 1e-4)
    with jax.enable_x64(True):
        check_lu(gpu, rand((2, 150, 150), seed=6).astype(np.float64), 1e-12)


def test_solve_inv_slogdet_300(gpu):
    a, b = rand((300, 300), seed=13) + 20 * np.eye(300, dtype=np.float32), rand((300,), seed=14)
    f = lambda a, b: (jnp.linalg.solve(a, b), jnp.linalg.inv(a), jnp.linalg.slogdet(a)[1],
                      jnp.linalg.det(a[:8, :8]))
    g, c = on(gpu, f, a, b), on(CPU, f, a, b)
    for x, y in zip(g, c):
        assert_close(x, y, 1e-4)


def check_eigh(gpu, a, tol):
    w, v = on(gpu, jnp.linalg.eigh, a)
    wc = on(CPU, jnp.linalg.eigvalsh, a)
    assert_close(w, wc, tol)
    # A V = V diag(w) and V orthogonal (vectors are unique only up to sign).
    n = a.shape[-1]
    assert_close(a @ v, v * w[..., None, :], 10 * tol)
    assert_close(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(n), v.shape), 10 * tol)


def check_svd(gpu, a, tol):
    u, s, vt = on(gpu, lambda a: jnp.linalg.svd(a, full_matrices=False), a)
    assert_close(s, on(CPU, lambda a: jnp.linalg.svd(a, compute_uv=False), a), tol)
    assert_close((u * s[..., None, :]) @ vt, a, 10 * tol)
    k = s.shape[-1]
    assert_close(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(k), s.shape[:-1] + (k, k)),
                 10 * tol)


def check_qr(gpu, a, tol):
    q, r = on(gpu, jnp.linalg.qr, a)
    assert_close(q @ r, a, tol)
    k = q.shape[-1]
    assert_close(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)),
                 tol)
    assert np.all(np.tril(r, -1) == 0)
    assert_close(np.abs(r), np.abs(on(CPU, lambda a: jnp.linalg.qr(a)[1], a)), tol)


@pytest.mark.parametrize("broadcast", ["1", "0"])
def test_back_transformations_by_four_reflectors(gpu, broadcast, monkeypatch):
    """The back-transformations apply four reflectors per two passes over the vectors, the
    rest one at a time (`back_blocked_kernel`): reflector counts below four, of four and of
    four plus one to three, batched and not, tall svds (U's reflectors from row k, V's from
    k + 1), with the entries shared through subgroups and loaded by every thread
    (`WGPU_HLO_BACK_BROADCAST=0`, the GPU kernel). The tridiagonal and bidiagonal routes are
    forced (`..._TRIDIAGONAL=1`, `..._BIDIAGONAL=1`) at sizes where Jacobi would serve."""
    monkeypatch.setenv("WGPU_HLO_BACK_BROADCAST", broadcast)
    monkeypatch.setenv("WGPU_HLO_EIGH_TRIDIAGONAL", "1")
    monkeypatch.setenv("WGPU_HLO_SVD_BIDIAGONAL", "1")
    for shape in [(2, 5, 5), (6, 6), (2, 7, 7), (9, 9), (33, 33)]:
        a = rand(shape, seed=shape[-1])
        a = (a + np.swapaxes(a, -1, -2)) / 2
        # Fresh functions: jit would reuse an executable compiled under other settings.
        w, v = on(gpu, lambda a: jnp.linalg.eigh(a), a)
        assert_close(w, on(CPU, jnp.linalg.eigvalsh, a), 1e-5)
        n = shape[-1]
        assert_close(a @ v, v * w[..., None, :], 1e-5)
        assert_close(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(n), v.shape), 1e-5)
    for shape in [(5, 3), (2, 6, 4), (7, 7), (2, 9, 6), (40, 9), (17, 13)]:
        a = rand(shape, seed=shape[-1])
        u, s, vt = on(gpu, lambda a: jnp.linalg.svd(a, full_matrices=False), a)
        assert_close(s, on(CPU, lambda a: jnp.linalg.svd(a, compute_uv=False), a), 1e-5)
        assert_close((u * s[..., None, :]) @ vt, a, 1e-5)
        k = s.shape[-1]
        eye = np.broadcast_to(np.eye(k), s.shape[:-1] + (k, k))
        assert_close(np.swapaxes(u, -1, -2) @ u, eye, 1e-5)
        assert_close(vt @ np.swapaxes(vt, -1, -2), eye, 1e-5)


def test_reductions_in_scratch_textures_match_the_buffer_ones(gpu, monkeypatch):
    """On CPU adapters with read-write storage textures the tridiagonal and bidiagonal
    reductions keep their block in a scratch texture within each launch, copied in at the
    start and back at the end but for the reflectors the launch wrote to the state directly
    (`tri_texture`, `bidiag_in_texture`), and the back-transformations their vectors
    (`BackTexture`, each thread its own column): the same operations in the same order, so
    the same bits as in the state's buffers (`WGPU_HLO_{TRI,BIDIAG,BACK}_TEXTURE=0`). Sizes
    of several launches each, batched and not, tall and wide, values alone and with vectors.
    Elsewhere both runs take the buffers and agree trivially."""
    monkeypatch.setenv("WGPU_HLO_EIGH_TRIDIAGONAL", "1")
    monkeypatch.setenv("WGPU_HLO_SVD_BIDIAGONAL", "1")
    cases = []
    for shape in [(130, 130), (3, 67, 67), (5, 5)]:
        a = rand(shape, seed=shape[-1])
        cases.append((lambda a: jnp.linalg.eigh(a), (a + np.swapaxes(a, -1, -2)) / 2))
    for shape in [(2, 150, 97), (90, 200), (17, 13)]:
        a = rand(shape, seed=shape[-1])
        cases.append((lambda a: jnp.linalg.svd(a, full_matrices=False), a))
        cases.append((lambda a: jnp.linalg.svd(a, compute_uv=False), a))
    for f, a in cases:
        got = {}
        for texture in ["1", "0"]:
            monkeypatch.setenv("WGPU_HLO_TRI_TEXTURE", texture)
            monkeypatch.setenv("WGPU_HLO_BIDIAG_TEXTURE", texture)
            monkeypatch.setenv("WGPU_HLO_BACK_TEXTURE", texture)
            # A fresh function: jit would reuse the executable compiled under the other.
            got[texture] = jax.tree.leaves(on(gpu, lambda a: f(a), a))
        for x, y in zip(got["1"], got["0"]):
            assert np.array_equal(np.asarray(x), np.asarray(y)), a.shape


def test_eigh_svd_qr_batched(gpu):
    a = rand((2, 64, 64), seed=13)
    check_eigh(gpu, (a + np.swapaxes(a, -1, -2)) / 2, 1e-4)
    check_svd(gpu, a[:, :, :50], 1e-4)
    check_qr(gpu, a[:, :, :50], 1e-4)


@slow
def test_eigh_svd_qr_128_batched(gpu):
    a = rand((2, 128, 128), seed=13)
    check_eigh(gpu, (a + np.swapaxes(a, -1, -2)) / 2, 1e-4)
    check_svd(gpu, a[:, :, :100], 1e-4)
    check_qr(gpu, a[:, :, :100], 1e-4)


@pytest.mark.parametrize("shape", [(2, 70, 70), (130, 130), (256, 256)])
def test_eigh_ql_in_f32(gpu, shape, monkeypatch):
    """eigh's QL iteration in f32, what adapters without f64 (Metal, many mobile GPUs) run
    (`WGPU_HLO_QL_F32=1` forces it here): eigenvalues (Rayleigh quotients of the vectors)
    within 2e-6 of cpu's relative to the largest, residual and orthogonality within 1e-4;
    eigvalsh (the chase alone, whose rounding drifts: 2e-6 at 256) within 1e-5."""
    monkeypatch.setenv("WGPU_HLO_QL_F32", "1")
    monkeypatch.setenv("WGPU_HLO_EIGH_TRIDIAGONAL", "1")
    a = sym(shape, 24)
    # Fresh functions: jit would reuse an executable of `jnp.linalg.eigh` compiled before.
    w, v = on(gpu, lambda a: jnp.linalg.eigh(a), a)
    wc = on(CPU, jnp.linalg.eigvalsh, a)
    assert_close(w, wc, 2e-6)
    n = shape[-1]
    assert_close(a @ v, v * w[..., None, :], 1e-4)
    assert_close(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(n), v.shape), 1e-4)
    assert_close(on(gpu, lambda a: jnp.linalg.eigvalsh(a), a), wc, 1e-5)


@pytest.mark.parametrize("shape", [(48, 48), (3, 70, 70), (130, 130)])
def test_eigvalsh_computes_no_vectors(gpu, shape, tmp_path, monkeypatch):
    """`eigvalsh` binds JAX's `eigh`, vectors included; the compiler drops the vectors nothing
    reads (`passes::dce::drop_unused_vectors`), so no kernel writes or back-transforms them
    (Jacobi routes at 48 and 70, the tridiagonal route with bisection at 130 on CPU
    adapters). The values match eigh's (with its vectors) and cpu's."""
    m = rand(shape, seed=23)
    a = (m + np.swapaxes(m, -1, -2)) / 2
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    w = on(gpu, jnp.linalg.eigvalsh, a)
    kernels = [p.name for p in tmp_path.glob("*eigvalsh*.wgsl")]
    assert kernels and not any(k.endswith(("_vectors.wgsl", "_back.wgsl", "_out.wgsl"))
                               for k in kernels), kernels
    monkeypatch.delenv("WGPU_HLO_DUMP")
    # (GPUs' two-sided Jacobi kernel is about 1e-6 off cpu.)
    assert_close(w, on(gpu, lambda a: jnp.linalg.eigh(a), a)[0], 5e-6)
    assert_close(w, on(CPU, jnp.linalg.eigvalsh, a), 5e-6)


@pytest.mark.parametrize("n", [80, 200])
def test_eigvalsh_by_bisection(gpu, n):
    """Values-only eigh past 64 columns on CPU adapters: bisection on Sturm counts, one thread
    per eigenvalue. Against cpu on random, graded, clustered and diagonal spectra; diagonal
    and zero matrices give their entries exactly, as the QL iteration and cpu do."""
    rng = np.random.default_rng(25)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    spectra = [np.logspace(-6, 0, n), np.r_[np.ones(n // 2), -np.ones(n - n // 2)],
               rng.standard_normal(n)]
    for lam in spectra:
        a = ((q * lam) @ q.T).astype(np.float32)
        a = (a + a.T) / 2
        assert_close(on(gpu, jnp.linalg.eigvalsh, a), on(CPU, jnp.linalg.eigvalsh, a), 2e-6)
    for a in [np.diag(np.repeat(np.arange(n // 4, dtype=np.float32) - 7.5, 4)),
              np.zeros((n, n), np.float32), 3 * np.eye(n, dtype=np.float32)]:
        np.testing.assert_array_equal(on(gpu, jnp.linalg.eigvalsh, a),
                                      on(CPU, jnp.linalg.eigvalsh, a))


def test_bidiagonal_deferred_updates_change_no_bit(gpu, monkeypatch):
    """The bidiagonal reduction that defers each reflection's update into the next pass over
    the matrix (`BIDIAG_DEFER_KERNEL`) rounds as the one that applies them at once: the same
    singular values and vectors to the bit, over launch boundaries (512 columns), and both
    match cpu."""
    monkeypatch.setenv("WGPU_HLO_SVD_BIDIAGONAL", "1")
    a = rand((2, 160, 150), seed=21)
    b = rand((512, 512), seed=22)

    def run():
        return (on(gpu, lambda a: jnp.linalg.svd(a, full_matrices=False), a),
                on(gpu, lambda b: jnp.linalg.svd(b, compute_uv=False), b))

    deferred = run()
    monkeypatch.setenv("WGPU_HLO_BIDIAG_DEFER", "0")
    applied = run()
    for x, y in zip(jax.tree_util.tree_leaves(deferred), jax.tree_util.tree_leaves(applied)):
        np.testing.assert_array_equal(x, y)
    monkeypatch.delenv("WGPU_HLO_BIDIAG_DEFER")
    check_svd(gpu, a, 1e-4)
    assert_close(deferred[1], on(CPU, lambda b: jnp.linalg.svd(b, compute_uv=False), b), 1e-4)


@pytest.mark.parametrize("qr_first", ["0", "1"])
def test_svd_values_of_clustered_tall_matrices(gpu, monkeypatch, qr_first):
    # The singular values of a tall random matrix cluster (3000x40: 48 to 61). One-sided
    # Jacobi of the values alone stopped at cosines of m epsilons, which left pairs of close
    # values 9.7e-5 of |s| off (jax cpu: 1.6e-7). Directly and through QR first, against
    # numpy in f64.
    monkeypatch.setenv("WGPU_HLO_SVD_QR_FIRST", qr_first)
    a = rand((3000, 40), seed=0)
    s64 = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    s = on(gpu, lambda a: jnp.linalg.svd(a, compute_uv=False), a)
    assert np.abs(s - s64).max() <= 5e-6 * s64.max()


def test_svd_qr_first_rule(monkeypatch):
    """Which tall svds start with a QR: by cost on CPU adapters (lavapipe timings in
    `_svd_qr_first`), from 256 rows and twice the columns on GPUs, always past the rows the
    Jacobi kernel takes."""
    from jax_plugins.wgpu.lowerings import _SVD_JACOBI_MAX_ROWS, _svd_qr_first

    monkeypatch.delenv("WGPU_HLO_SVD_QR_FIRST", raising=False)
    monkeypatch.delenv("WGPU_HLO_SVD_BIDIAGONAL", raising=False)
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", "cpu")
    assert _svd_qr_first(300, 100, True) and _svd_qr_first(300, 100, False)
    assert _svd_qr_first(80, 40, True) and _svd_qr_first(80, 40, False)
    assert not _svd_qr_first(64, 32, True) and not _svd_qr_first(64, 32, False)
    assert not _svd_qr_first(100, 10, False) and not _svd_qr_first(150, 100, False)
    # With U and V from 49 columns the direct route is the bidiagonal kernels, whose tall
    # matrices cost less than Jacobi's.
    assert not _svd_qr_first(100, 50, True) and _svd_qr_first(100, 50, False)
    assert not _svd_qr_first(200, 50, True) and _svd_qr_first(600, 64, True)
    assert _svd_qr_first(2000, 150, True) and _svd_qr_first(800, 200, True)
    assert not _svd_qr_first(400, 200, True) and not _svd_qr_first(300, 200, False)
    assert _svd_qr_first(3000, 40, True) and _svd_qr_first(2000, 40, True)
    monkeypatch.setenv("WGPU_HLO_SVD_BIDIAGONAL", "0")
    assert _svd_qr_first(100, 50, True)
    monkeypatch.delenv("WGPU_HLO_SVD_BIDIAGONAL")
    assert _svd_qr_first(5000, 10, True)
    assert _svd_qr_first(4096, 256, True) and _svd_qr_first(4096, 256, False)
    assert _svd_qr_first(_SVD_JACOBI_MAX_ROWS + 1, 2, False)
    assert not _svd_qr_first(64, 64, True)
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", "gpu")
    assert _svd_qr_first(300, 100, True) and not _svd_qr_first(256, 10, True)


@pytest.mark.parametrize("rows", [12288, 12289])
def test_svd_tall_either_side_of_the_jacobi_row_limit(gpu, rows):
    # 12288 rows: Jacobi directly (a round loops over ~6150 rows per invocation, within the
    # 8192 bound); one more: QR first. Both match cpu.
    check_svd(gpu, rand((rows, 3), seed=17), 1e-4)


def test_qr_512(gpu):
    check_qr(gpu, rand((512, 512), seed=16), 1e-4)


@pytest.mark.parametrize("panel, max_loop", [("", ""), ("", "4000"), ("workgroup", "")])
def test_qr_panels(gpu, monkeypatch, panel, max_loop):
    # Householder panels of up to 1024 rows run in one subgroup on CPU adapters, the panel in
    # its state as quads of columns by lanes (`WGPU_HLO_QR_PANEL=workgroup`: the workgroup
    # kernel); a low loop bound splits a panel's columns over several launches. Sizes around
    # the 8 lanes and the 1024-row limit, wide, batched, and columns already zero (tau = 0),
    # repeated or tiny.
    monkeypatch.setenv("WGPU_HLO_QR_PANEL", panel)
    monkeypatch.setenv("WGPU_HLO_MAX_LOOP", max_loop)
    for shape in [(1, 5), (5, 1), (9, 9), (70, 33), (40, 100), (3, 50, 37), (256, 256),
                  (1024, 40), (1025, 9)]:
        check_qr(gpu, rand(shape, seed=sum(shape)), 1e-4)
    a = rand((90, 60), seed=17)
    a[:, 10] = 0.0
    a[:, 20] = a[:, 3]
    a[40:, 30] = 0.0
    a[:, 50] *= 1e-30
    # Rank-deficient: R past the first dependent column is not unique, so Q R and Q only.
    q, r = on(gpu, jnp.linalg.qr, a)
    assert_close(q @ r, a, 1e-5)
    assert_close(q.T @ q, np.eye(60), 1e-5)
    assert np.all(np.tril(r, -1) == 0)
    zeros_below = np.triu(rand((64, 64), seed=18))
    q, r = on(gpu, jnp.linalg.qr, zeros_below)
    np.testing.assert_array_equal(np.abs(np.diag(q)), 1.0)
    np.testing.assert_array_equal(np.abs(r), np.abs(zeros_below))


@slow
def test_qr_batch_past_the_binding_limit(gpu):
    # 16384 QRs of 64 x 64: the panels' state (270 MB) passes lavapipe's 128 MiB binding limit
    # and is bound in parts. The panel kernel stored single components of it, which the parts'
    # rewrite could not take: INTERNAL, "generated WGSL does not parse". About 40 s on lavapipe.
    a = rand((16384, 64, 64), seed=19)
    q, r = on(gpu, jnp.linalg.qr, a)
    assert_close(q @ r, a, 1e-5)
    assert_close(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(64), q.shape), 1e-5)
    assert np.all(np.tril(r, -1) == 0)
    # Some of 16384 random matrices are ill-conditioned enough that R's rounding differs from
    # cpu's by 5e-5 of its largest entry.
    assert_close(np.abs(r), np.abs(on(CPU, lambda a: jnp.linalg.qr(a)[1], a)), 5e-4)


@slow
def test_batches_past_the_binding_limit(gpu):
    # States past lavapipe's 128 MiB binding limit, bound in parts: their kernels update the
    # state in place (`out0[i] = out0[i] * g;`), which the parts' rewrite refused
    # (RESOURCE_EXHAUSTED). About 90 s on lavapipe.
    a = spd(32, (40000,), seed=20)
    assert_close(on(gpu, jnp.linalg.eigvalsh, a), on(CPU, jnp.linalg.eigvalsh, a), 1e-5)
    f = lambda a: jnp.linalg.svd(a, compute_uv=False)
    assert_close(on(gpu, f, a), on(CPU, f, a), 1e-5)
    a, b = spd(64, (8192,), seed=21), rand((8192, 64, 2), seed=22)
    assert_close(on(gpu, jnp.linalg.solve, a, b), on(CPU, jnp.linalg.solve, a, b), 1e-5)
    g, c = on(gpu, jnp.linalg.slogdet, a), on(CPU, jnp.linalg.slogdet, a)
    np.testing.assert_array_equal(g[0], c[0])
    assert_close(g[1], c[1], 1e-5)


def test_qr_panel_in_one_launch(gpu, monkeypatch, tmp_path):
    # On CPU adapters a Householder panel whose columns fit one launch runs as one kernel that
    # fills its state from the panel and splits it into the results itself: the same bits as
    # the init / columns / out kernels (`WGPU_HLO_QR_PANEL=ranged`), and no such kernels.
    # The panels of 1024 x 40 loop too long for one launch and keep the three kernels.
    if not cpu_kernel_class(gpu):
        pytest.skip("the subgroup panel kernel is for CPU adapters")
    for shape in [(256, 256), (70, 33), (3, 50, 37), (1024, 40), (5, 1)]:
        one = shape != (1024, 40)
        a = rand(shape, seed=sum(shape))
        got = {}
        for panel in ["", "ranged"]:
            monkeypatch.setenv("WGPU_HLO_QR_PANEL", panel)
            dump = tmp_path / f"{panel or 'one'}_{'x'.join(map(str, shape))}"
            monkeypatch.setenv("WGPU_HLO_DUMP", str(dump))
            got[panel] = [np.asarray(x) for x in on(gpu, lambda a: jnp.linalg.qr(a), a)]
            monkeypatch.delenv("WGPU_HLO_DUMP")
            names = [p.name for p in dump.glob("*.wgsl")]
            ranged = [n for n in names if n.endswith(("_init.wgsl", "_columns.wgsl"))]
            assert bool(ranged) == (panel == "ranged" or not one), (shape, ranged)
        for x, y in zip(got[""], got["ranged"]):
            assert np.array_equal(x, y), shape
        check_qr(gpu, a, 1e-4)


@pytest.mark.parametrize("max_loop", ["", "300"])
def test_block_reflectors(gpu, monkeypatch, max_loop):
    # A panel of reflectors applied in compact WY form, c - V T V^T c or c - V T^T V^T c, by
    # one kernel (`custom_call @wgpu_hlo.block_reflector[_t]`, a column per invocation; rows
    # of V shared through subgroups on CPU adapters, loaded by each invocation as GPU class)
    # against the same as JAX ops on cpu. Columns left of `start` come back bit for bit;
    # V is zero above `row0`. Panels of 32 (quads) and of 3 or 7 reflectors (words), all
    # columns left of `start`, batches; a loop bound of 300 takes the split plan (sums by
    # ranges of rows, then the update on a copy). A batched `start` runs the ops under vmap.
    from jax_plugins.wgpu.lowerings import _block_reflector_ops, _block_reflector_primitive

    monkeypatch.setenv("WGPU_HLO_MAX_LOOP", max_loop)
    rng = np.random.default_rng(23)

    def operands(batch, m, w, b, row0):
        c = rng.standard_normal(batch + (m, w)).astype(np.float32)
        v = rng.standard_normal(batch + (m, b)).astype(np.float32)
        v[..., :row0, :] = 0
        t = np.triu(rng.standard_normal(batch + (b, b)), 1) * 0.3
        t = (t + np.eye(b) * rng.uniform(0.5, 1.0, batch + (b, 1))).astype(np.float32)
        return c, v, t

    for batch, m, w, b, start, row0 in [((), 256, 256, 32, 64, 32), ((), 300, 45, 7, 0, 0),
                                        ((), 129, 70, 32, 70, 5), ((), 20, 9, 3, 4, 19),
                                        ((), 600, 100, 32, 37, 400), ((2, 3), 40, 36, 4, 9, 2)]:
        c, v, t = operands(batch, m, w, b, row0)
        for transpose in (False, True):
            prim = _block_reflector_primitive(transpose)
            got = on(gpu, lambda c, v, t: prim.bind(c, v, t, jnp.int32(start), jnp.int32(row0)),
                     c, v, t)
            want = on(CPU, lambda c, v, t: _block_reflector_ops(c, v, t, start, transpose),
                      c, v, t)
            assert_close(got, want, 1e-5)
            np.testing.assert_array_equal(got[..., :start], c[..., :start])
    c, v, t = operands((3,), 50, 40, 8, 0)
    starts = np.array([0, 17, 40], np.int32)
    prim = _block_reflector_primitive(True)
    got = on(gpu, jax.vmap(lambda c, v, t, s: prim.bind(c, v, t, s, jnp.int32(0))),
             c, v, t, starts)
    want = on(CPU, jax.vmap(lambda c, v, t, s: _block_reflector_ops(c, v, t, s, True)),
              c, v, t, starts)
    assert_close(got, want, 1e-5)


def test_block_reflector_leaves_matrices_past_one_binding_to_jax_ops(monkeypatch):
    # The kernel updates the matrices in one binding: past 128 MiB (a 140000 x 256 QR) the
    # update goes as JAX ops, whose products the compiler splits (the kernel refused it).
    from jax_plugins.wgpu.lowerings import _block_reflector

    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", "cpu")
    monkeypatch.delenv("WGPU_HLO_QR_UPDATE", raising=False)

    def prims(m):
        shapes = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(m, 256), (m, 32), (32, 32)]]
        jaxpr = jax.make_jaxpr(lambda c, v, t: _block_reflector(c, v, t, 32, 0, True))(*shapes)
        return {e.primitive.name for e in jaxpr.jaxpr.eqns}

    assert "wgpu_block_reflector_t" in prims(100000)
    assert "wgpu_block_reflector_t" not in prims(140000)


@slow
def test_eigh_512(gpu):
    a = rand((512, 512), seed=14)
    check_eigh(gpu, (a + a.T) / 2, 1e-4)


@slow
def test_svd_512(gpu):
    check_svd(gpu, rand((512, 512), seed=15), 1e-4)



@pytest.mark.parametrize("broadcast", ["0", "1"])
def test_tridiagonal_and_bidiagonal_rotation_chains(gpu, monkeypatch, broadcast):
    """eigh's QL kernel and svd's bidiagonal QR kernel apply their logged rotations, four
    chains per sweep over the vectors, each step's rotation loaded by every thread or shared
    through subgroups on CPU adapters (`WGPU_HLO_QL_BROADCAST=0`: loaded). Both match cpu;
    sizes past the Jacobi kernels on CPU adapters (eigh from 65 columns, svd from 49), the
    eigh batched. Fresh functions: the setting is read when a program compiles."""
    monkeypatch.setenv("WGPU_HLO_QL_BROADCAST", broadcast)
    a = sym((2, 100, 100), 61)
    w, v = on(gpu, lambda a: jnp.linalg.eigh(a), a)
    assert_close(w, on(CPU, lambda a: jnp.linalg.eigvalsh(a), a), 1e-4)
    assert_close(a @ v, v * w[..., None, :], 1e-3)
    assert_close(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(100), v.shape), 1e-3)
    b = rand((100, 90), seed=62)
    u, s, vt = on(gpu, lambda b: jnp.linalg.svd(b, full_matrices=False), b)
    assert_close(s, on(CPU, lambda b: jnp.linalg.svd(b, compute_uv=False), b), 1e-4)
    assert_close((u * s) @ vt, b, 1e-3)
    assert_close(u.T @ u, np.eye(90), 1e-3)
    assert_close(vt @ vt.T, np.eye(90), 1e-3)


def structured_symmetric(n, seed):
    """Symmetric matrices whose QL iteration splits, deflates early or converges slowly."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    blocks = np.zeros((n, n))
    for s in range(0, n, 40):
        b = rng.standard_normal((40, 40))[: n - s, : n - s]
        blocks[s : s + 40, s : s + 40] = (b + b.T) / 2
    split = np.diag(rng.standard_normal(n)) + np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1)
    split[n // 2, n // 2 + 1] = split[n // 2 + 1, n // 2] = 0
    split[n // 5, n // 5 + 1] = split[n // 5 + 1, n // 5] = 1e-20
    third = n // 3
    return {
        # Rank one (NaN eigenvalues and vectors at 100 to 129 columns before the QL
        # iteration's deflation test took e below f64's epsilon of the matrix's norm).
        "rank one": np.outer(np.arange(n), np.arange(n)) / 1e4,
        "block diagonal": blocks,
        "split tridiagonal": split,
        "three eigenvalues": (q * np.repeat([1.0, 2.0, -3.0], [third, third, n - 2 * third])) @ q.T,
        "diagonal": np.diag(rng.standard_normal(n)),
    }


@pytest.mark.parametrize("n", [100, 129, 200])
def test_eigh_structured(gpu, n):
    """eigh on matrices with structure (rank one, blocks, a split tridiagonal form, repeated
    eigenvalues, diagonal): residual and orthogonality within 1e-5 of the norm, eigenvalues
    within 2e-6 of numpy's in f64; never NaN."""
    for name, a in structured_symmetric(n, 70 + n).items():
        a32 = a.astype(np.float32)
        w, v = on(gpu, jnp.linalg.eigh, a32)
        w, v, a64 = w.astype(np.float64), v.astype(np.float64), a32.astype(np.float64)
        scale = max(1e-30, np.abs(np.linalg.eigvalsh(a64)).max())
        assert np.isfinite(w).all() and np.isfinite(v).all(), name
        assert np.abs(w - np.linalg.eigvalsh(a64)).max() <= 2e-6 * scale, name
        assert np.abs(a64 @ v - v * w).max() <= 1e-5 * scale, name
        assert np.abs(v.T @ v - np.eye(n)).max() <= 1e-5, name


def test_svd_cancellations_and_zero_singular_values(gpu):
    """svd of an upper bidiagonal matrix with zero diagonal entries (the QR iteration's
    cancellations: rotations from the left zero the superdiagonal next to them) and of a
    rank-one matrix: U and V orthonormal, singular values within 1e-6 of numpy's in f64, the
    product within 1e-6; never NaN. (With the GPU kernels svd under 256 columns is
    one-sided Jacobi: its U columns for zero singular values are completed, see
    `test_svd_rank_deficient_u_orthonormal`.)"""
    rng = np.random.default_rng(90)
    b = np.diag(rng.standard_normal(120)) + np.diag(rng.standard_normal(119), 1)
    b[50, 50] = b[90, 90] = b[119, 119] = 0
    for a in [b, np.outer(np.arange(150), np.arange(150)) / 1e4]:
        a32 = a.astype(np.float32)
        u, s, vt = on(gpu, lambda a: jnp.linalg.svd(a, full_matrices=False), a32)
        u, s, vt, a64 = (x.astype(np.float64) for x in (u, s, vt, a32))
        scale = np.linalg.svd(a64, compute_uv=False).max()
        assert np.isfinite(u).all() and np.isfinite(s).all() and np.isfinite(vt).all()
        assert np.abs(s - np.linalg.svd(a64, compute_uv=False)).max() <= 1e-6 * scale
        assert np.abs((u * s) @ vt - a64).max() <= 1e-6 * scale
        k = s.shape[0]
        assert np.abs(u.T @ u - np.eye(k)).max() <= 1e-5
        assert np.abs(vt @ vt.T - np.eye(k)).max() <= 1e-5


@pytest.mark.parametrize("shape", [(8, 8), (40, 40), (2, 16, 12), (60, 20), (150, 150)])
def test_svd_rank_deficient_u_orthonormal(gpu, shape):
    """svd with U of rank-deficient and zero matrices: U has orthonormal columns, as LAPACK
    gives (one-sided Jacobi left U's columns for zero singular values zero: a rank-one 8 x 8
    had |U^T U - I| = 1.0 on every adapter, and up to 255 columns on GPUs)."""
    rng = np.random.default_rng(91)
    *batch, m, n = shape
    low = rng.standard_normal((*batch, m, 2)) @ rng.standard_normal((*batch, 2, n))
    # Rank one with exact structure: Jacobi leaves some columns exactly zero.
    outer = np.broadcast_to(np.outer(np.arange(m), np.arange(n)) / 100, shape)
    for a in [outer, low, np.zeros(shape)]:
        a32 = a.astype(np.float32)
        u, s, vt = on(gpu, lambda a: jnp.linalg.svd(a, full_matrices=False), a32)
        u, s, vt = (x.astype(np.float64) for x in (u, s, vt))
        eye = np.broadcast_to(np.eye(n), (*batch, n, n))
        assert np.abs(np.swapaxes(u, -1, -2) @ u - eye).max() <= 1e-5
        assert np.abs(vt @ np.swapaxes(vt, -1, -2) - eye).max() <= 1e-5
        scale = max(1.0, np.abs(a32).max())
        assert np.abs((u * s[..., None, :]) @ vt - a32).max() <= 1e-5 * scale


def sym(shape, seed):
    a = rand(shape, seed=seed)
    return (a + np.swapaxes(a, -1, -2)) / 2


@pytest.mark.parametrize("n", [1, 2, 3, 48, 99, 100])
def test_jacobi_kernels_sizes(gpu, n):
    """The on-device Jacobi kernels (custom_call @wgpu_hlo.eigh / .svd), odd and even n."""
    check_eigh(gpu, sym((n, n), 20 + n), 1e-4)
    check_svd(gpu, rand((n, n), seed=30 + n), 1e-4)
    a = rand((n + 3, n), seed=40 + n)
    s = on(gpu, lambda a: jnp.linalg.svd(a, compute_uv=False), a)
    assert_close(s, on(CPU, lambda a: jnp.linalg.svd(a, compute_uv=False), a), 1e-4)
    # Full U of a tall matrix and the wide case (transposed).
    u, s, vt = on(gpu, jnp.linalg.svd, a)
    assert_close(np.swapaxes(u, -1, -2) @ u, np.eye(n + 3), 1e-3)
    assert_close((u[:, :n] * s) @ vt, a, 1e-3)
    check_svd(gpu, a.T, 1e-4)


def test_jacobi_kernels_batched(gpu):
    check_eigh(gpu, sym((3, 2, 17, 17), 50), 1e-4)
    check_svd(gpu, rand((4, 30, 20), seed=51), 1e-4)


def test_jacobi_kernels_256(gpu):
    check_eigh(gpu, sym((256, 256), 52), 1e-4)
    check_svd(gpu, rand((256, 256), seed=53), 1e-4)


@pytest.mark.parametrize("scale", [1e20, 1e-22])
def test_extreme_magnitudes(gpu, scale):
    """Entries whose squares leave f32's range: the decompositions scale before they square
    (R of `qr` was NaN at 1e20 and 4% off at 1e-22, eigh returned the diagonal at 1e20 on GPU
    kernels, svd's values were inf at 1e20 and 32% off at 1e-22), so results scale with A."""
    a = rand((12, 12), seed=61)
    cases = {
        "qr": (lambda x: jnp.abs(jnp.linalg.qr(x)[1]), a),
        "eigvalsh": (jnp.linalg.eigvalsh, (a + a.T) / 2),
        "svd": (lambda x: jnp.linalg.svd(x, compute_uv=False), a),
    }
    for name, (f, x) in cases.items():
        got = on(gpu, f, (x * scale).astype(np.float32)) / scale
        try:
            assert_close(got, on(CPU, f, x), 1e-5)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_lapack_signs(gpu, mode):
    # QR is unique up to the signs of R's rows; jax cpu and numpy follow LAPACK: a column
    # already zero below the diagonal (the last of a square matrix) is not reflected, and a
    # zero diagonal entry gets a negative R entry. wgpu flipped the last row of R (JAX's own
    # linalg_test, testNumpyQrModes, found it). Empty matrices raised in tracing.
    rng = np.random.default_rng(5)
    cases = [
        rng.standard_normal((3, 3)),
        np.triu(rng.standard_normal((4, 4))),
        np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 9.0]]),
        np.array([[0.0, 1.0], [0.0, 2.0]]),
        rng.standard_normal((5, 3)),
        rng.standard_normal((3, 5)),
        rng.standard_normal((2, 4, 4)),
        np.zeros((2, 0)),
        np.zeros((0, 2)),
    ]
    for a in cases:
        a = a.astype(np.float32)
        f = lambda x: jnp.linalg.qr(x, mode=mode)
        got, want = on(gpu, f, a), on(CPU, f, a)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert g.shape == w.shape, (a.shape, mode)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{a.shape} {mode}")


def test_tall_qr_svd_pinv(gpu):
    # A reduced QR of a tall matrix builds only its k columns of Q (an m x m Q of 20000 rows
    # would be 1.6 GB), and the svd of a tall matrix starts with that QR: Jacobi rounds over
    # columns of 10^5 rows pass the loop bound (JAX's linalg_test testPinv: 400000 x 2).
    a = rand((20000, 3), seed=40)
    q, r = on(gpu, lambda x: jnp.linalg.qr(x), a)
    qc, rc = on(CPU, lambda x: jnp.linalg.qr(x), a)
    assert q.shape == qc.shape and r.shape == rc.shape
    np.testing.assert_allclose(r, rc, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(q, qc, rtol=1e-4, atol=1e-5)
    for f in (jnp.linalg.pinv, lambda x: jnp.linalg.svd(x, compute_uv=False)):
        got, want = on(gpu, f, a), on(CPU, f, a)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("shape", [(1000, 50), (200, 120)])
def test_pinv_accuracy(gpu, shape):
    # pinv = V S^-1 U^T is as accurate as U is orthogonal: with Jacobi's old m-epsilon cosine
    # tolerance, 2.9e-4 and 6.9e-5 of |pinv| from float64 (jax cpu: 9e-7, 2e-6).
    a = rand(shape, seed=41)
    want = np.linalg.pinv(a.astype(np.float64))
    got = on(gpu, jnp.linalg.pinv, a)
    assert np.abs(got - want).max() < 1e-5 * np.abs(want).max()


def test_cholesky_tiled(gpu):
    # Below 2048 columns cholesky is one `stablehlo.cholesky`, planned as a tiled
    # factorization (blocks of 64 columns: diagonal block, panel below it, update of the
    # trailing lower triangle): batched, upper, n not a multiple of 64, and matrices that are
    # not positive definite in the first, a middle or the last (narrower) block, which are
    # NaN as a whole, the others of the batch untouched.
    a = spd(600, (2,), seed=7)
    f = lambda a: jsl.cholesky(a, lower=False)
    assert_close(on(gpu, f, a), on(CPU, f, a), 1e-5)
    for pivot in (30, 270, 570):
        bad = spd(600, (2,), seed=8)
        bad[1, pivot, pivot] = -10.0
        g, c = on(gpu, jnp.linalg.cholesky, bad), on(CPU, jnp.linalg.cholesky, bad)
        assert np.isnan(c[1][np.tril_indices(600)]).all() and not np.isnan(c[0]).any()
        np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
        assert_close(g[0], c[0], 1e-5)
    # Block edges, and many small matrices (one workgroup each per launch).
    for n, batch in [(63, ()), (64, ()), (65, ()), (128, ()), (129, (3,)), (70, (200,))]:
        a = spd(n, batch, seed=n)
        assert_close(on(gpu, jnp.linalg.cholesky, a), on(CPU, jnp.linalg.cholesky, a), 1e-5)


@pytest.mark.parametrize("plan", ["", "tiled"])
def test_cholesky_small(gpu, monkeypatch, plan):
    # Up to 64 columns on CPU adapters with subgroups, one kernel factors each matrix in one
    # subgroup (`WGPU_HLO_CHOLESKY=tiled`: the tiled plan's init, diagonal and finish
    # kernels; the same bits where n is a multiple of the lanes). Sizes around the lanes' 8 and
    # the 64-column limit, batched, upper, and matrices that are not positive definite (a
    # late pivot, a NaN) in a batch: NaN as a whole, their neighbours untouched.
    monkeypatch.setenv("WGPU_HLO_CHOLESKY", plan)
    for n, batch in [(1, ()), (2, ()), (7, ()), (8, ()), (9, (2,)), (33, ()), (48, ()), (50, (3,)),
                     (63, ()), (64, ()), (16, (300,))]:
        a = spd(n, batch, seed=n)
        chol = lambda a: jnp.linalg.cholesky(a)
        assert_close(on(gpu, chol, a), on(CPU, chol, a), 1e-5)
    a = spd(40, (2,), seed=3)
    upper = lambda a: jsl.cholesky(a, lower=False)
    assert_close(on(gpu, upper, a), on(CPU, upper, a), 1e-5)
    bad = spd(40, (4,), seed=4)
    bad[1, 39, 39] = -10.0
    bad[2, 5, 0] = bad[2, 0, 5] = np.nan
    for f in (lambda a: jnp.linalg.cholesky(a), lambda a: jsl.cholesky(a, lower=False)):
        g, c = on(gpu, f, bad), on(CPU, f, bad)
        assert np.isnan(c[1]).any() and np.isnan(c[2]).any()
        # A NaN pivot fails as LAPACK's potrf has it (its whole triangle NaN); XLA's cpu lets
        # the NaN spread through the factor only.
        assert np.isnan(g[2]).sum() == 40 * 41 // 2 and np.isnan(c[2]).any()
        np.testing.assert_array_equal(np.isnan(g[[0, 1, 3]]), np.isnan(c[[0, 1, 3]]))
        ok = ~np.isnan(c[[0, 3]])
        assert np.abs(g[[0, 3]][ok] - c[[0, 3]][ok]).max() <= 1e-5 * np.abs(c[[0, 3]][ok]).max()


def test_cholesky_blocked(gpu, monkeypatch):
    # From 2048 columns cholesky runs in column segments of 64-column blocks
    # (`test_cholesky_segments`), n padded to whole blocks with the identity; here from 256
    # (600 makes two segments, of 512 and 128 columns): batched, upper, and matrices that are
    # not positive definite, in either segment, which are NaN as a whole.
    from jax_plugins.wgpu import lowerings

    monkeypatch.setattr(lowerings, "_CHOLESKY_BLOCKED_N", 256)
    a = spd(600, (2,), seed=7)
    f = lambda a: jsl.cholesky(a, lower=False)
    assert_close(on(gpu, f, a), on(CPU, f, a), 1e-5)
    for pivot in (270, 570):
        bad = spd(600, seed=8)
        bad[pivot, pivot] = -10.0
        chol = lambda a: jnp.linalg.cholesky(a)
        g, c = on(gpu, chol, bad), on(CPU, chol, bad)
        assert np.isnan(c).any()
        np.testing.assert_array_equal(np.isnan(g), np.isnan(c))


def test_cholesky_batch_past_the_plan_bytes(gpu, monkeypatch):
    # A batch whose tiled-plan state (factor and transpose) would pass _CHOLESKY_PLAN_BYTES
    # (128 MiB: WebGPU's default binding limit) is factored by segments instead of falling
    # back to a launch per column; here with the limit lowered to 1 MiB.
    from jax_plugins.wgpu import lowerings

    monkeypatch.setattr(lowerings, "_CHOLESKY_PLAN_BYTES", 1 << 20)
    a = spd(300, (2,), seed=12)
    chol = lambda a: jnp.linalg.cholesky(a)
    text = jax.jit(chol).lower(jax.device_put(a, gpu)).as_text()
    assert "stablehlo.while" in text
    assert_close(on(gpu, chol, a), on(CPU, chol, a), 1e-5)


def test_cholesky_segments():
    # Column segments of whole 64-column blocks, at least 8 blocks wide, at most 8 segments,
    # the last one narrower where the blocks do not divide evenly.
    from jax_plugins.wgpu.lowerings import _cholesky_segments

    assert _cholesky_segments(512) == [(0, 512)]
    assert _cholesky_segments(640) == [(0, 512), (512, 640)]
    assert _cholesky_segments(2048) == [(c, c + 512) for c in range(0, 2048, 512)]
    assert _cholesky_segments(9600) == [(c, min(c + 1216, 9600)) for c in range(0, 9600, 1216)]


@slow
def test_cholesky_2000_batched(gpu):
    # The tiled plan (32 blocks of 64 columns, the last narrower), two matrices.
    a = spd(2000, (2,), seed=9)
    assert_close(on(gpu, jnp.linalg.cholesky, a), on(CPU, jnp.linalg.cholesky, a), 1e-5)


def test_geqrf_and_householder_product(gpu):
    # lax.linalg.geqrf (LAPACK's compact form: R above, unit-leading reflectors below, taus)
    # and householder_product (orgqr) were refused as UNIMPLEMENTED custom calls; they back
    # slogdet(method="qr"), scipy's qr_multiply and ormqr.
    from jax._src.lax import linalg as lax_linalg

    rng = np.random.default_rng(9)
    for shape in [(3, 3), (70, 33), (3, 5), (2, 6, 4)]:
        a = rng.standard_normal(shape).astype(np.float32)
        got, want = on(gpu, lax_linalg.geqrf, a), on(CPU, lax_linalg.geqrf, a)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
        if shape[-2] >= shape[-1]:
            f = lambda a: lax_linalg.householder_product(*lax_linalg.geqrf(a))
            np.testing.assert_allclose(on(gpu, f, a), on(CPU, f, a), rtol=1e-4, atol=1e-5)
    # Complex ones run on the host (LAPACK through scipy).
    z = (rng.standard_normal((2, 5, 3)) + 1j * rng.standard_normal((2, 5, 3))).astype(np.complex64)
    f = lambda a: lax_linalg.householder_product(*lax_linalg.geqrf(a))
    np.testing.assert_allclose(on(gpu, f, z), on(CPU, f, z), rtol=1e-5, atol=1e-6)
    a = rand((40, 40), seed=10)
    f = lambda a: jnp.linalg.slogdet(a, method="qr")
    g, c = on(gpu, f, a), on(CPU, f, a)
    assert g[0] == c[0]
    np.testing.assert_allclose(g[1], c[1], rtol=1e-5)


def test_qr_panels_by_kernel(gpu, tmp_path, monkeypatch):
    # Each panel of 32 columns is one `custom_call @wgpu_hlo.householder_panel` (a workgroup
    # runs its columns) instead of ~8 launches a column; LAPACK's signs and its untouched
    # columns (already zero below the diagonal) as before.
    import glob

    tall = rand((300, 200), seed=21)
    tall[:, 40] = 0
    tall[150:, 41] = 0
    wide = rand((70, 300), seed=22)
    wide[:, 3] = 0
    for a in [tall, wide, rand((3, 96, 96), seed=23)]:
        monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
        got = on(gpu, jnp.linalg.qr, a)
        monkeypatch.delenv("WGPU_HLO_DUMP")
        want = on(CPU, jnp.linalg.qr, a)
        for g, w in zip(got, want):
            assert_close(g, w, 2e-4)
    kernels = [open(p).read() for p in glob.glob(str(tmp_path / "*.wgsl"))]
    assert any("householder_panel" in k for k in kernels)
    # Panels taller than the kernel takes keep the loop (JAX's testPinv1: 400000 x 2).
    very_tall = rand((40000, 2), seed=24)
    for g, w in zip(on(gpu, jnp.linalg.qr, very_tall), on(CPU, jnp.linalg.qr, very_tall)):
        assert_close(g, w, 2e-4)
    # The loop of JAX ops the kernel replaces gives the same factors.
    monkeypatch.setenv("WGPU_HLO_QR", "loop")
    loop = on(gpu, jnp.linalg.qr, tall)
    for g, w in zip(loop, on(CPU, jnp.linalg.qr, tall)):
        assert_close(g, w, 2e-4)


STATE_COPY_CASES = {
    # Cholesky's left-looking update reads the transpose of the factored columns: quads of
    # words (n a multiple of 4) or single words (101, 130), batched, upper.
    "cholesky 256": (jnp.linalg.cholesky, lambda: (spd(256, seed=21),)),
    "cholesky 101": (jnp.linalg.cholesky, lambda: (spd(101, seed=22),)),
    "cholesky upper 2x130": (lambda a: jsl.cholesky(a, lower=False),
                             lambda: (spd(130, (2,), seed=23),)),
    # The LU's trailing update reads the block's columns below it and its row right of it.
    "lu 150": (lax.linalg.lu, lambda: (rand((150, 150), seed=24),)),
    "lu 3x97": (lax.linalg.lu, lambda: (rand((3, 97, 97), seed=25),)),
    "lu 100x130": (lax.linalg.lu, lambda: (rand((100, 132), seed=26),)),
    "solve 512": (jnp.linalg.solve, lambda: (rand((512, 512), seed=27), rand((512,), seed=28))),
    # QR's block reflectors read each column (and its old words in the update) from the copy:
    # quads of columns (256), single columns (a width not a multiple of 4), batched.
    "qr 256": (jnp.linalg.qr, lambda: (rand((256, 256), seed=29),)),
    "qr 2x150x102": (jnp.linalg.qr, lambda: (rand((2, 150, 102), seed=30),)),
}


@pytest.mark.parametrize("case", sorted(STATE_COPY_CASES))
def test_updates_read_copies_of_their_state(gpu, case, tmp_path, monkeypatch):
    # On CPU adapters the LU and Cholesky trailing updates load the words they do not write
    # (and the LU's the old words of its tile), QR's block reflectors their columns, from a
    # texture copy of the state made before each launch (`texture_reads::STATE_MARK`): the
    # same words, so the same bits as the storage loads (`WGPU_HLO_STATE_COPIES=0`), and the
    # same results as cpu to rounding.
    f, make = STATE_COPY_CASES[case]
    args = make()
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = on(gpu, lambda *a: f(*a), *args)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    # The kernels that name words to copy (`// state copy: ...`).
    texts = (open(p).read() for p in tmp_path.glob("*.wgsl"))
    wgsl = "".join(t for t in texts if "// state copy: " in t)
    copies = os.environ.get("WGPU_HLO_TEXTURE_READS", "").strip() != "0"
    if case.startswith("qr"):
        # The block reflector's copy holds only the words it updates.
        copies = copies and os.environ.get("WGPU_HLO_COPY_OLD_VALUES", "").strip() != "0"
    # `WGPU_HLO_LU=workgroup` (and `=blocked`'s small panels) factor without update kernels.
    if wgsl or not case.startswith(("lu", "solve")):
        assert ("var out0_copy: texture_2d<u32>" in wgsl) == (cpu_kernel_class(gpu) and copies)
    monkeypatch.setenv("WGPU_HLO_STATE_COPIES", "0")
    plain = on(gpu, lambda *a: f(*a), *args)
    monkeypatch.delenv("WGPU_HLO_STATE_COPIES")
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(plain)):
        np.testing.assert_array_equal(x, y)
    want = on(CPU, f, *args)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        if x.dtype.kind == "f":
            assert_close(x, y, 1e-3 if case.startswith("solve") else 1e-4)
        else:
            np.testing.assert_array_equal(x, y)
