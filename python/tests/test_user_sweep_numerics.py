"""User programs of the third 2026-12-07 sweep against jax cpu in the same process: special
functions, half-precision and int8 arithmetic, least squares and pseudo-inverses, norms and
condition numbers, associative scans, 2-d convolutions and correlations, percentiles,
finite differences, polynomials, index helpers, cumulative products and extrema,
partitions, searches, histograms, `unique`, random choices without replacement and
categorical draws, small eigen- and singular values, Cholesky solves, complex products,
rounding, integer and float edge arithmetic, uint8 images, casts.

None of them was wrong when the sweep ran; they stay here so that none becomes wrong.
A tolerance of 0 asks for the same bits (NaNs equal)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.scipy as jsp
import jax.scipy.special as sps
from jax import lax

R = np.random.default_rng(5)


def r(*s):
    return R.standard_normal(s).astype(np.float32)


def pos(*s):
    return (R.random(s) * 5 + 0.1).astype(np.float32)


CASES = {
 "erf/erfc/erfinv": (lambda x: (sps.erf(x), sps.erfc(x), sps.erfinv(jnp.tanh(x))), [r(4096)], 2e-5),
 "gammaln/digamma": (lambda x: (sps.gammaln(x), sps.digamma(x)), [pos(4096)], 1e-4),
 "i0e/i1e": (lambda x: (sps.i0e(x), sps.i1e(x)), [r(4096)*3], 1e-5),
 "logit/expit/xlogy": (lambda x,y: (sps.logit(jax.nn.sigmoid(x)), sps.xlogy(y, y+1), sps.xlog1py(y,x*0.1)), [r(4096), pos(4096)], 1e-4),
 "zeta/polygamma": (lambda x: (sps.zeta(x+1.5, 2.0), sps.polygamma(1, x)), [pos(2048)], 1e-4),
 "gelu/silu/softplus/mish": (lambda x: (jax.nn.gelu(x), jax.nn.gelu(x, approximate=False), jax.nn.silu(x), jax.nn.softplus(x*10), jax.nn.mish(x)), [r(8192)], 1e-5),
 "bf16 matmul": (lambda a,b: (a.astype(jnp.bfloat16) @ b.astype(jnp.bfloat16)).astype(jnp.float32), [r(128,256), r(256,64)], 5e-2),
 "bf16 softmax": (lambda a: jax.nn.softmax(a.astype(jnp.bfloat16), -1).astype(jnp.float32), [r(64,128)], 1e-2),
 "int8 matmul to int32": (lambda a,b: lax.dot(a,b,preferred_element_type=jnp.int32), [R.integers(-128,127,(64,96)).astype(np.int8), R.integers(-128,127,(96,32)).astype(np.int8)], 0),
 "lstsq": (lambda a,b: jnp.linalg.lstsq(a,b)[0], [r(200,20), r(200,3)], 1e-3),
 "pinv": (lambda a: jnp.linalg.pinv(a), [r(60,40)], 1e-3),
 "matrix_rank": (lambda a: jnp.linalg.matrix_rank(a @ a[:5].T @ a[:5]), [r(30,30)], 0),
 "norm 2 / nuc": (lambda a: (jnp.linalg.norm(a, 2), jnp.linalg.norm(a, 'nuc'), jnp.linalg.cond(a)), [r(40,40)], 1e-3),
 "associative_scan": (lambda x: lax.associative_scan(jnp.add, x), [r(10000)], 1e-3),
 "associative_scan max rev": (lambda x: lax.associative_scan(jnp.maximum, x, reverse=True), [r(5000)], 0),
 "reduce_precision": (lambda x: lax.reduce_precision(x, 5, 10), [r(4096)*100], 0),
 "convolve2d": (lambda a,k: jsp.signal.convolve2d(a,k,mode='same'), [r(128,128), r(5,5)], 1e-4),
 "correlate full": (lambda a,k: jnp.correlate(a,k,mode='full'), [r(1000), r(31)], 1e-4),
 "percentile/nanmedian": (lambda x: (jnp.percentile(x, jnp.array([5.,50.,95.])), jnp.nanmedian(jnp.where(x>1.5, jnp.nan, x))), [r(10001)], 1e-5),
 "diff/gradient/trapezoid": (lambda x: (jnp.diff(x, n=2), jnp.gradient(x), jnp.trapezoid(x)), [r(1000)], 1e-4),
 "kron/vander/polyval": (lambda a,x: (jnp.kron(a[:8,:8], a[:4,:4]), jnp.vander(x[:10], 5), jnp.polyval(a[0,:6], x)), [r(16,16), r(500)], 1e-4),
 "tril/triu indices gather": (lambda a: (a[jnp.tril_indices(32)], a[jnp.triu_indices(32, 1)]), [r(32,32)], 0),
 "cumprod rev / cummax": (lambda x: (jnp.flip(jnp.cumprod(jnp.flip(x*0.1+1))), lax.cummax(x), lax.cummin(x, reverse=True)), [r(3000)], 1e-4),
 "argpartition-ish": (lambda x: jnp.sort(jnp.partition(x, 100)[:100]), [r(5000)], 0),
 "searchsorted right/left": (lambda s,v: (jnp.searchsorted(s,v,side='right'), jnp.searchsorted(s,v,side='left')), [np.sort(R.integers(0,50,1000)).astype(np.float32), R.integers(0,50,3000).astype(np.float32)], 0),
 "histogram": (lambda x: jnp.histogram(x, bins=30, range=(-3,3))[0], [r(100000)], 0),
 "unique size": (lambda x: jnp.unique(x, size=60, fill_value=-1), [R.integers(0,50,5000).astype(np.int32)], 0),
 "random choice no replace": (lambda k: jax.random.choice(jax.random.wrap_key_data(k), 1000, (100,), replace=False), [np.array([0,7],np.uint32)], 0),
 "random categorical/gumbel": (lambda k, l: jax.random.categorical(jax.random.wrap_key_data(k), l, axis=-1, shape=(64,)), [np.array([0,9],np.uint32), r(64,20)], 0),
 "eigh 64 values": (lambda a: jnp.linalg.eigvalsh(a+a.T), [r(64,64)], 1e-3),
 "svd values 40x30": (lambda a: jnp.linalg.svd(a, compute_uv=False), [r(40,30)], 1e-3),
 "cholesky solve": (lambda a,b: jsp.linalg.cho_solve(jsp.linalg.cho_factor(a@a.T+40*jnp.eye(40)), b), [r(40,40), r(40,5)], 1e-4),
 "complex matmul + abs": (lambda a,b: jnp.abs((a+1j*b) @ (b-1j*a)), [r(64,64), r(64,64)], 1e-4),
 "where nan_to_num clip": (lambda x: jnp.clip(jnp.nan_to_num(jnp.log(x)), -2, 2), [r(4096)], 1e-6),
 "rounding": (lambda x: (jnp.round(x*10, 1), jnp.floor(x*3.5), jnp.rint(x*2.5), jnp.trunc(x*1.5), jnp.round(x*100).astype(jnp.int32)), [r(4096)], 1e-6),
 "integer pow/abs/sign": (lambda i: (i**3, jnp.abs(i), jnp.sign(i), i // 7, i % -7, jnp.left_shift(i, 3)), [R.integers(-1000,1000,4096).astype(np.int32)], 0),
 "float power/atan2/hypot": (lambda x,y: (jnp.power(jnp.abs(x), y), jnp.arctan2(x,y), jnp.hypot(x,y), jnp.logaddexp(x,y), jnp.copysign(x,y), jnp.nextafter(x,y)), [r(4096), r(4096)], 1e-5),
 "uint8 image ops": (lambda im: (jnp.clip(im.astype(jnp.int32)*3//2, 0, 255).astype(jnp.uint8), im.mean((0,1)), jnp.max(im, axis=2)), [R.integers(0,256,(64,64,3)).astype(np.uint8)], 1e-5),
 "int64 / f64 (x64 off) casts": (lambda x: (x.astype(jnp.int32), (x*1e6).astype(jnp.int32), x.astype(jnp.uint32)), [r(4096)*100], 0),
    "f16 math": (lambda x: (jnp.exp(x.astype(jnp.float16)), jnp.sum(x.astype(jnp.float16)),
                            jnp.tanh(x.astype(jnp.float16))), [r(4096)], 2e-2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_user_program(gpu, name):
    f, args, tol = CASES[name]
    cpu = jax.devices("cpu")[0]
    got = jax.tree_util.tree_leaves(jax.jit(f)(*[jax.device_put(a, gpu) for a in args]))
    want = jax.tree_util.tree_leaves(jax.jit(f)(*[jax.device_put(a, cpu) for a in args]))
    assert len(got) == len(want)
    for p, q in zip(got, want):
        p, q = np.asarray(p), np.asarray(q)
        assert p.shape == q.shape and p.dtype == q.dtype
        if tol == 0:
            np.testing.assert_array_equal(p, q)
        else:
            np.testing.assert_allclose(p.astype(np.float64), q.astype(np.float64), rtol=tol, atol=tol)
