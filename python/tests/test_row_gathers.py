"""Gathers of rows read their table through a texture on CPU adapters where storage loads cost
llvmpipe more than texel fetches (AMD hosts; `WGPU_HLO_STREAM_READS=texture` forces it here),
when the table is at most four times the size of what they gather (`compile::lower`'s
`gathers_rows`): `table[idx]` of 4096 rows of 1024 floats from a 1024 x 1024 table took
22 ms from the storage buffer, 9-10 through a texture. Element gathers and gathers from a
large table keep the storage loads.

Against jax cpu, exactly, with the texture forced, with storage loads forced, and as they
come: rows of four, of five and six (not whole texels), whole rows and rows sliced out,
indices out of range (clamped), three-dimensional tables, integer tables, a gather fused
with arithmetic and one summed by a reduction; and the dump shows which input takes the
texture."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(31)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(n, hi, lo=0):
    return RNG.integers(lo, hi, size=n).astype(np.int32)


CASES = {
    "rows of 1024": (lambda t, i: t[i], [rand(1024, 1024), ints(4096, 1024)]),
    "rows of 4": (lambda t, i: t[i], [rand(5000, 4), ints(30000, 5000)]),
    "rows of 5": (lambda t, i: t[i], [rand(3000, 5), ints(20001, 3000)]),
    "rows of 6, times two plus one": (lambda t, i: t[i] * 2 + 1, [rand(999, 6), ints(7000, 999)]),
    "indices out of range (clamped)": (
        lambda t, i: jnp.take(t, i, axis=0, mode="clip"), [rand(512, 64), ints(4000, 700, -200)]),
    "negative indices (wrapped)": (lambda t, i: t[i], [rand(512, 64), ints(4000, 512, -512)]),
    "a slice of each row": (
        lambda t, i: lax.dynamic_slice_in_dim(t, 8, 40, axis=1)[i], [rand(600, 64), ints(3000, 600)]),
    "rows of a 3-d table": (lambda t, i: t[i], [rand(256, 16, 12), ints(1000, 256)]),
    "int32 rows": (lambda t, i: t[i], [RNG.integers(-9, 9, (800, 32)).astype(np.int32), ints(4000, 800)]),
    "rows summed": (lambda t, i: t[i].sum(1), [rand(512, 128), ints((64 * 40), 512).reshape(64, 40)]),
    "two-index rows": (
        lambda t, i, j: t[i, j], [rand(64, 64, 32), ints(5000, 64), ints(5000, 64)]),
    "element gather": (lambda t, i: t[i], [rand(100000), ints(100000, 100000)]),
}


@pytest.mark.parametrize("reads", ["default", "texture", "vec4"])
@pytest.mark.parametrize("name", list(CASES))
def test_row_gathers(gpu, name, reads, monkeypatch):
    if reads != "default":
        monkeypatch.setenv("WGPU_HLO_STREAM_READS", reads)
    f, args = CASES[name]
    cpu = jax.devices("cpu")[0]
    # A function of its own per setting: each compiles with it.
    got = np.asarray(jax.jit(lambda *a: f(*a))(*[jax.device_put(a, gpu) for a in args]))
    want = np.asarray(jax.jit(f)(*[jax.device_put(a, cpu) for a in args]))
    assert got.shape == want.shape and got.dtype == want.dtype
    if name == "rows summed":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("table,texture", [(1024, True), (4096, False)])
def test_row_gather_table_through_texture(gpu, tmp_path, monkeypatch, table, texture):
    if not cpu_kernel_class(gpu):
        pytest.skip("texture reads are the CPU adapters'")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    monkeypatch.setenv("WGPU_HLO_STREAM_READS", "texture")
    # As on AMD hosts, where read-once kernels take textures too (on Intel hosts none does,
    # `compile::lower`'s READ_ONCE_TEXTURE_WORDS, and the table stayed a buffer whatever its
    # size: this check failed there).
    monkeypatch.setenv("WGPU_HLO_TEXTURE_READS_ONCE", "0")
    t = rand(table, 1024)
    # 512 rows gathered: the 1024-row table is twice that, the 4096-row one eight times.
    i = ints(512, table)
    got = jax.jit(lambda t, i: t[i][:, :1024])(jax.device_put(t, gpu), jax.device_put(i, gpu))
    np.testing.assert_array_equal(np.asarray(got), t[i])
    (kernel,) = [p for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))
                 if "stablehlo.gather" in open(p).read()]
    line = [l for l in open(kernel).read().splitlines() if f"tensor<{table}x1024xf32>" in l][0]
    assert ("texture_2d" in line) == texture, line
