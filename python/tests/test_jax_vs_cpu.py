"""Jitted JAX functions on `wgpu` against JAX's own `cpu` backend in the same process."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax


CPU = jax.devices("cpu")[0]


def on(device, f, *args, **kw):
    args = [jax.device_put(a, device) for a in args]
    out = jax.jit(f, **kw)(*args)
    return jax.tree_util.tree_map(np.asarray, out)


def close(a, b, dtype=None):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    dt = a.dtype
    if dt.kind in "biu":
        np.testing.assert_array_equal(a, b)
        return
    tol = {2: 1e-2, 4: 2e-5, 8: 1e-12}.get(dt.itemsize, 1e-5)
    if str(dt) == "bfloat16":
        tol = 2e-2
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)


def compare(gpu, f, *args, **kw):
    g = on(gpu, f, *args, **kw)
    c = on(CPU, f, *args, **kw)
    jax.tree_util.tree_map(close, g, c)
    return g


def rand(shape, dtype, seed=0, lo=-3, hi=3):
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


FLOATS = ["float32", "float16", "bfloat16"]
INTS = ["int8", "int16", "int32", "uint8", "uint16", "uint32"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "fn",
    [jnp.abs, jnp.negative, jnp.exp, jnp.tanh, jnp.sin, jnp.cos, jnp.floor, jnp.sign,
     lambda x: jnp.log(jnp.abs(x) + 1), lambda x: jnp.sqrt(jnp.abs(x)), jax.nn.sigmoid,
     lambda x: x * x + 2 * x - 1, lambda x: jnp.maximum(x, 0.5), jnp.round],
    ids=["abs", "neg", "exp", "tanh", "sin", "cos", "floor", "sign", "log", "sqrt", "sigmoid",
         "poly", "max", "round"],
)
def test_float_elementwise(gpu, dtype, fn):
    compare(gpu, fn, rand((7, 33), dtype))


@pytest.mark.parametrize("dtype", INTS)
def test_int_elementwise(gpu, dtype):
    a, b = rand((5, 17), dtype, 1), rand((5, 17), dtype, 2)
    b = np.where(b == 0, 1, b).astype(dtype)
    compare(gpu, lambda x, y: (x + y, x * y, x - y, x // y, x % y, jnp.maximum(x, y),
                               x & y, x | y, x ^ y, x < y, x == y), a, b)


def test_bool_ops(gpu):
    a, b = rand((64,), "bool", 1), rand((64,), "bool", 2)
    compare(gpu, lambda x, y: (x & y, x | y, ~x, x ^ y, jnp.where(x, 1.0, 2.0)), a, b)


def test_64_bit_types(gpu):
    with jax.enable_x64(True):
        a = rand((6, 9), "float64")
        i = rand((6, 9), "int64")
        compare(gpu, lambda x, y: (jnp.exp(x) * 2, jnp.sin(x), y * 3 + 1, y.astype(jnp.float64) + x,
                                   x.astype(jnp.int64)), a, i)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_reductions(gpu, dtype):
    x = rand((13, 29, 5), dtype)
    compare(gpu, lambda x: (x.sum(), x.sum(0), x.sum((1, 2)), x.max(1), x.min(2),
                            jnp.argmax(x, 1), jnp.argmin(x, 0)), x)


def test_mean_var(gpu):
    x = rand((64, 100), "float32")
    compare(gpu, lambda x: (x.mean(1), x.var(0), jnp.linalg.norm(x, axis=1)), x)


def test_dot_general(gpu):
    a, b = rand((4, 33, 65), "float32", 1), rand((4, 65, 70), "float32", 2)
    compare(gpu, lambda a, b: (a @ b, jnp.einsum("bij,bjk->bki", a, b),
                               jnp.einsum("bij,bik->jk", a, a[:, :, :16])), a, b)


def test_matmul_int_and_half(gpu):
    compare(gpu, lambda a, b: a @ b, rand((8, 16), "int32"), rand((16, 4), "int32"))
    compare(gpu, lambda a, b: a @ b, rand((8, 16), "float16", lo=-1, hi=1),
            rand((16, 4), "float16", lo=-1, hi=1))


def test_shapes(gpu):
    x = rand((4, 6, 8), "float32")
    compare(gpu, lambda x: (x.reshape(24, 8), x.transpose(2, 0, 1), x[1:3, ::2, 5:],
                            jnp.concatenate([x, x * 2], axis=1), jnp.pad(x, ((1, 2), (0, 0), (3, 0))),
                            x[::-1], jnp.broadcast_to(x[:, :1, :], (4, 6, 8)) + x,
                            x[:, None, :, :] * x[None, :, :1, :1]), x)


def test_where_and_clip(gpu):
    x = rand((100,), "float32")
    compare(gpu, lambda x: (jnp.where(x > 0, x, -x * 2), jnp.clip(x, -1, 1)), x)


def test_nn(gpu):
    x = rand((16, 50), "float32")
    compare(gpu, lambda x: (jax.nn.relu(x), jax.nn.gelu(x), jax.nn.softmax(x, axis=-1),
                            jax.nn.log_softmax(x, axis=-1), jax.nn.silu(x)), x)


def mlp_loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)


def mlp_params():
    k = jax.random.PRNGKey(0)
    sizes = [8, 32, 16, 4]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        k, sk = jax.random.split(k)
        params.append((np.asarray(jax.random.normal(sk, (a, b), jnp.float32)) * 0.3,
                       np.zeros((b,), np.float32)))
    return params


def test_value_and_grad_mlp(gpu):
    params = mlp_params()
    x, y = rand((64, 8), "float32", 3), rand((64, 4), "float32", 4)
    f = jax.jit(jax.value_and_grad(mlp_loss))
    pg = jax.device_put(params, gpu)
    lg, gg = f(pg, jax.device_put(x, gpu), jax.device_put(y, gpu))
    lc, gc = f(jax.device_put(params, CPU), x, y)
    close(np.asarray(lg), np.asarray(lc))
    jax.tree_util.tree_map(lambda a, b: close(np.asarray(a), np.asarray(b)), gg, gc)


def test_training_steps_match_cpu(gpu):
    @jax.jit
    def step(params, x, y):
        loss, g = jax.value_and_grad(mlp_loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g), loss

    x, y = rand((64, 8), "float32", 3), rand((64, 4), "float32", 4)
    losses = {}
    for dev in (gpu, CPU):
        p = jax.device_put(mlp_params(), dev)
        xd, yd = jax.device_put(x, dev), jax.device_put(y, dev)
        ls = []
        for _ in range(5):
            p, l = step(p, xd, yd)
            ls.append(float(l))
        losses[dev.platform] = ls
    np.testing.assert_allclose(losses["wgpu"], losses["cpu"], rtol=1e-4)
    assert losses["wgpu"][-1] < losses["wgpu"][0]


def test_random(gpu):
    key = jax.random.PRNGKey(7)
    g = on(gpu, lambda k: (jax.random.normal(k, (100,)), jax.random.uniform(k, (3, 5)),
                           jax.random.randint(k, (10,), 0, 50), jax.random.bernoulli(k, 0.3, (20,))),
           key)
    c = on(CPU, lambda k: (jax.random.normal(k, (100,)), jax.random.uniform(k, (3, 5)),
                           jax.random.randint(k, (10,), 0, 50), jax.random.bernoulli(k, 0.3, (20,))),
           key)
    jax.tree_util.tree_map(close, g, c)


def test_control_flow(gpu):
    def f(x):
        a = lax.fori_loop(0, 10, lambda i, v: v * 1.1 + i, x)
        b = lax.while_loop(lambda v: v[0] < 100, lambda v: v * 2, x + 1)
        c = lax.cond(x.sum() > 0, lambda v: v + 1, lambda v: v - 1, x)
        d = lax.switch(2, [lambda v: v, lambda v: v * 2, lambda v: v * 3], x)
        return a, b, c, d

    compare(gpu, f, np.array([1.0, 2.0, 3.0], np.float32))


def test_data_dependent_loop(gpu):
    def collatz_steps(n):
        def body(s):
            n, k = s
            return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), k + 1
        return lax.while_loop(lambda s: s[0] != 1, body, (n, 0))[1]

    compare(gpu, collatz_steps, np.int32(27))


ALL_DTYPES = ["float32", "float16", "bfloat16", "int8", "int16", "int32", "uint8", "uint16",
              "uint32", "bool"]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 3), (5, 7)])
def test_round_trip(gpu, dtype, shape):
    x = rand(shape, dtype)
    d = jax.device_put(x, gpu)
    assert d.devices() == {gpu}
    back = np.asarray(jax.device_get(d))
    assert back.dtype == x.dtype and back.shape == x.shape
    np.testing.assert_array_equal(back, x)


def test_round_trip_64_bit(gpu):
    with jax.enable_x64(True):
        for dtype in ["float64", "int64", "uint64"]:
            x = rand((4, 3), dtype)
            np.testing.assert_array_equal(np.asarray(jax.device_put(x, gpu)), x)


def test_donation(gpu):
    f = jax.jit(lambda x, y: (x + y, y * 2), donate_argnums=(0,))
    x = jax.device_put(np.ones((256,), np.float32), gpu)
    y = jax.device_put(np.arange(256, dtype=np.float32), gpu)
    a, b = f(x, y)
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(a), np.arange(256) + 1)
    np.testing.assert_array_equal(np.asarray(b), np.arange(256) * 2)


def test_many_in_flight(gpu):
    f = jax.jit(lambda x, i: jnp.sin(x) * i)
    x = jax.device_put(np.linspace(0, 1, 1000, dtype=np.float32), gpu)
    outs = [f(x, np.float32(i)) for i in range(50)]
    jax.block_until_ready(outs)
    for i, o in enumerate(outs):
        np.testing.assert_allclose(np.asarray(o), np.sin(np.linspace(0, 1, 1000)) * i, rtol=1e-5,
                                   atol=1e-6)


def test_unsupported_op_raises(gpu):
    # A custom call nobody implements: a Python exception naming it, and the process goes on.
    x = jax.device_put(np.ones((4,), np.float32), gpu)
    f = lambda x: jax.ffi.ffi_call("my_missing_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    with pytest.raises(Exception) as e:
        jax.jit(f)(x).block_until_ready()
    assert "UNIMPLEMENTED" in str(e.value) and "my_missing_kernel" in str(e.value)
    assert float(jax.jit(lambda x: x.sum())(x)) == 4.0


def _fft_cases(shape, cdt, rdt, seed):
    # Every transform type along the last axis, along the first, and over all axes.
    rng = np.random.default_rng(seed)
    n = shape[-1]
    z = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(cdt)
    x = z.real.copy().astype(rdt)
    h = z[..., : n // 2 + 1]
    fs = lambda z, x, h: (jnp.fft.fft(z), jnp.fft.ifft(z), jnp.fft.rfft(x),
                          jnp.fft.irfft(h, n=n), jnp.fft.fft(z, axis=0), jnp.fft.fftn(z),
                          jnp.fft.irfftn(h, s=shape), jnp.fft.rfftn(x))
    return fs, (z, x, h)


def _fft_check(gpu, shape, tol, cdt=np.complex64, rdt=np.float32, seed=17):
    fs, args = _fft_cases(shape, cdt, rdt, seed)
    g, c = on(gpu, fs, *args), on(CPU, fs, *args)
    for k, (a, b) in enumerate(zip(g, c)):
        assert a.dtype == b.dtype and a.shape == b.shape, (shape, k)
        err = float(np.abs(a - b).max()) / max(1.0, float(np.abs(b).max()))
        assert err < tol, (shape, k, err)


@pytest.mark.parametrize("shape", [
    (3, 97),          # a prime in registers
    (3, 100), (2, 1000),  # mixed radices
    (4, 243), (37, 5), (3, 272),  # 3^5; short lines in many rows; 17 * 16
    (2, 131072),      # 2^17: five passes
    (1, 1009), (2, 2018), (3, 134),  # Bluestein (a prime factor over 64)
    (40009,),         # Bluestein with the chirp phase in u32 Horner steps
    (5, 1), (67, 3, 4), (2, 24, 40),  # length-1 axes, Bluestein over the first axis, 2-d
])
def test_fft_passes(gpu, shape):
    # Stockham passes (radices up to 16 and primes up to 64 in registers) and Bluestein's
    # convolution, against jax cpu.
    _fft_check(gpu, shape, 2e-6)


def test_fft_passes_f64(gpu):
    with jax.enable_x64(True):
        for shape in [(3, 97), (2, 1000), (1, 1009), (40009,)]:
            _fft_check(gpu, shape, 1e-12, np.complex128, np.float64)


def test_fft_summed_prime_pass(gpu, monkeypatch):
    # With Bluestein off, a prime factor over 64 is a pass that sums p terms per element.
    monkeypatch.setenv("WGPU_HLO_FFT_BLUESTEIN", "0")
    _fft_check(gpu, (2, 2 * 1013), 1e-5)


def test_bitcast_between_widths(gpu):
    x = rand((3, 8), "float32", 8)
    compare(gpu, lambda x: (lax.bitcast_convert_type(x, jnp.uint8),
                            lax.bitcast_convert_type(x, jnp.int16),
                            lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint8),
                                                     jnp.float32),
                            lax.bitcast_convert_type(x.astype(jnp.float16), jnp.int8),
                            x.view(jnp.uint16), x.view(jnp.complex64)), x)


def test_fft(gpu):
    x, y = rand((3, 64), "float32", 1), rand((3, 64), "float32", 2)
    z = (x + 1j * y).astype(np.complex64)
    g = on(gpu, lambda z, x: (jnp.fft.fft(z), jnp.fft.ifft(z), jnp.fft.rfft(x), jnp.fft.irfft(z),
                             jnp.fft.fft2(z.reshape(3, 8, 8)), jnp.fft.rfftn(x.reshape(3, 4, 16))),
           z, x)
    c = on(CPU, lambda z, x: (jnp.fft.fft(z), jnp.fft.ifft(z), jnp.fft.rfft(x), jnp.fft.irfft(z),
                             jnp.fft.fft2(z.reshape(3, 8, 8)), jnp.fft.rfftn(x.reshape(3, 4, 16))),
           z, x)
    for a, b in zip(g, c):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def test_complex_square_and_tan_at_the_extremes(gpu):
    # JAX's own lax_test testSuccessOnComplexPlane_{square,tan}: jaxlib expands square's
    # imaginary part as 2 * (re * im), which Mesa rewrote to im * (re + re) (inf for
    # re = FLT_MAX, 1e-45 where the product underflows to 0); tan(-inf + y i) gave NaN + 1i
    # (C99: NaN + NaN i).
    big, tiny = np.float32(3.4028234663852886e38), np.float32(1.1754943508222875e-38)
    z = np.array([big + 1.0202490673854366e-15j, big + tiny * 1j, tiny + 4.517187335295603e-08j,
                  2.3043281796057088e-23 + 2.3043281796057088e-23j, 1.5 - 2.5j], np.complex64)
    g, c = on(gpu, jnp.square, z), on(CPU, jnp.square, z)
    np.testing.assert_array_equal(g, c)
    w = np.array([-np.inf + 1.7e23j, -np.inf + 88550680j, np.inf - 2.0j, 0.5 + 0.25j], np.complex64)
    g, c = on(gpu, jnp.tan, w), on(CPU, jnp.tan, w)
    assert np.array_equal(np.isnan(g.real), np.isnan(c.real)), (g, c)
    assert np.array_equal(np.isnan(g.imag), np.isnan(c.imag)), (g, c)
    ok = ~np.isnan(c)
    np.testing.assert_allclose(g[ok], c[ok], rtol=2e-6)


@pytest.mark.parametrize("name,fn", [
    ("cumsum", lambda x: jnp.cumsum(x, axis=0)),
    ("sort", lambda x: jnp.sort(x, axis=1)),
    ("argsort", lambda x: jnp.argsort(x, axis=0)),
    ("top_k", lambda x: lax.top_k(x, 3)),
    ("gather", lambda x: x[jnp.array([2, 0, 1])]),
    ("scatter", lambda x: x.at[jnp.array([0, 2])].add(1.0)),
    ("conv", lambda x: lax.conv(x[None, None], jnp.ones((1, 1, 2, 2), x.dtype), (1, 1), "SAME")),
    ("max_pool", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID")),
])
def test_ops_of_the_coverage_issue(gpu, name, fn):
    compare(gpu, fn, rand((4, 5), "float32"))


def test_scatter_many_windows(gpu):
    # Over 64 windows indexed along an inserted dimension: windows sorted by index first;
    # duplicates and out-of-range indices must behave exactly as on cpu (order kept).
    rng = np.random.default_rng(11)
    tab = rand((300, 8), "float32", 12)
    idx = rng.integers(-3, 303, 2000).astype(np.int32)
    upd = rand((2000, 8), "float32", 13)
    compare(gpu, lambda t, i, u: (t.at[i].add(u), t.at[i].set(u), t.at[i].min(u),
                                  jax.grad(lambda t: jnp.sum(jnp.tanh(t[i]) * u))(t)),
            tab, idx, upd)


def test_long_prefix_scans(gpu):
    # jnp.cumsum & co. lower to a reduce_window spanning the whole axis: over 64 elements the
    # compiler scans in three O(n) kernels instead of evaluating every window.
    x = rand((3, 1000), "float32", 14)
    xi = rand((500, 3), "int32", 15)
    compare(gpu, lambda x: (jnp.cumsum(x, axis=1), lax.cumsum(x, axis=1, reverse=True),
                            lax.cummax(x, axis=1), lax.cummin(x, axis=1, reverse=True),
                            jnp.cumprod(1 + x * 1e-3, axis=1), lax.cumlogsumexp(x, axis=1),
                            jnp.cumsum(x.reshape(3, 100, 10), axis=1)), x)
    compare(gpu, lambda x: jnp.cumsum(x, axis=0), xi)


def test_long_cumsum_is_as_accurate_as_cpu(gpu):
    # A float sum rounds at the size of its running total: the scan adds each element to a sum
    # local to its chunk and writes prefix + local, so a long cumsum is not a chain of 4M
    # roundings at the total's size. Measured against the exact sums: 6.8e-3 off when each
    # chunk continued from its prefix, 1.5e-3 now, jax cpu 5.3e-4.
    x = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
    exact = np.cumsum(x.astype(np.float64))
    errs = [np.max(np.abs(on(d, jnp.cumsum, x).astype(np.float64) - exact)) for d in (gpu, CPU)]
    assert errs[0] <= 4 * errs[1], errs
    rows = rand((8, 300000), "float32", 16)
    exact = np.cumsum(rows[:, ::-1].astype(np.float64), axis=1)[:, ::-1]
    errs = [np.max(np.abs(on(d, lambda r: lax.cumsum(r, axis=1, reverse=True), rows) - exact))
            for d in (gpu, CPU)]
    assert errs[0] <= 4 * errs[1], errs


def test_dynamic_update_slice_in_place(gpu):
    # Updates of a slice of a large buffer run in place when nothing else needs the old buffer
    # (loop-carried state, lax.scan outputs) and on a copy otherwise: every case must keep the
    # values it reads.
    a = rand((100, 64), "float32", 16)
    compare(gpu, lambda a: lax.fori_loop(0, 100, lambda i, c: c.at[i].set(c[i] * 2 + c[(i + 1) % 100]),
                                         a), a)
    compare(gpu, lambda a: (a.at[3].set(0.0), a), a)
    compare(gpu, lambda a: (lax.dynamic_update_slice(a, jnp.ones((1, 64)), (5, 0)),
                            lax.dynamic_update_slice(a, jnp.zeros((2, 64)), (7, 0)),
                            lax.dynamic_update_slice(a, jnp.ones((10, 64)), (95, 3))), a)
    compare(gpu, lambda a: lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(64), a), a)
    compare(gpu, lambda a: lax.fori_loop(0, 50, lambda i, c: (c[0].at[i].set(c[1][i]), c[0]),
                                         (a, a * 2)), a)
    compare(gpu, lambda a: lax.while_loop(lambda c: c[0] < 60,
                                          lambda c: (c[0] + 1, c[1].at[c[0]].add(1.0)), (0, a))[1], a)
    # Scatters with non-overlapping windows (x.at[i].set/add/mul) take the same path.
    compare(gpu, lambda a: (lax.fori_loop(0, 100, lambda i, c: c.at[i].set(c[i] * 2), a),
                            lax.fori_loop(0, 64, lambda i, c: c.at[:, i].add(1.0), a),
                            a.at[jnp.arange(0, 100, 7)].set(0.0, unique_indices=True),
                            a.at[150].set(1.0), a.at[5, 7].mul(3.0), a.at[2, 3].set(9.0), a), a)


def test_blocked_triangular_solves(gpu):
    # 256+ rows and 32+ right-hand sides solve by blocks (the plugin's rule): every side,
    # triangle, transpose and unit diagonal, batched, with NaNs in the triangle (and diagonal)
    # the solve must not read.
    import itertools

    k, nrhs = 260, 40
    rng = np.random.default_rng(21)
    a = (rng.standard_normal((2, k, k)) / np.sqrt(k) + 2 * np.eye(k)).astype(np.float32)
    for left, lower, trans, unit in itertools.product([True, False], repeat=4):
        aa = a.copy()
        r, c = np.triu_indices(k, 1) if lower else np.tril_indices(k, -1)
        aa[:, r, c] = np.nan
        if unit:
            aa[:, np.arange(k), np.arange(k)] = np.nan
        b = rng.standard_normal((2, k, nrhs) if left else (2, nrhs, k)).astype(np.float32)
        g = on(gpu, lambda a, b: lax.linalg.triangular_solve(
            a, b, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit), aa, b)
        want = on(CPU, lambda a, b: lax.linalg.triangular_solve(
            a, b, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit), aa, b)
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=f"left={left} lower={lower} T={trans} unit={unit}")


def test_sorted_scatters_fold_runs_in_place(gpu):
    # More than 64 windows: sorted by index, then each run of equal indices folded into the
    # input where it lies, in the original order. Embedding gradients with repeated ids, points
    # placed by two indices (the gradient of jnp.diag), dropped out-of-range indices, other
    # combiners, and scatter-add into zeros plus a dense term (rewritten to add into it).
    rng = np.random.default_rng(5)
    table = rand((500, 24), "float32", 12)
    ids = rng.integers(0, 40, size=(300,)).astype(np.int32)
    ids[::11] = -2
    ids[::13] = 600
    rows = rand((300, 24), "float32", 13)
    compare(gpu, lambda t, i, r: (t.at[i].add(r, mode="drop"), t.at[i].max(r, mode="drop"),
                                  t.at[i].multiply(r * 0.1 + 1, mode="drop"),
                                  jnp.zeros_like(t).at[i].add(r, mode="drop") + t * 2),
            table, ids, rows)
    compare(gpu, lambda t, i, r: t.at[i].add(r, mode="drop"), (table * 50).astype(np.int32), ids,
            (rows * 50).astype(np.int32))
    ii = rng.integers(0, 40, size=(400,)).astype(np.int32)
    jj = rng.integers(0, 30, size=(400,)).astype(np.int32)
    ii[::17] = -1
    jj[::23] = 31
    vals = rand((400,), "float32", 14)
    compare(gpu, lambda t, i, j, v: (t.at[i, j].add(v, mode="drop"),
                                     jnp.zeros((40, 30, 5)).at[i, j].add(v[:, None] * jnp.arange(5.0),
                                                                       mode="drop")),
            table[:40, :30], ii, jj, vals)
    compare(gpu, jax.grad(lambda a: jnp.log(jnp.diag(a) ** 2 + 1).sum()), rand((200, 200), "float32", 15))


def test_radix_sorted_scatters(gpu):
    # 20000 windows: past the one-workgroup sort, so the windows sort by a radix sort (indices
    # out of range on both sides, many repeats). Every combiner keeps the updates' order.
    rng = np.random.default_rng(9)
    n = 20000
    ids = rng.integers(-50, 1100, n).astype(np.int32)
    points = rng.integers(0, 40, (n, 2)).astype(np.int32)
    u = rng.standard_normal(n).astype(np.float32)
    rows = rng.standard_normal((n, 8)).astype(np.float32)
    base = rng.standard_normal(1000).astype(np.float32)
    table = rng.standard_normal((1000, 8)).astype(np.float32)
    grid = rng.standard_normal((40, 40)).astype(np.float32)
    cases = [
        (lambda b, i, u: b.at[i].add(u, mode="drop"), (base, ids, u)),
        (lambda b, i, u: b.at[i].set(u, mode="drop"), (base, ids, u)),
        (lambda b, i, u: b.at[i].max(u, mode="drop"), (base, ids, u)),
        (lambda b, i, u: b.at[i].add(u, mode="clip"), (base, ids, u)),
        (lambda t, i, r: t.at[i].add(r, mode="drop"), (table, ids, rows)),
        (lambda t, i, r: t.at[i].set(r, mode="drop"), (table, ids, rows)),
        (lambda g, i, u: g.at[i[:, 0], i[:, 1]].add(u), (grid, points, u)),
        (lambda g, i, u: g.at[i[:, 0], i[:, 1]].set(u), (grid, points, u)),
        (lambda u, i: jax.ops.segment_sum(u, jnp.clip(i, 0, 999), 1000), (u, ids)),
        (lambda i: jnp.bincount(i % 5000, length=5000), (np.abs(ids) * 7919,)),
    ]
    for k, (f, args) in enumerate(cases):
        np.testing.assert_allclose(on(gpu, f, *args), on(CPU, f, *args), rtol=1e-5,
                                   atol=1e-5, err_msg=f"case {k}")
    # More windows than an invocation may loop over, runs of thousands: adds fold in place by
    # chunks of sorted positions (partial sums in another order: rounding differs).
    n = 100000
    ids = rng.integers(0, 50, n).astype(np.int32)
    u = rng.standard_normal(n).astype(np.float32)
    rows = rng.standard_normal((n, 3)).astype(np.float32)
    cases = [
        (lambda u, i: jax.ops.segment_sum(u, i, 50), (u, ids)),
        (lambda t, i, r: t.at[i].add(r), (table[:50, :3], ids, rows)),
        (lambda i: jnp.bincount(i, length=50), (ids,)),
    ]
    for k, (f, args) in enumerate(cases):
        want = on(CPU, f, *args)
        np.testing.assert_allclose(on(gpu, f, *args), want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max(), err_msg=f"long case {k}")


def test_sort_long_rows(gpu):
    # Rows over 256 elements take the bitonic network (stable, NaNs last like XLA's).
    x = rand((3, 1000), "float32", 9)
    x[0, ::7] = np.nan
    xi = rand((700, 3), "int32", 10)
    compare(gpu, lambda x: (jnp.sort(x, axis=1), jnp.argsort(x[1:], axis=1, stable=True),
                            lax.top_k(x[1:], 5), lax.sort((x[1], x[2]), num_keys=1)), x)
    compare(gpu, lambda x: (jnp.sort(x, axis=0), jnp.argsort(x, axis=0, stable=True),
                            jnp.sort(x.astype(jnp.int8), axis=0)), xi)
    # Rows of 5000 (padded to 8192): global stages for partners 4096 or more apart (2048 with
    # two operands in a GPU's workgroup memory), the rest in workgroup memory; ties and NaNs.
    y = rand((3, 5000), "float32", 11)
    y[0, ::9] = np.nan
    y[1] = np.round(y[1] * 3)
    compare(gpu, lambda y: (jnp.sort(y, axis=1), jnp.argsort(y, axis=1, stable=True),
                            lax.top_k(jnp.nan_to_num(y), 9), jnp.sort(y.T, axis=0)), y)


def test_radix_sorts_match_cpu_bitwise(gpu):
    # 4096 elements or more with one key: a radix sort on u32 keys (floats in total order after
    # JAX's canonicalization: -0 as +0, every NaN as +NaN; top_k: NaN first). Results must be
    # bit-identical to cpu: values, stable tie order, indices. Two keys keep the bitonic network.
    rng = np.random.default_rng(21)
    n = 20000
    x = rng.standard_normal(n).astype(np.float32)
    for v in [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.5]:
        x[rng.integers(0, n, n // 40)] = v

    def same(f, *args):
        g, c = on(gpu, f, *args), on(CPU, f, *args)
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(c)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))

    same(lambda x: (jnp.sort(x), jnp.argsort(x), lax.top_k(x, 100),
                    jnp.argsort(x, descending=True), lax.sort_key_val(x, jnp.arange(n))), x)
    m = 6000
    for dt in ["int32", "uint32", "bfloat16", "uint8", "bool"]:
        if dt == "uint32":
            y = rng.integers(0, 2 ** 32, m, dtype=np.uint64).astype(np.uint32)
        elif dt == "bool":
            y = rng.integers(0, 2, m).astype(bool)
        else:
            y = rand((m,), dt, 22)
        top = (lambda y: lax.top_k(y, 9)) if dt != "bool" else (lambda y: y)
        same(lambda y: (jnp.sort(y), jnp.argsort(y), top(y)), y)
    r = x[:18000].reshape(3, 6000)
    same(lambda r: (jnp.sort(r, axis=1), jnp.argsort(r.T, axis=0), lax.top_k(r, 7),
                    jnp.lexsort((r[0], jnp.round(r[1])))), r)
    k = rand((2, 3000, 3), "int32", 23)
    same(lambda k: (jnp.sort(k, axis=1), jnp.argsort(k, axis=1, descending=True)), k)


def test_radix_sorts_read_in_groups_of_four_match_cpu_bitwise(gpu):
    # On CPU adapters the radix passes read each thread's run of keys and items four at a
    # time (through textures): counts not a multiple of four leave the last group partly
    # past the end, and runs of 97 items become 96. Ties keep their order.
    rng = np.random.default_rng(24)

    def same(f, *args):
        g, c = on(gpu, f, *args), on(CPU, f, *args)
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(c)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))

    for n in [4099, 100003, (1 << 20) + 3]:
        x = np.round(rng.standard_normal(n) * 50).astype(np.float32)
        x[rng.integers(0, n, n // 50)] = np.nan
        same(lambda x: (jnp.sort(x), jnp.argsort(x, stable=True)), x)
    i = rng.integers(-1000, 1000, 100003).astype(np.int32)
    same(lambda i: (jnp.argsort(i, stable=True, descending=True),
                    jax.random.permutation(jax.random.key(3), i)), i)


def test_negate_and_abs_touch_only_the_sign_bit(gpu):
    # IEEE 754's negate and abs: the sign bit alone, NaNs' payloads and signs included (cpu's
    # result). NVIDIA's driver gave the canonical NaN 0x7fffffff for `-x` of a NaN on an
    # H200, so top_k(-x) put every NaN first.
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7FC00123, 0xFFFFFFFF, 0x7F800000, 0xFF800000,
                     0x00000001, 0x80000000, 0x3F800000, 0xBF800000], np.uint32)
    x = np.tile(bits, 100).view(np.float32)
    for f, want in [(lambda x: -x, bits ^ 0x80000000), (jnp.abs, bits & 0x7FFFFFFF),
                    (lambda x: (-x) * 1.0 + 0.0, None)]:
        g = np.asarray(on(gpu, f, x)).view(np.uint32)[:bits.size]
        if want is None:
            # After arithmetic only NaN-ness and the ordinary values are specified.
            c = np.asarray(on(CPU, f, x)).view(np.float32)[:bits.size]
            np.testing.assert_array_equal(np.isnan(g.view(np.float32)), np.isnan(c))
            continue
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(g, np.asarray(on(CPU, f, x)).view(np.uint32)[:bits.size])


def test_top_k_selection_matches_cpu_bitwise(gpu):
    # top_k of 4096+ elements selects the k first by radix selection (digit histograms of the
    # (key, position) pair) instead of sorting whole rows; order as CHLO's decomposition:
    # +NaN first, -NaN last, ties by position. Bit-identical to cpu.
    rng = np.random.default_rng(31)

    def floats(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        flat = x.reshape(-1)
        for v in [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.5]:
            flat[rng.integers(0, flat.size, max(1, flat.size // 60))] = v
        return x

    def same(f, x):
        g, c = on(gpu, f, x), on(CPU, f, x)
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(c)):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))

    x = floats((70000,))
    for k in [1, 100, 1000]:
        same(lambda x: lax.top_k(x, k), x)
    same(lambda x: lax.top_k(-x, 3000), x[:5000])  # -NaN first among the negated
    same(lambda x: lax.top_k(x, 50), np.zeros(20000, np.float32))  # ties only
    same(lambda x: lax.top_k(x, 300), rng.integers(0, 5, 30000).astype(np.int32))
    same(lambda x: lax.top_k(x, 30), rng.integers(-128, 127, 30000).astype(np.int8))
    same(lambda x: lax.top_k(x, 64), floats((8, 50000)))  # sampling over a vocabulary
    same(lambda x: lax.top_k(x, 5), floats((1000, 300)))
    # Rows of 128 or less rank in one kernel: each element writes itself if its rank is
    # below k (32-bit results), or each result finds its element (packed ones).
    same(lambda x: lax.top_k(x, 5), floats((1000, 100)))
    same(lambda x: lax.top_k(x, 7), floats((50, 128)).astype(jnp.bfloat16))
    same(lambda x: lax.top_k(x, 2), rng.integers(-3, 3, (4096, 8)).astype(np.int32))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_conv_net_grad(gpu, dtype):
    x, w = rand((2, 3, 12, 12), dtype, 1, -1, 1), rand((4, 3, 3, 3), dtype, 2, -1, 1)
    wg = rand((6, 2, 3, 3), dtype, 3, -1, 1)

    def loss(x, w, wg):
        y = jnp.tanh(lax.conv(x, w, (2, 2), "SAME"))
        y = lax.conv_general_dilated(y, wg, (1, 1), "VALID", rhs_dilation=(1, 2),
                                     feature_group_count=2)
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
        return jnp.mean(y.astype(jnp.float32) ** 2)

    compare(gpu, jax.value_and_grad(loss, argnums=(0, 1, 2)), x, w, wg)


def _spd(n, batch=(), seed=0):
    a = rand(batch + (n, n), "float32", seed, -1, 1)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)


def test_linalg_factorizations(gpu):
    s, a = _spd(6), rand((6, 6), "float32", 3)
    compare(gpu, lambda s, a: (jnp.linalg.cholesky(s), jnp.linalg.inv(s), jnp.linalg.solve(s, a),
                               jnp.linalg.det(s), jax.scipy.linalg.lu(a)[2],
                               lax.linalg.triangular_solve(jnp.tril(s), a, left_side=True,
                                                           lower=True)), s, a)


def test_linalg_qr(gpu):
    # Q and R are unique only up to signs: compare what is sign-free.
    for shape, mode in [((6, 6), "reduced"), ((7, 4), "reduced"), ((5, 3), "complete"),
                        ((2, 5, 4), "reduced")]:
        x = rand(shape, "float32", 4)
        compare(gpu, lambda x: (lambda q, r: (q @ r, jnp.abs(r),
                                              jnp.swapaxes(q, -1, -2) @ q))(*jnp.linalg.qr(x, mode=mode)),
                x)


def test_linalg_eigh(gpu):
    for s in [_spd(5), _spd(4, (3,), seed=5)]:
        compare(gpu, lambda x: (lambda w, v: (w, v @ (w[..., None] * jnp.swapaxes(v, -1, -2))))(
            *jnp.linalg.eigh(x)), s)


def test_linalg_svd(gpu):
    # Singular values against cpu; U and V are unique only up to signs: check what is sign-free.
    for shape in [(5, 5), (7, 4), (4, 7), (2, 6, 3)]:
        x = rand(shape, "float32", 6)
        compare(gpu, lambda x: jnp.linalg.svd(x, compute_uv=False), x)
        for full in (False, True):
            u, s, vt = on(gpu, lambda x: jnp.linalg.svd(x, full_matrices=full), x)
            k = min(shape[-2:])
            np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vt[..., :k, :], x,
                                       atol=1e-5)
            for q in (u, np.swapaxes(vt, -1, -2)):
                np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q,
                                           np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] +
                                                           (q.shape[-1],) * 2), atol=1e-5)
    x = rand((6, 4), "float32", 7)
    compare(gpu, lambda x: (jnp.linalg.pinv(x), jnp.linalg.norm(x, 2), jnp.linalg.matrix_rank(x)),
            x)


def test_host_linalg_refused_when_asked(gpu, monkeypatch):
    # eig runs on the host (test_callbacks.py); WGPU_HLO_HOST_OPS=error makes it an error.
    monkeypatch.setenv("WGPU_HLO_HOST_OPS", "error")
    jax.clear_caches()
    x = jax.device_put(rand((4, 4), "float32"), gpu)
    with pytest.raises(NotImplementedError, match="eig"):
        jax.jit(jnp.linalg.eig)(x)
    jax.clear_caches()
    assert float(jax.jit(lambda x: x.sum())(jax.device_put(np.ones(3, np.float32), gpu))) == 3.0
