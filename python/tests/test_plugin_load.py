"""The installed `jax-wgpu` package registers a working `wgpu` backend: the adapter is listed,
host transfers round-trip every dtype JAX uses, and failures surface as Python exceptions."""

import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "wgpu,cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


@pytest.fixture(scope="module")
def device():
    return jax.devices("wgpu")[0]


def test_devices_listed_in_fresh_process():
    env = dict(os.environ, JAX_PLATFORMS="wgpu")
    out = subprocess.run(
        [sys.executable, "-c", "import jax; d = jax.devices(); print(d, d[0].platform)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "WgpuDevice(id=0" in out.stdout and "backend=" in out.stdout
    assert out.stdout.strip().endswith("wgpu")


FIRST_CALLS = r"""
import jax, jax.numpy as jnp, numpy as np
import jax.scipy.linalg as jsl
from jax._src import config
events = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: events.append(name)
    if name == "/jax/core/compile/backend_compile_duration" else None)
d = jax.devices("wgpu")[0]
a = jax.device_put(np.eye(8, dtype=np.float32) * 3 + 0.1, d)
fs = {
    "x*2+1": lambda a: a * 2 + 1,
    "eigh": lambda a: jnp.linalg.eigh(a),
    "eigvalsh": jnp.linalg.eigvalsh,
    "svd": lambda a: jnp.linalg.svd(a),
    "svdvals": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "qr": jnp.linalg.qr,
    "cholesky": jnp.linalg.cholesky,
    "solve": lambda a: jnp.linalg.solve(a, a[:, :2]),
    "slogdet": jnp.linalg.slogdet,
    "inv": jnp.linalg.inv,
    "lu": jsl.lu,
    "solve_triangular": lambda a: jsl.solve_triangular(a, a[:, :2], lower=True),
    "approx_max_k": lambda a: jax.lax.approx_max_k(a, 2),
}
context = config.trace_context()
bad = []
for name, f in fs.items():
    f = jax.jit(f)
    before = len(events)
    jax.block_until_ready(f(a))
    jax.block_until_ready(f(a))
    if config.trace_context() != context:
        bad.append(f"{name}: the trace context changed")
        context = config.trace_context()
    if len(events) - before != 1:
        bad.append(f"{name}: {len(events) - before} compiles")
print("BAD" if bad else "OK", bad)
"""


def test_first_calls_trace_and_compile_once():
    """A function's second call reuses the executable of its first. Until 2026-12-06 the
    plugin's lowerings imported `jax.extend` (and with it Pallas, whose config options join
    JAX's trace context) inside the first eigh/svd/qr lowering: the context changed under the
    call, so its second call traced and compiled it again (svd 256: a second compile of the
    whole program), and so did every function jitted before it. A fresh process, since an
    earlier test may have imported those modules already."""
    env = dict(os.environ, JAX_PLATFORMS="wgpu,cpu")
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CALLS], env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "OK []", out.stdout


def test_device_description(device):
    assert device.platform == "wgpu"
    assert device.id == 0
    assert device.device_kind  # the adapter name
    assert "wgpu-hlo" in device.client.platform_version
    assert device.process_index == 0
    assert [m.kind for m in device.addressable_memories()] == ["device"]
    assert device.default_memory().kind == "device"


DTYPES = [
    np.float32, np.float64, np.float16, jnp.bfloat16, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4), (5, 0, 2)])
def test_device_put_get_round_trip(device, dtype, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    with jax.enable_x64(True):  # keep 64-bit dtypes as they are
        y = jax.device_put(x, device)
        assert y.devices() == {device}
        assert y.dtype == x.dtype and y.shape == x.shape
        z = np.asarray(y)
    assert z.dtype == x.dtype
    np.testing.assert_array_equal(z, x)


def test_non_contiguous_host_array(device):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2].T
    np.testing.assert_array_equal(np.asarray(jax.device_put(x, device)), x)


def test_copy_and_delete(device):
    y = jax.device_put(np.arange(8, dtype=np.int32), device)
    z = jax.device_put(y, device, may_alias=False)
    y.delete()
    assert y.is_deleted()
    np.testing.assert_array_equal(np.asarray(z), np.arange(8))


def test_many_transfers_in_flight(device):
    xs = [np.full((256,), i, np.float32) for i in range(64)]
    ys = [jax.device_put(x, device) for x in xs]
    for y in ys:
        y.block_until_ready()
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(np.asarray(y), x)


def test_memory_stats(device):
    jax.device_put(np.zeros(1024, np.float32), device).block_until_ready()
    stats = device.memory_stats()
    assert stats["num_allocs"] >= 1 and stats["bytes_in_use"] >= 0


def _compiles(device):
    try:
        jax.jit(lambda v: v + 1)(jax.device_put(np.arange(4, dtype=np.int32), device))
        return True
    except jax.errors.JaxRuntimeError as e:
        if "UNIMPLEMENTED" in str(e):
            return False
        raise


def test_jit_computes(device):
    if not _compiles(device):
        pytest.xfail("the compiler cannot read this program yet (UNIMPLEMENTED)")
    with jax.default_device(device):
        out = jnp.arange(4) + 1
    assert out.devices() == {device}
    np.testing.assert_array_equal(np.asarray(out), np.arange(4) + 1)


def test_compile_error_is_a_python_exception(device):
    # Whatever the compiler supports, a failed compile must raise, not abort the process.
    try:
        jax.jit(jnp.linalg.cholesky)(jax.device_put(np.eye(3, dtype=np.float32), device))
    except Exception as e:  # noqa: BLE001 - any Python exception is the point
        assert str(e)
    assert jax.device_put(np.ones(2, np.float32), device).shape == (2,)
