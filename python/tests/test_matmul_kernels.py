"""dot_general kernels on `wgpu` against a float64 host reference: odd sizes (none a multiple
of the tile or the per-thread block), batched, every operand layout (contracting dimension
inner or outer, so each read mode of the vector kernel), a large contraction, and one
product of more than 2^32 multiply-adds (once refused by the tiled kernel)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
from jax import lax


def data(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def run(gpu, f, *args):
    args = [jax.device_put(a, gpu) for a in args]
    return np.asarray(jax.jit(f)(*args))


def check(got, want, k):
    # f32 accumulation over k terms of magnitude <= 1.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(k, 1) ** 0.5 * 4)


@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 1), (7, 7, 7), (33, 9, 65), (65, 33, 7), (129, 65, 33), (1, 129, 65)],
)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_matmul_sizes_and_layouts(gpu, m, k, n, layout):
    a = data((m, k) if layout[0] == "n" else (k, m), 1)
    b = data((k, n) if layout[1] == "n" else (n, k), 2)
    ca = 1 if layout[0] == "n" else 0
    cb = 0 if layout[1] == "n" else 1
    f = lambda x, y: lax.dot_general(x, y, (((ca,), (cb,)), ((), ())))
    an = a if layout[0] == "n" else a.T
    bn = b if layout[1] == "n" else b.T
    check(run(gpu, f, a, b), an.astype(np.float64) @ bn.astype(np.float64), k)


@pytest.mark.parametrize("bsz,m,k,n", [(3, 7, 33, 9), (64, 16, 16, 16), (2, 65, 12, 129)])
def test_batched(gpu, bsz, m, k, n):
    a, b = data((bsz, m, k), 3), data((bsz, k, n), 4)
    want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    check(run(gpu, lambda x, y: x @ y, a, b), want, k)
    # Batch dimension in the middle of the right operand, contracting dimension outermost.
    bt = np.ascontiguousarray(b.transpose(1, 0, 2))
    f = lambda x, y: lax.dot_general(x, y, (((2,), (0,)), ((0,), (1,))))
    check(run(gpu, f, a, bt), want, k)


def test_large_contraction(gpu):
    a, b = data((9, 20000), 5), data((20000, 5), 6)
    check(run(gpu, lambda x, y: x @ y, a, b), a.astype(np.float64) @ b.astype(np.float64), 20000)


def test_more_than_2_pow_32_multiply_adds(gpu):
    m, k, n = 2048, 1028, 2048  # m * n * k > 2^32
    a, b = data((m, k), 7), data((k, n), 8)
    got = run(gpu, lambda x, y: x @ y, a, b)
    rows = np.arange(0, m, 97)
    check(got[rows], a[rows].astype(np.float64) @ b.astype(np.float64), k)


@pytest.mark.parametrize("kernel", ["default", "vec", "subgroup"])
@pytest.mark.parametrize("m,k,n", [(8, 4, 4), (36, 20, 44), (132, 64, 100), (260, 128, 516)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_vec4_layouts_each_kernel(gpu, monkeypatch, kernel, m, k, n, layout):
    """Sizes that are multiples of 4 but not of any tile, so every vec4 read mode (along k or
    along the free dimension, each operand) runs, in the register-blocked kernel (`vec`) and in
    the shared-rows subgroup kernel (the default on CPU adapters with one subgroup size)."""
    if kernel != "default":
        monkeypatch.setenv("WGPU_HLO_DOT", kernel)
    a = data((m, k) if layout[0] == "n" else (k, m), 11)
    b = data((k, n) if layout[1] == "n" else (n, k), 12)
    ca = 1 if layout[0] == "n" else 0
    cb = 0 if layout[1] == "n" else 1
    f = lambda x, y: lax.dot_general(x, y, (((ca,), (cb,)), ((), ())))
    an = a if layout[0] == "n" else a.T
    bn = b if layout[1] == "n" else b.T
    check(run(gpu, f, a, b), an.astype(np.float64) @ bn.astype(np.float64), k)


@pytest.mark.parametrize("kernel", ["default", "subgroup"])
def test_batched_subgroup(gpu, monkeypatch, kernel):
    if kernel != "default":
        monkeypatch.setenv("WGPU_HLO_DOT", kernel)
    for bsz, m, k, n in [(64, 128, 128, 128), (5, 36, 12, 20), (3, 7, 33, 9)]:
        a, b = data((bsz, m, k), 13), data((bsz, k, n), 14)
        want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
        check(run(gpu, lambda x, y: x @ y, a, b), want, k)


def dot_kernel_comments(tmp_path):
    """The first line of each dumped kernel's WGSL (its comment says which emitter made it)."""
    import glob
    import os

    return [open(p).readline() for p in sorted(glob.glob(os.path.join(tmp_path, "*.wgsl")))]


@pytest.mark.parametrize("dtype,out", [("bfloat16", None), ("float16", None),
                                       ("bfloat16", "float32"), ("float16", "float32")])
def test_narrow_float_matmul_runs_the_fast_kernel(gpu, tmp_path, monkeypatch, dtype, out):
    """bf16 and f16 matmuls accumulate in f32 in the same kernels as f32 ones (they once ran
    in the one-thread-per-element loop kernel, 350x slower than f32 on lavapipe); the result
    is rounded once, as on XLA's cpu backend."""
    import jax.numpy as jnp

    m, k, n = 96, 300, 136
    a, b = data((m, k), 15), data((k, n), 16)
    dt = jnp.dtype(dtype)
    pref = None if out is None else jnp.dtype(out)
    f = lambda x, y: jnp.dot(x.astype(dt), y.astype(dt), preferred_element_type=pref)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(gpu, f, a, b)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    assert got.dtype == (dt if out is None else jnp.dtype(out))
    want = a.astype(dt).astype(np.float64) @ b.astype(dt).astype(np.float64)
    if out is None:
        # One rounding to the narrow type at the end.
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    else:
        check(got, want, k)
    # Against cpu: within one rounding of the result type (sums in another order may round
    # the other way).
    cpu = jax.devices("cpu")[0]
    c = np.asarray(jax.jit(f)(jax.device_put(a, cpu), jax.device_put(b, cpu))).astype(np.float32)
    eps = max(float(jnp.finfo(got.dtype).eps), 1e-5)
    np.testing.assert_allclose(got.astype(np.float32), c, rtol=eps, atol=eps * np.abs(c).max())
    dots = [c for c in dot_kernel_comments(tmp_path) if "dot_general" in c]
    assert dots and not any("loop over" in c for c in dots), dots


@pytest.mark.parametrize("dtype,out", [("int32", None), ("uint32", None), ("int8", "int32"),
                                       ("uint8", "int32"), ("int8", None), ("int16", "uint32")])
def test_integer_matmul_runs_the_fast_kernel(gpu, tmp_path, monkeypatch, dtype, out):
    """Integer matmuls (words over their type's whole range, so sums wrap) equal jax cpu's bit
    for bit and run in the vector or tiled kernel: they once ran in the one-thread-per-element
    loop kernel, 150-200x jax cpu on lavapipe at 512^2."""
    import jax.numpy as jnp

    m, k, n = 96, 300, 136
    info = np.iinfo(dtype)
    rng = np.random.default_rng(17)
    a = rng.integers(info.min, info.max, (m, k), dtype=np.int64, endpoint=True).astype(dtype)
    b = rng.integers(info.min, info.max, (k, n), dtype=np.int64, endpoint=True).astype(dtype)
    pref = None if out is None else jnp.dtype(out)
    f = lambda x, y: jnp.dot(x, y, preferred_element_type=pref)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(gpu, f, a, b)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    cpu = jax.devices("cpu")[0]
    want = np.asarray(jax.jit(f)(jax.device_put(a, cpu), jax.device_put(b, cpu)))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    dots = [c for c in dot_kernel_comments(tmp_path) if "dot_general" in c]
    assert dots and not any("loop over" in c for c in dots), dots


def test_bf16_convolution_runs_in_f32(gpu, tmp_path, monkeypatch):
    import jax.numpy as jnp

    x, w = data((4, 14, 14, 16), 17), data((3, 3, 16, 32), 18) / 12
    dn = ("NHWC", "HWIO", "NHWC")
    f = lambda x, w: lax.conv_general_dilated(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                                              (1, 1), "SAME", dimension_numbers=dn)
    got = run(gpu, f, x, w)
    cpu = jax.devices("cpu")[0]
    want = np.asarray(jax.jit(f)(jax.device_put(x, cpu), jax.device_put(w, cpu)))
    assert got.dtype == want.dtype == jnp.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("m,k", [(1, 4), (5, 8), (37, 132), (256, 1000), (1024, 4096), (8, 3)])
@pytest.mark.parametrize("layout", ["n", "t"])
def test_matrix_vector(gpu, m, k, layout):
    # The matrix-vector kernels (`dot_gemv`): A @ v with A's contracting dimension contiguous
    # (lanes along k) or its rows contiguous (a thread per 16 results), v @ A the same two
    # ways, and sizes where neither applies (k < 4, rows not a multiple of 4: other kernels).
    a = data((m, k) if layout == "n" else (k, m), 5)
    an = (a if layout == "n" else a.T).astype(np.float64)
    v, u = data((k,), 6), data((m,), 7)
    ca = 1 if layout == "n" else 0
    mv = lambda x, y: lax.dot_general(x, y, (((ca,), (0,)), ((), ())))
    vm = lambda y, x: lax.dot_general(y, x, (((0,), (1 - ca,)), ((), ())))
    check(run(gpu, mv, a, v), an @ v.astype(np.float64), k)
    check(run(gpu, vm, u, a), u.astype(np.float64) @ an, m)


@pytest.mark.parametrize("bsz,m,k", [(200, 64, 64), (3, 36, 20), (5, 1, 16)])
def test_batched_matrix_vector(gpu, bsz, m, k):
    # vmap'd matrix-vector products, batch of dot products (m = 1), the vector on either side,
    # and two contracting dimensions.
    a, v = data((bsz, m, k), 8), data((bsz, k), 9)
    a64, v64 = a.astype(np.float64), v.astype(np.float64)
    check(run(gpu, jax.vmap(lambda x, y: x @ y), a, v), np.einsum("bmk,bk->bm", a64, v64), k)
    check(run(gpu, jax.vmap(lambda y, x: y @ x.T), v, a), np.einsum("bk,bmk->bm", v64, a64), k)
    w = data((bsz, m, k // 4, 4), 10)
    check(run(gpu, lambda x, y: jax.numpy.einsum("bmij,bij->bm", x, y), w, v.reshape(bsz, k // 4, 4)),
          np.einsum("bmij,bij->bm", w.astype(np.float64), v64.reshape(bsz, k // 4, 4)), k)


@pytest.mark.parametrize("m,k,n,lanes_cols", [(504, 128, 512, 4), (512, 512, 256, 8)])
def test_mid_size_products_take_the_narrow_tile(gpu, tmp_path, monkeypatch, m, k, n, lanes_cols):
    """Below 2^25 multiply-adds the CPU adapters' shared-rows tile keeps one vec4 of columns
    per lane: as fast there, and half the driver's compile, which a cold first call waits
    for (a transformer step's first call 17.4 -> 7.5 s on lavapipe with the Mesa shader cache
    off). Larger products keep the wider tile."""
    from conftest import cpu_kernel_class

    a, b = data((m, k), 21), data((k, n), 22)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(gpu, lambda x, y: x @ y, a, b)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    check(got, a.astype(np.float64) @ b.astype(np.float64), k)
    if cpu_kernel_class(gpu):
        dots = [c for c in dot_kernel_comments(tmp_path) if "shared-rows" in c]
        assert dots and all(f"{lanes_cols} columns per lane" in c for c in dots), dots


@pytest.mark.parametrize(
    "bsz,m,k,n,shared",
    [(1, 4096, 1024, 8, False), (512, 64, 8, 8, False), (64, 128, 64, 16, False),
     (1, 4096, 256, 24, True)],
)
def test_narrow_products_leave_the_shared_rows(gpu, tmp_path, monkeypatch, bsz, m, k, n, shared):
    """A shared-rows tile is at least 4 columns by 8 lanes wide: products of 16 columns or
    fewer left half of it or more empty (512 heads of 64x8 @ 8x8: 4.3 ms, 1.1 in the
    register-blocked kernel on lavapipe) and take the register-blocked kernel on CPU
    adapters; 24 columns keep the shared rows."""
    from conftest import cpu_kernel_class

    a, b = data((bsz, m, k), 23), data((bsz, k, n), 24)
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    got = run(gpu, lambda x, y: x @ y, a, b)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    check(got, a.astype(np.float64) @ b.astype(np.float64), k)
    if cpu_kernel_class(gpu):
        dots = [c for c in dot_kernel_comments(tmp_path) if "dot_general" in c]
        assert dots and all(("shared-rows" in c) == shared for c in dots), dots
