"""Read-backs: a result read to the host after an execution whose earlier results were read
(the runtime then copies that output for the host in the execution's own submission), results
of programs that wait on read-backs (loop predicates, trip counts, branch selectors, host
callbacks, all staged in one submission with the work), and results never read. Every value
against numpy or jax cpu: a copy made too early, or bytes kept from another call, would show
as a stale or foreign value."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax


def test_each_call_reads_its_own_result(gpu):
    # The second and later calls copy the result for the host as they run.
    f = jax.jit(lambda x, k: x * k + 1)
    x = jax.device_put(np.arange(16, dtype=np.float32), gpu)
    for k in range(12):
        got = np.asarray(f(x, np.float32(k)))
        np.testing.assert_array_equal(got, np.arange(16, dtype=np.float32) * k + 1)


def test_results_read_out_of_order(gpu):
    # Results of several calls held, then read newest first, and twice.
    f = jax.jit(lambda x, k: (x + k, jnp.sum(x) * k))
    x = jax.device_put(np.linspace(0, 1, 33, dtype=np.float32), gpu)
    np.asarray(f(x, np.float32(0))[1])
    outs = [f(x, np.float32(k)) for k in range(8)]
    for k in reversed(range(8)):
        a, s = outs[k]
        np.testing.assert_allclose(np.asarray(s), np.linspace(0, 1, 33).sum() * k, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(a), np.linspace(0, 1, 33) + k, rtol=1e-6)
        assert float(s) == float(np.asarray(s))


def test_donated_state_read_every_step(gpu):
    # A training-loop shape: the state donated and updated in place each step, the loss
    # and the state read back every step.
    def step(p, x):
        loss = jnp.sum((p * x - 1.0) ** 2)
        return p - 0.01 * jax.grad(lambda p: jnp.sum((p * x - 1.0) ** 2))(p), loss

    f = jax.jit(step, donate_argnums=0)
    g = jax.jit(step)
    x = np.linspace(0.5, 1.5, 64, dtype=np.float32)
    p = jax.device_put(np.zeros(64, np.float32), gpu)
    pc = jax.device_put(np.zeros(64, np.float32), jax.devices("cpu")[0])
    xc = jax.device_put(x, jax.devices("cpu")[0])
    xg = jax.device_put(x, gpu)
    for _ in range(20):
        p, loss = f(p, xg)
        pc, lc = g(pc, xc)
        np.testing.assert_allclose(float(loss), float(lc), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(p), np.asarray(pc), rtol=1e-5, atol=1e-6)


def test_an_output_that_is_an_argument(gpu):
    f = jax.jit(lambda x, y: (x, y + 1, x))
    for k in range(5):
        x = jax.device_put(np.full(7, k, np.float32), gpu)
        a, b, c = f(x, x)
        for r, want in ((a, k), (b, k + 1), (c, k), (x, k)):
            np.testing.assert_array_equal(np.asarray(r), np.full(7, want, np.float32))


@pytest.mark.parametrize("n", [1, 16 << 10, 20 << 10])
def test_sizes_around_the_copy_limit(gpu, n):
    # 64 KiB of float32 and more: copied by the execution or read on their own.
    f = jax.jit(lambda x, k: x * 2 + k)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    xd = jax.device_put(x, gpu)
    for k in range(4):
        np.testing.assert_array_equal(np.asarray(f(xd, np.float32(k))), x * 2 + k)


def test_a_deleted_result_is_not_read(gpu):
    f = jax.jit(lambda x: x + 1)
    x = jax.device_put(np.ones(4, np.float32), gpu)
    np.asarray(f(x))
    y = f(x)
    y.block_until_ready()
    y.delete()
    with pytest.raises(RuntimeError):
        np.asarray(y)


def test_loops_branches_and_callbacks_read_back(gpu):
    # Programs whose runs wait on read-backs, read every call with changing inputs.
    def newton(a):
        def body(c):
            x, _ = c
            y = 0.5 * (x + a / x)
            return y, jnp.max(jnp.abs(y - x))
        return lax.while_loop(lambda c: c[1] > 1e-6, body, (a + 1.0, jnp.float32(1.0)))[0]

    def traced(x, n):
        return lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * 0.5 + i * 1e-3, x)

    def branch(x, n):
        # (The barrier keeps the conditional: cheap branches are computed whole and selected.)
        return lax.cond(n % 2 == 0, lambda: lax.optimization_barrier(jnp.sin(x) * n),
                        lambda: jnp.cos(x) - n)

    def cb(x, n):
        y = jax.pure_callback(lambda v: np.asarray(v) * 2 + 1,
                              jax.ShapeDtypeStruct(x.shape, x.dtype), x + n)
        return y * 3

    cpu = jax.devices("cpu")[0]
    for k in range(6):
        x = np.linspace(0.5, 3 + k, 40, dtype=np.float32)
        n = np.int32(k * 9)
        for f, args in ((newton, (x,)), (traced, (x, n)), (branch, (x, n)),
                        (cb, (x, np.float32(k)))):
            got = np.asarray(jax.jit(f)(*jax.device_put(args, gpu)))
            want = np.asarray(jax.jit(f)(*jax.device_put(args, cpu)))
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_threads_read_their_own_results(gpu):
    # One executable, eight threads, each reading every result it gets.
    f = jax.jit(lambda x, k: (x * k, jnp.sum(x) + k))
    bad = []

    def worker(t):
        x = np.arange(50, dtype=np.float32) + t
        xd = jax.device_put(x, gpu)
        for k in range(30):
            a, s = f(xd, np.float32(k))
            if not np.array_equal(np.asarray(a), x * k):
                bad.append((t, k, "a"))
            if abs(float(s) - (x.sum() + k)) > 1e-3:
                bad.append((t, k, "s"))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad[:5]


def test_reads_that_come_and_go(gpu):
    # Results read, then only waited for (dropped unread: the copies stop), then read again.
    f = jax.jit(lambda x, k: x - k)
    x = jax.device_put(np.arange(9, dtype=np.float32), gpu)
    for k in range(30):
        y = f(x, np.float32(k))
        if k % 10 < 3 or k % 7 == 0:
            np.testing.assert_array_equal(np.asarray(y), np.arange(9, dtype=np.float32) - k)
        else:
            y.block_until_ready()
    held = [f(x, np.float32(k)) for k in range(5)]
    for k, y in enumerate(held):
        np.testing.assert_array_equal(np.asarray(y), np.arange(9, dtype=np.float32) - k)


@pytest.mark.parametrize(
    "dtype,n",
    [(np.float32, 64), (np.float32, 1024), (np.float32, 1025), (np.int8, 3), (np.bool_, 7),
     (np.float16, 5), (np.uint32, 1), (np.complex64, 9), (np.int32, 0)],
)
def test_uploads_read_back_from_their_host_copy(gpu, dtype, n):
    # Uploads of at most 4 KiB keep their bytes as their host copy (1024 floats do, 1025 do
    # not); every bit comes back, NaN payloads included, and a computation on the upload
    # sees the same bytes.
    rng = np.random.default_rng(n)
    if dtype == np.bool_:
        x = rng.random(n) < 0.5
    elif dtype == np.complex64:
        x = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    elif np.issubdtype(dtype, np.integer):
        x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, n, dtype=dtype, endpoint=True)
    else:
        x = rng.standard_normal(n).astype(dtype)
        if n > 2:
            x.view(np.uint16 if dtype == np.float16 else np.uint32)[1] |= 0x7e01 if dtype == np.float16 else 0x7f800123
    a = jax.device_put(x, gpu)
    assert np.asarray(a).tobytes() == x.tobytes()
    assert np.asarray(a).tobytes() == x.tobytes()
    same = jax.jit(lambda v: lax.bitcast_convert_type(v, jnp.uint8) if v.dtype != jnp.bool_ else v)
    if dtype not in (np.complex64, np.bool_):
        assert np.asarray(same(a)).tobytes() == x.tobytes()


def test_a_donated_upload_is_not_read(gpu):
    # The host copy of an upload never outlives its device bytes: donated, it is deleted.
    x = jax.device_put(np.arange(8, dtype=np.float32), gpu)
    f = jax.jit(lambda v: v * 2, donate_argnums=0)
    y = f(x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(8, dtype=np.float32) * 2)
    if x.is_deleted():
        with pytest.raises(RuntimeError):
            np.asarray(x)
