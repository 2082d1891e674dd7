"""A scatter computes its indices where it reads them when a kernel of cheap integer ops
computed them for it alone (`fusion::prologue::scatter_indices`, `compile::lower`): JAX's
`x.at[i]` wraps negative indices (`select(i < 0, i + n, i)`) in a kernel of its own before
every scatter, a launch and a pass over the indices that the scatter's kernels then read
again. Each case wraps negative indices, some past either end (dropped), against jax cpu, and
the program must have one kernel fewer than with `WGPU_HLO_SCATTER_INDEX_PROLOGUE=0` where
the scatter's plan takes the indices (the sorted, bucketed and privatized paths); elsewhere
(few windows, the in-place and atomic paths) the index kernel runs first as before."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import dumped_kernels

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(23)
N = 1 << 16
X = RNG.standard_normal(N).astype(np.float32)
# Every index in [-N, N) wraps into the array; the few past either end are dropped.
I = RNG.integers(-N, N, N).astype(np.int32)
I[::97] = -N - 3
I[::101] = N + 5
XI = RNG.integers(-1000, 1000, N).astype(np.int32)
ROWS = RNG.standard_normal((6000, 128)).astype(np.float32)
ROW_IDS = RNG.integers(-3000, 3000, 6000).astype(np.int32)

CASES = {
    # name: (program, arguments, whether the scatter's plan computes the indices inline)
    "add": (lambda x, i: jnp.zeros_like(x).at[i].add(x, mode="drop"), (X, I), True),
    "add_into_input": (lambda x, i, y: y.at[i].add(x, mode="drop"), (X, I, X[::-1].copy()),
                       True),
    "max": (lambda x, i: jnp.full(N, -1.0, jnp.float32).at[i].max(x, mode="drop"), (X, I),
            True),
    "set": (lambda x, i: jnp.zeros(N, jnp.float32).at[i].set(x, mode="drop"), (X, I), True),
    "shifted": (lambda x, i: jnp.zeros_like(x).at[(i & 4095) * 3 - 7].add(x, mode="drop"),
                (X, I), True),
    "rows": (lambda r, i: jnp.zeros((3000, 128), jnp.float32).at[i].add(r, mode="drop"),
             (ROWS, ROW_IDS), True),
    "int32": (lambda x, i: jnp.zeros_like(x).at[i].add(x, mode="drop"), (XI, I), False),
    "few_windows": (lambda x, i: jnp.zeros(64, jnp.float32).at[i[:100] % 64 - 32].add(
        x[:100], mode="drop"), (X, I), False),
}


def run(f, args, device):
    # A new function object each time: JAX's cache would hand back an earlier executable.
    return np.asarray(jax.jit(lambda *a: f(*a))(*jax.device_put(args, device)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_scatter_computes_its_wrapped_indices(gpu, case, tmp_path, monkeypatch):
    f, args, inline = CASES[case]
    want = run(f, args, jax.devices("cpu")[0])
    counts = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("WGPU_HLO_SCATTER_INDEX_PROLOGUE", switch)
        dump = tmp_path / switch
        monkeypatch.setenv("WGPU_HLO_DUMP", str(dump))
        got = run(f, args, gpu)
        monkeypatch.delenv("WGPU_HLO_DUMP")
        assert got.dtype == want.dtype and got.shape == want.shape
        # Sums of floats may associate differently (GPU-class sorted paths fold long runs by
        # chunks); test_scatter_swept.py checks the CPU class's bit for bit.
        if case in ("max", "set", "int32"):
            np.testing.assert_array_equal(got, want)
        else:
            scale = float(np.max(np.abs(want)))
            np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=2e-5)
        counts[switch] = dumped_kernels(str(dump))
    if inline:
        assert counts["1"] == counts["0"] - 1, counts
    else:
        assert counts["1"] <= counts["0"], counts
