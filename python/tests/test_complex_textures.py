"""Complex inputs read through textures: a texel holds two complex64 values, and an FFT pass
reads its complex source along its lines through one (`texture_reads::PAIR_MARK`); other
kernels keep complex inputs in their buffers. Against jax cpu, with texture reads as they
come, forced on every eligible input (`WGPU_HLO_TEXTURE_READS=all`) and off: FFTs of complex
and real inputs (odd line counts too), elementwise products and conjugates, reductions,
gathers at data-dependent places, odd lengths (the last texel half filled); and the dump
shows the passes' textures."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import compare_with_cpu

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(29)


def cplx(*shape):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)


CASES = {
    "fft of 1024-point lines": (lambda z: jnp.fft.fft(z), [(64, 1024)], 2e-4),
    "fft of an odd number of lines": (lambda z: jnp.fft.fft(z * 2), [(33, 512)], 2e-4),
    "ifft along the first axis": (lambda z: jnp.fft.ifft(z, axis=0), [(256, 24)], 1e-5),
    "fft of 3 x 5 x 7 points (Bluestein, odd radices)": (lambda z: jnp.fft.fft(z), [(40, 105)], 1e-4),
    "ifft of fft, 2-d": (lambda z: jnp.fft.ifft2(jnp.fft.fft2(z)), [(4, 128, 96)], 1e-5),
    "rfft2 magnitude": (lambda x: jnp.abs(jnp.fft.rfft2(x.real)), [(8, 64, 64)], 2e-4),
    "product and conjugate": (lambda a, b: a * jnp.conj(b) + 1j * a, [(3001,), (3001,)], 1e-6),
    "sum of rows": (lambda a: jnp.sum(a * a, axis=1), [(257, 33)], 1e-5),
    "gather": (lambda a, i: a[i] * 2, [(5001,), None], 1e-6),
    "odd length exp": (lambda a: jnp.exp(a * 0.1), [(4099,)], 1e-5),
}


def args_of(shapes):
    out = []
    for s in shapes:
        out.append(cplx(*s) if s is not None else RNG.integers(0, 5001, size=7777).astype(np.int32))
    return out


@pytest.mark.parametrize("reads", ["default", "all", "0"])
@pytest.mark.parametrize("name", list(CASES))
def test_complex_inputs(gpu, name, reads, monkeypatch):
    if reads != "default":
        monkeypatch.setenv("WGPU_HLO_TEXTURE_READS", reads)
    f, shapes, tol = CASES[name]
    # A function of its own per setting: each compiles with it.
    compare_with_cpu(gpu, lambda *a: f(*a), *args_of(shapes), tol=tol)


def test_fft_passes_read_lines_through_textures(gpu, tmp_path, monkeypatch):
    import glob
    import os

    from conftest import cpu_kernel_class

    if not cpu_kernel_class(gpu):
        pytest.skip("texture reads are the CPU adapters'")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    # Read-once kernels take textures on AMD hosts only unless this is 0.
    monkeypatch.setenv("WGPU_HLO_TEXTURE_READS_ONCE", "0")
    compare_with_cpu(gpu, lambda z: jnp.fft.fft(z + 1), cplx(16, 1024), tol=2e-4)
    passes = sorted(glob.glob(os.path.join(tmp_path, "*_pass*.wgsl")))
    assert len(passes) == 2, passes
    for p in passes:
        first = [l for l in open(p).read().splitlines() if "@binding(0)" in l][0]
        assert "complex<f32>> (read through a texture" in first, first
