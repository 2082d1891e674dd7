"""Loop kernels that read an input across the rows of a transpose run by tiles (each invocation
a 4 x 4 block, `loop_kernel::transposing_tiles`): transposes of every rank and permutation,
fused with elementwise work, broadcasts, slices and a second output, at sizes that fill the
tiles and sizes that leave them ragged, against jax cpu. Transposes and the integer and
float arithmetic here are exact, so results must be bit-identical."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

CPU = None


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run(device, f, *args):
    out = jax.jit(f)(*[jax.device_put(a, device) for a in args])
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def same_as_cpu(gpu, f, *args):
    got = run(gpu, f, *args)
    want = run(jax.devices("cpu")[0], f, *args)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def tiled_kernels(gpu, tmp_path, monkeypatch, f, *args):
    """Kernels of `jit(f)` that run by transposing tiles (from the dump), after checking the
    results against cpu."""
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    same_as_cpu(gpu, f, *args)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    n = 0
    for p in glob.glob(os.path.join(tmp_path, "*.wgsl")):
        with open(p) as fh:
            n += "by tiles of" in fh.readline()
    return n


CASES = [
    # (name, function, shapes)
    ("2d", lambda x: x.T, [(512, 768)]),
    ("2d ragged tiles", lambda x: x.T, [(100, 260)]),
    ("2d tall", lambda x: x.T, [(4096, 8)]),
    ("2d wide", lambda x: x.T, [(8, 4096)]),
    ("3d swap last two", lambda x: jnp.swapaxes(x, 1, 2), [(6, 96, 132)]),
    ("3d (2, 0, 1)", lambda x: jnp.transpose(x, (2, 0, 1)), [(36, 20, 64)]),
    ("3d (1, 2, 0)", lambda x: jnp.transpose(x, (1, 2, 0)), [(64, 12, 40)]),
    ("3d reversed", lambda x: jnp.transpose(x, (2, 1, 0)), [(40, 6, 128)]),
    ("4d nchw to nhwc", lambda x: jnp.transpose(x, (0, 2, 3, 1)), [(4, 32, 14, 28)]),
    ("4d nhwc to nchw", lambda x: jnp.transpose(x, (0, 3, 1, 2)), [(4, 14, 28, 32)]),
    ("fused arithmetic", lambda x, y: x.T * 2.0 + y, [(256, 320), (320, 256)]),
    ("row bias", lambda x, b: x.T - b, [(256, 320), (256,)]),
    ("column bias", lambda x, b: x.T * b[:, None], [(256, 320), (320,)]),
    ("x.T + x", lambda x: x.T + x, [(384, 384)]),
    ("two outputs", lambda x: (x.T + 1.0, x.T * x.T), [(256, 512)]),
    ("transpose of a fused product", lambda x, y: (x * y).T, [(260, 300), (260, 300)]),
    ("slice after transpose", lambda x: x.T[8:200, 4:132], [(256, 320)]),
    ("transposed slice", lambda x: x[4:260, 8:136].T, [(300, 320)]),
    ("int32", lambda x: (x.astype(jnp.int32).T * 3) ^ 5, [(256, 320)]),
    ("ragged extents (not tiled)", lambda x: x.T + 1.0, [(257, 131)]),
]


@pytest.mark.parametrize("name,f,shapes", CASES, ids=[c[0] for c in CASES])
def test_transposes_match_cpu(gpu, name, f, shapes):
    args = [normal(s, i) * 100 for i, s in enumerate(shapes)]
    same_as_cpu(gpu, f, *args)


def test_transpose_runs_by_tiles(gpu, tmp_path, monkeypatch):
    assert tiled_kernels(gpu, tmp_path, monkeypatch, lambda x, y: x.T * 2.0 + y,
                         normal((512, 384)), normal((384, 512), 1)) == 1


def test_tiles_switch_off(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("WGPU_HLO_TRANSPOSE_TILES", "0")
    assert tiled_kernels(gpu, tmp_path, monkeypatch, lambda x: x.T, normal((512, 384))) == 0
