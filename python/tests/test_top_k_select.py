"""`top_k` of long rows by radix selection (`src/codegen/op_kernels/top_k.rs`): tiles with no
candidate left after a pass write an empty histogram without reading their elements, and
tiles with nothing chosen place nothing; on CPU adapters a row with few elements at or below
the bound is selected directly, and the passes skip it. The values and indices must equal jax cpu's bit for
bit, ties (first position wins), NaNs, signed zeros and k close to n included, and inputs that
stress the bound on the k-th key CPU adapters take first."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

RNG = np.random.default_rng(0)
CASES = {
    "random_1M": (RNG.standard_normal(1 << 20).astype(np.float32), 100),
    "rows": (RNG.standard_normal((8, 50000)).astype(np.float32), 64),
    "ties": (RNG.integers(0, 5, 300000).astype(np.float32), 1000),
    "ties_int": (RNG.integers(0, 3, 200000).astype(np.int32), 77),
    "nan": (np.where(RNG.random(100000) < 0.001, np.nan,
                     RNG.standard_normal(100000)).astype(np.float32), 500),
    "all_equal": (np.ones(70000, np.float32), 33),
    "k_near_n": (RNG.standard_normal(5000).astype(np.float32), 4000),
    "signed_zeros": (np.where(RNG.random(100000) < 0.5, -0.0, 0.0).astype(np.float32), 50),
    # The bound on the k-th key from each lane's best (CPU adapters, `bounded` in top_k.rs):
    # the largest values all in the last lanes, all in the first, ties of the k-th value
    # across many lanes, and k close to half the lanes.
    "ascending": (np.arange(300000, dtype=np.float32), 200),
    "descending": (np.arange(300000, dtype=np.float32)[::-1].copy(), 200),
    "ties_across_lanes": (np.where(np.arange(400000) % 997 == 0, 1.0, 0.0).astype(np.float32), 300),
    "half_the_lanes": (RNG.standard_normal(1 << 20).astype(np.float32), 2000),
    "negative_int": (-RNG.integers(0, 1000, 500000).astype(np.int32), 150),
    # Rows whose elements at or below the bound are few take the direct selection (ranked in
    # one workgroup, the passes skip them); rows with many (ties) take the passes, in the same
    # launches: both kinds in one batch, and k at both ends of what the direct one takes.
    "mixed_rows": (np.stack([RNG.standard_normal(60000), np.ones(60000),
                             RNG.integers(0, 4, 60000), RNG.standard_normal(60000)]).astype(np.float32), 64),
    "k_one": (RNG.standard_normal(200000).astype(np.float32), 1),
    "k_256": (RNG.standard_normal((3, 100000)).astype(np.float32), 256),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_top_k_selection_matches_cpu_bits(gpu, case):
    x, k = CASES[case]
    f = jax.jit(lambda x: jax.lax.top_k(x, k))
    gv, gi = (np.asarray(a) for a in f(jax.device_put(x, gpu)))
    cv, ci = (np.asarray(a) for a in f(jax.device_put(x, jax.devices("cpu")[0])))
    np.testing.assert_array_equal(gi, ci)
    assert gv.dtype == cv.dtype
    np.testing.assert_array_equal(gv.view(np.uint32 if gv.dtype == np.float32 else gv.dtype),
                                  cv.view(np.uint32 if cv.dtype == np.float32 else cv.dtype))


@pytest.mark.parametrize("case", ["random_1M", "rows", "nan"])
def test_top_k_beside_a_sort_matches_cpu_bits(gpu, case):
    """The same selections in one program with a sort, whose kernels merge with the top_k
    passes' launches: each histogram pass reads the one before, so the histograms must stay
    one buffer (they got fresh ones once launches merged; wrong values with the GPU kernel
    class, caught by CI)."""
    x, k = CASES[case]
    f = jax.jit(lambda x: (jax.numpy.sort(x, axis=-1), jax.lax.top_k(x, k)))
    got = jax.tree_util.tree_leaves(f(jax.device_put(x, gpu)))
    want = jax.tree_util.tree_leaves(f(jax.device_put(x, jax.devices("cpu")[0])))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
