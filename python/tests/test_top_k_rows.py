"""`top_k` of many rows and a small k (`top_k::per_row`, CPU adapters): one invocation walks
each row, keeping the k first (key, position) pairs sorted in registers. Values and indices
must equal jax cpu's bit for bit: ties (the first position wins), NaNs, signed zeros and
infinities, rows sorted either way (every element inserted, or none after the first k),
integer and narrow float types, leading batch dimensions, short rows (which ranked before)
and rows up to the route's bound."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

RNG = np.random.default_rng(3)


def special(shape):
    x = np.round(RNG.standard_normal(shape) * 2).astype(np.float32)
    x[..., ::7] = np.nan
    x[..., 3], x[..., 4], x[..., 5], x[..., 6] = -0.0, 0.0, np.inf, -np.inf
    return x


CASES = {
    "random": (RNG.standard_normal((1024, 1024)).astype(np.float32), 8),
    "short_rows": (RNG.standard_normal((1000, 100)).astype(np.float32), 10),
    "k_one": (RNG.standard_normal((300, 777)).astype(np.float32), 1),
    "k_16": (RNG.standard_normal((128, 5000)).astype(np.float32), 16),
    "ties": (np.round(RNG.standard_normal((256, 600)) * 2).astype(np.float32), 12),
    "specials": (special((200, 350)), 16),
    "ascending": (np.tile(np.arange(2000, dtype=np.float32), (70, 1)), 16),
    "descending": (np.tile(np.arange(2000, 0, -1, dtype=np.float32), (70, 1)), 16),
    "all_equal": (np.ones((80, 300), np.float32), 5),
    "int32": (RNG.integers(-50, 50, (200, 400)).astype(np.int32), 10),
    "uint32": (RNG.integers(0, 2**32 - 1, (200, 400), dtype=np.uint32), 10),
    "int8": (RNG.integers(-100, 100, (200, 400)).astype(np.int8), 4),
    "f16": (RNG.standard_normal((200, 400)).astype(np.float16), 7),
    "bf16": (RNG.standard_normal((200, 400)).astype(jax.numpy.bfloat16), 7),
    "batched": (RNG.standard_normal((4, 32, 256)).astype(np.float32), 6),
    "longest": (RNG.standard_normal((64, 16384)).astype(np.float32), 8),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_top_k_rows_match_cpu_bits(gpu, case):
    x, k = CASES[case]
    f = jax.jit(lambda x: jax.lax.top_k(x, k))
    gv, gi = (np.asarray(a) for a in f(jax.device_put(x, gpu)))
    cv, ci = (np.asarray(a) for a in f(jax.device_put(x, jax.devices("cpu")[0])))
    np.testing.assert_array_equal(gi, ci)
    assert gv.dtype == cv.dtype
    bits = {2: np.uint16, 4: np.uint32, 1: np.uint8}[gv.dtype.itemsize]
    np.testing.assert_array_equal(gv.view(bits), cv.view(bits))


def test_top_k_rows_take_one_kernel(gpu, tmp_path, monkeypatch):
    """On CPU adapters 1024 rows of 1024 take the per-row kernel and a gather, not the radix
    selection's twenty launches."""
    from conftest import cpu_kernel_class

    if not cpu_kernel_class(gpu):
        pytest.skip("the per-row route is for CPU adapters")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    x = RNG.standard_normal((1024, 1024)).astype(np.float32)
    jax.block_until_ready(jax.jit(lambda x: jax.lax.top_k(x, 8))(jax.device_put(x, gpu)))
    names = sorted(p.name for p in tmp_path.glob("*.wgsl"))
    assert any(n.endswith("top_k_0_rows.wgsl") for n in names), names
    assert not any("select" in n for n in names), names
