"""User programs of the second 2026-12-07 sweep against jax cpu in the same process: the
places where a backend most easily differs from XLA's CPU backend without anyone noticing.

- Integers at the edges: division and remainder by zero and of the most negative value by
  -1, floor division and modulo of negative numbers, shifts by the width and past it,
  unsigned wrap-around, population count and leading zeros, 8- and 16-bit wrap-around, and
  an int8 product accumulated in int32.
- NaN and signed zeros: reductions, arg-reductions, elementwise max/min/fmax, sorts and
  cumulative max/min over arrays holding NaN, -inf and -0.0; ties in top_k, lexsort and
  unique with a fill value.
- Random numbers: distributions built on loops and rejection (poisson, gamma through beta
  and dirichlet, truncated normal), categorical sampling, orthogonal matrices, fold_in
  chains and raw threefry bits.
- Optimizers from optax trained inside `lax.scan`, L-BFGS with its zoom line search (a
  while loop inside the scan) included.
- Complex numbers compared by their real and imaginary parts.

None of them was wrong when the sweep ran; they stay here so that none becomes wrong."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


BIG = np.array([0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 100, -100, 3], np.int32)
SMALL = np.array([0, 0, 0, 2, -2, -1, -1, 7, 7, 0], np.int32)
WITH_NAN = np.array([1.0, np.nan, 3.0, -np.inf, 2.0, np.nan, 0.0, -0.0], np.float32)

INTEGER_CASES = {
    "div and rem by zero, and of the most negative by -1": (
        lambda a, b: (lax.div(a, b), lax.rem(a, b)), (BIG, SMALL)),
    "floor_divide and mod of negatives": (
        lambda a, b: (jnp.floor_divide(a, b), jnp.mod(a, b)), (BIG, SMALL)),
    "shifts by the width and past it": (
        lambda a, s: (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s),
                      lax.shift_right_logical(a, s)),
        (np.repeat(BIG, 5), np.tile(np.array([0, 1, 31, 32, 40], np.int32), 10))),
    "uint32 wrap-around": (
        lambda a, b: (a * b, a - b, a >> (b & 31), a // (b | 1)),
        (RNG.integers(0, 2**32, 10000, dtype=np.uint32),
         RNG.integers(0, 2**32, 10000, dtype=np.uint32))),
    "population count and leading zeros": (
        lambda a: (lax.population_count(a), lax.clz(a)),
        (RNG.integers(-(2**31), 2**31 - 1, 10000).astype(np.int32),)),
    "int8 wrap-around": (
        lambda a, b: (a + b, a * b, a // (b | 1)),
        (RNG.integers(-128, 128, 10000).astype(np.int8),
         RNG.integers(-128, 128, 10000).astype(np.int8))),
    "int16 sum and cumsum": (
        lambda a: (a.sum(dtype=jnp.int16), jnp.cumsum(a)),
        (RNG.integers(-300, 300, 5000).astype(np.int16),)),
    "int8 product accumulated in int32": (
        lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
        (RNG.integers(-128, 128, (256, 512)).astype(np.int8),
         RNG.integers(-128, 128, (512, 128)).astype(np.int8))),
}

NAN_CASES = {
    "max, min and arg-reductions with NaN": (
        lambda x: (x.max(), x.min(), jnp.nanmax(x), jnp.argmax(x), jnp.argmin(x)), (WITH_NAN,)),
    "elementwise maximum, minimum, fmax with NaN": (
        lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y), jnp.fmax(x, y)),
        (WITH_NAN, WITH_NAN[::-1].copy())),
    "sort and stable argsort with NaN and -0.0": (
        lambda x: (jnp.sort(x), jnp.argsort(x, stable=True)), (np.tile(WITH_NAN, 100),)),
    "cummax and cummin with NaN": (
        lambda x: (lax.cummax(x), lax.cummin(x)), (np.tile(WITH_NAN, 10),)),
    "unique with a size and a fill value": (
        lambda x: jnp.unique(x, size=50, fill_value=-1),
        (RNG.integers(0, 40, 1000).astype(np.int32),)),
    "lexsort of three keys": (
        lambda a, b, c: jnp.lexsort((a, b, c)),
        (RNG.integers(0, 5, 10000).astype(np.int32), RNG.integers(0, 5, 10000).astype(np.int32),
         rand(10000))),
    "top_k with ties": (lambda x: lax.top_k(x, 20), (np.repeat(rand(100), 10),)),
}


@pytest.mark.parametrize("name", list(INTEGER_CASES) + list(NAN_CASES))
def test_exact_semantics(gpu, name):
    f, args = {**INTEGER_CASES, **NAN_CASES}[name]
    compare_with_cpu(gpu, f, *args, tol=0)


RANDOM_CASES = {
    "categorical and truncated normal": lambda k: (
        jax.random.categorical(k, jnp.log(jnp.arange(1.0, 11.0)), shape=(10000,)),
        jax.random.truncated_normal(k, -1.0, 2.0, (10000,))),
    "poisson, beta and dirichlet": lambda k: (
        jax.random.poisson(k, 3.5, (5000,)), jax.random.beta(k, 2.0, 3.0, (5000,)),
        jax.random.dirichlet(k, jnp.ones(5), (1000,))),
    "multivariate normal, orthogonal, rademacher": lambda k: (
        jax.random.multivariate_normal(k, jnp.zeros(4), jnp.eye(4) * 2, (1000,)),
        jax.random.orthogonal(k, 16), jax.random.rademacher(k, (1000,))),
    "fold_in chains and raw bits": lambda k: (
        jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(k, i), (4,)))(jnp.arange(1000)),
        jax.random.bits(k, (100000,), jnp.uint32)),
}


@pytest.mark.parametrize("name", list(RANDOM_CASES))
def test_random_distributions(gpu, name):
    compare_with_cpu(gpu, RANDOM_CASES[name], jax.random.key(3), tol=1e-4)


def trained_in_scan(optax, opt, steps=20):
    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)

    def run(w, x, y):
        def step(c, _):
            w, st = c
            value, g = jax.value_and_grad(loss)(w, x, y)
            u, st = opt.update(g, st, w)
            return (optax.apply_updates(w, u), st), value

        (w, _), losses = lax.scan(step, (w, opt.init(w)), None, length=steps)
        return w, losses

    return run


OPTIMIZERS = {
    "lion": lambda o: o.lion(1e-3),
    "adafactor": lambda o: o.adafactor(1e-2),
    "adamw with cosine decay and clipping": lambda o: o.chain(
        o.clip_by_global_norm(1.0),
        o.adamw(o.cosine_decay_schedule(1e-2, 20), weight_decay=1e-2)),
    "sgd with nesterov momentum": lambda o: o.sgd(1e-2, momentum=0.9, nesterov=True),
    "centered rmsprop": lambda o: o.rmsprop(1e-3, centered=True),
    "novograd": lambda o: o.novograd(1e-3),
    "lamb": lambda o: o.lamb(1e-3),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optax_optimizer_in_a_scan(gpu, name):
    optax = pytest.importorskip("optax")
    w0 = {"a": rand(32, 64) / 6, "b": rand(64, 4) / 8}
    compare_with_cpu(gpu, trained_in_scan(optax, OPTIMIZERS[name](optax)), w0, rand(256, 32),
                     rand(256, 4), tol=1e-4)


def test_optax_lbfgs_with_zoom_line_search(gpu):
    optax = pytest.importorskip("optax")

    def rosenbrock(x):
        return jnp.sum((x[1:] - x[:-1] ** 2) ** 2 * 10 + (1 - x[:-1]) ** 2)

    def run(x0):
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(rosenbrock)

        def step(c, _):
            x, st = c
            v, g = value_and_grad(x, state=st)
            u, st = opt.update(g, st, x, value=v, grad=g, value_fn=rosenbrock)
            return (optax.apply_updates(x, u), st), v

        (x, _), values = lax.scan(step, (x0, opt.init(x0)), None, length=15)
        return x, values

    # 15 steps of a line search amplify rounding: the sweep saw 2.2e-5 of the largest value.
    compare_with_cpu(gpu, run, rand(20) * 0.5, tol=1e-3)


def parts(tree):
    return jax.tree_util.tree_map(lambda z: (jnp.real(z), jnp.imag(z)), tree)


COMPLEX_CASES = {
    "exp, log, sqrt, power, tanh, arctan, reciprocal": (lambda a, b: parts(
        (lambda z: (jnp.exp(z), jnp.log(z), jnp.sqrt(z), z**2.5, jnp.tanh(z), jnp.arctan(z),
                    1 / z))(a + 1j * b)), (rand(1000), rand(1000))),
    "sum, product and cumsum": (lambda a, b: parts(
        (lambda z: (z.sum(), jnp.prod(z[:20] / 2), jnp.cumsum(z)))(a + 1j * b)),
        (rand(1000), rand(1000))),
    "product of matrices": (
        lambda a, b: parts((a + 1j * b) @ (b - 1j * a.T)), (rand(100, 100), rand(100, 100))),
    "fft": (lambda a, b: parts(jnp.fft.fft(a + 1j * b)), (rand(4096), rand(4096))),
}


@pytest.mark.parametrize("name", list(COMPLEX_CASES))
def test_complex_by_real_and_imaginary_parts(gpu, name):
    f, args = COMPLEX_CASES[name]
    compare_with_cpu(gpu, f, *args, tol=2e-5)
