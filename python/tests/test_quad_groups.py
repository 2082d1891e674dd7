"""Loop kernels on CPU adapters compute four elements per invocation and read their inputs a
`vec4` at a time where the four positions are consecutive in them (`Quads` in
`src/codegen/expr.rs`). Checked here against jax cpu: a concatenation along the innermost
dimension whose parts are multiples of 4 wide chooses its part once per four positions (a
fused LSTM cell's gate gradients: four parts, each a product of slices of the scan's stacked
residuals), parts of other widths, concatenations along outer dimensions (the part chosen
once per four positions too, which share every coordinate but the innermost), one
concatenation read at two rows in one kernel, pads of outer dimensions (one test per four
positions), and reshapes that keep or change the innermost extent."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from conftest import compare_with_cpu, cpu_kernel_class

RNG = np.random.default_rng(17)


def arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_gate_gradients_of_stacked_residuals(gpu, tmp_path, monkeypatch):
    stacks = [arr(12, 16, 32) for _ in range(6)]
    g, h = arr(16, 32), arr(16, 32)

    def f(i, g, h, *st):
        s = [lax.dynamic_index_in_dim(x, i, keepdims=False) for x in st]
        parts = [g * s[0] * (h + s[1]), g * s[2], (h + s[3]) * s[4], s[5] * g * h]
        return jnp.concatenate(parts, axis=1) * 0.5 + 1.0

    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, np.int32(7), g, h, *stacks, tol=1e-6)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if cpu_kernel_class(gpu):
        # One kernel: the part chosen once per four positions, every input read as vec4s.
        (path,) = glob.glob(os.path.join(tmp_path, "*.wgsl"))
        text = open(path).read()
        assert text.count("var c_") == 1 and text.count("(read as vec4s)") == 8


@pytest.mark.parametrize("widths", [(4, 8, 12), (6, 10), (3, 1, 4), (128,), (0, 8, 8)])
def test_concatenation_widths(gpu, widths):
    xs = [arr(8, w) for w in widths]

    def f(*xs):
        return jnp.tanh(jnp.concatenate([x * (k + 1) for k, x in enumerate(xs)], axis=1))

    compare_with_cpu(gpu, f, *xs, tol=1e-6)


def test_concatenation_along_rows(gpu):
    a, b = arr(3, 16), arr(5, 16)
    compare_with_cpu(gpu, lambda a, b: jnp.concatenate([a * 2, b - 1], axis=0) + 0.5, a, b,
                     tol=1e-6)


OUTER = {
    # Parts of any number of rows (3, 5, 1, 7): a group of four lies in one row of one part.
    "rows of 3, 5, 1, 7": (lambda a, b, c, d: jnp.concatenate([a, b, c, d], 0),
                           [(3, 16), (5, 16), (1, 16), (7, 16)]),
    "reversed rows": (lambda a, b: jnp.concatenate([a, b[::-1]], 0)[::-1] * 3.0, [(6, 32), (10, 32)]),
    "middle of three dimensions": (lambda a, b: jnp.concatenate([jnp.exp(a), b], 1), [(2, 3, 8), (2, 5, 8)]),
    "stack along a middle axis": (lambda a, b, c: jnp.stack([a, b * 2, c], 1), [(7, 12), (7, 12), (7, 12)]),
    "rows not a multiple of four wide": (lambda a, b: jnp.concatenate([a, b], 0) - 1, [(4, 6), (3, 6)]),
    "rows read at two places": (lambda a, b: (lambda c: c[1:] + c[:-1] * 2)(jnp.concatenate([a, b], 0)),
                                [(5, 8), (6, 8)]),
    "with an empty part": (lambda a, b, c: jnp.concatenate([a, b, c], 0) * 2, [(4, 8), (0, 8), (2, 8)]),
    "transposed after": (lambda a, b: jnp.concatenate([a, b], 0).T + 1, [(12, 8), (4, 8)]),
}


@pytest.mark.parametrize("name", list(OUTER))
def test_concatenations_along_outer_dimensions(gpu, name):
    """A concatenation along an outer dimension chooses its part once per group of four
    positions (they share every coordinate but the innermost): the same values as jax cpu,
    for parts of any size, reversed, in the middle of three dimensions, stacked, in rows
    that are not groups of four, read at two rows and transposed."""
    f, shapes = OUTER[name]
    compare_with_cpu(gpu, f, *[arr(*s) for s in shapes], tol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.float32])
def test_concatenation_along_rows_copies_exactly(gpu, dtype):
    """Large enough for the loop kernel's groups: the parts' bits, each once."""
    parts = [(RNG.integers(-2**31, 2**31 - 1, size=(r, 256), dtype=np.int64)).astype(dtype)
             if dtype != np.float32 else arr(r, 256) for r in (100, 37, 3)]
    f = jax.jit(lambda a, b, c: jnp.concatenate([a, b, c], 0))
    got = np.asarray(f(*jax.device_put(parts, gpu)))
    np.testing.assert_array_equal(got.view(np.uint32), np.concatenate(parts, 0).view(np.uint32))


def test_concatenation_along_rows_loads_each_group_once(gpu, tmp_path, monkeypatch):
    if not cpu_kernel_class(gpu):
        pytest.skip("groups of four are the CPU adapters' loop kernels")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    a, b = arr(64, 512), arr(32, 512)
    compare_with_cpu(gpu, lambda a, b: jnp.concatenate([a, b], 0) * 0.5, a, b, tol=1e-6)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    (path,) = glob.glob(os.path.join(tmp_path, "*.wgsl"))
    text = open(path).read()
    # One vec4 chosen per invocation's four elements: one branch, not one per element.
    assert text.count("var c_") == 1, text
    assert text.count("} else {") == 1, text


PADS = {
    "rows around": (lambda a: jnp.pad(a, ((3, 5), (0, 0)), constant_values=7.0) * 2, (64, 256)),
    "rows cropped": (lambda a: lax.pad(a, 1.5, ((-2, 3, 0), (0, 0, 0))) + 1, (9, 16)),
    "rows interior": (lambda a: lax.pad(a, -1.0, ((1, 2, 2), (0, 0, 0))), (5, 8)),
    "middle of three": (lambda a: jnp.pad(a * 3, ((1, 0), (2, 1), (0, 0))), (3, 4, 12)),
    "innermost too": (lambda a: jnp.pad(a, ((1, 1), (2, 2))), (6, 8)),
    "rows not a multiple of four wide": (lambda a: jnp.pad(a, ((2, 2), (0, 0))) * 3, (5, 6)),
    "int rows": (lambda a: jnp.pad((a * 100).astype(jnp.int32), ((4, 4), (0, 0)), constant_values=-9), (8, 32)),
}


@pytest.mark.parametrize("name", list(PADS))
def test_pads_of_outer_dimensions(gpu, name):
    """A pad of outer dimensions only tests once per group of four positions whether they
    lie in the operand: the same values as jax cpu, cropped, with interior padding, in the
    middle of three dimensions, of integers; pads of the innermost dimension and rows that are
    not groups of four take each position on its own."""
    f, shape = PADS[name]
    compare_with_cpu(gpu, f, arr(*shape), tol=0)


def test_one_concatenation_read_at_two_rows(gpu):
    a, b = arr(9, 8), arr(9, 12)

    def f(a, b):
        c = jnp.concatenate([jnp.sin(a), jnp.cos(b)], axis=1)
        return c[1:] * 2 + c[:-1]

    compare_with_cpu(gpu, f, a, b, tol=1e-6)


@pytest.mark.parametrize("shape", [(4, 8, 128), (2, 16, 128), (64, 64), (32 * 128,), (8, 512)])
def test_reshapes(gpu, shape):
    x, y = arr(32, 128), arr(*shape)

    def f(x, y):
        return jnp.exp(x * 0.1).reshape(shape) * y + x.reshape(shape)

    compare_with_cpu(gpu, f, x, y, tol=1e-6)


@pytest.mark.parametrize("start, stop, step", [(0, 128, 1), (128, 256, 1), (4, 68, 1), (2, 66, 1),
                                               (0, 128, 2), (384, 512, 1)])
def test_slices_along_the_innermost_dimension(gpu, start, stop, step):
    # A fused cell's gates: slices of one product at multiples of its width (grouped reads
    # from starts that are multiples of 4 with stride 1; others read a scalar at a time).
    z, h = arr(16, 512), arr(16, 512)

    def f(z, h):
        g = z[:, start:stop:step]
        return jax.nn.sigmoid(g) * jnp.tanh(h[:, start:stop:step] + g)

    compare_with_cpu(gpu, f, z, h, tol=1e-6)


@pytest.mark.parametrize(
    "shape,axes",
    [((4, 2048, 1024), (1,)), ((32, 64, 96), (1,)), ((6, 5, 300, 8), (1, 2)), ((3, 4000, 12), (1,))],
)
@pytest.mark.parametrize("op", ["sum", "max", "var", "argmax"])
def test_reductions_over_middle_dimensions(gpu, shape, axes, op):
    """Reductions keeping a leading and the innermost dimension (sequence pooling of a
    `(batch, seq, features)`, per-image sums of NHWC) read four columns per group."""
    x = arr(*shape) + 2.0
    f = {
        "sum": lambda x: jnp.sum(x, axes),
        "max": lambda x: jnp.max(x, axes),
        "var": lambda x: jnp.var(x, axes),
        "argmax": lambda x: jnp.argmax(x, axes[0]),
    }[op]
    compare_with_cpu(gpu, f, x, tol=2e-5)


def test_middle_dimension_sum_loads_each_group_once(gpu, tmp_path, monkeypatch):
    """The four outputs of a group share their outer coordinates, so the group is one load:
    computed from each output, they differed in text and each output loaded its own `vec4`
    (lavapipe: 4 x 2048 x 1024 summed over its middle dimension in 29 ms, against 6.8 ms
    for 8192 x 1024 over its rows)."""
    if not cpu_kernel_class(gpu):
        pytest.skip("four columns per thread are the CPU adapter class's column reduction")
    x = arr(4, 2048, 1024) + 2.0
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, lambda x: jnp.sum(x, 1), x, tol=1e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    (path,) = glob.glob(os.path.join(tmp_path, "*partials.wgsl"))
    text = open(path).read()
    accumulators = text.count("var acc_")
    loads = text.count("in0_quad(") - 1  # less the function's definition
    assert accumulators >= 16 and 4 * loads <= accumulators + 4, (accumulators, loads)


@pytest.mark.parametrize("n,m,d", [(256, 256, 64), (100, 37, 12), (64, 65, 20), (33, 17, 7)])
def test_pairwise_distances(gpu, n, m, d):
    """A row reduction over broadcast operands (`sum((x[:, None] - y[None]) ** 2, -1)`, the
    distance matrix of a kNN or an RBF kernel, and its exponential)."""
    x, y = arr(n, d), arr(m, d)

    def f(x, y):
        d2 = jnp.sum((x[:, None, :] - y[None, :, :]) ** 2, -1)
        return d2, jnp.exp(-0.5 * d2 / d)

    compare_with_cpu(gpu, f, x, y, tol=2e-5)


def test_pairwise_distance_reads_groups(gpu, tmp_path, monkeypatch):
    """The subgroup row reduction reads its operands by groups of four through broadcasts
    too (`Quads::rows`): before, each element was its own load, and lavapipe took 75-128 ms
    for the 256 x 256 x 64 distance matrix, then 17-20 (jax cpu 0.6). Such expanded
    reductions now take the tiled kernel (`test_pairwise.py`), and rows of 64 or fewer a
    thread per row (`test_short_rows_take_a_thread_each`); both are switched off here to
    keep the subgroup row reduction's grouped reads covered."""
    if not cpu_kernel_class(gpu):
        pytest.skip("grouped reads are the CPU adapter class's")
    x = arr(256, 64)
    monkeypatch.setenv("WGPU_HLO_PAIRWISE", "0")
    monkeypatch.setenv("WGPU_HLO_ROW_QUADS_MAX", "0")
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, lambda x: jnp.sum((x[:, None] - x[None]) ** 2, -1), x, tol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    (path,) = glob.glob(os.path.join(tmp_path, "*.wgsl"))
    text = open(path).read()
    assert "subgroup per row" in text.splitlines()[0], text.splitlines()[0]
    # Every load a group (read as vec4s, or through a texture on AMD hosts, whose element
    # helper `in0_at` is then defined but not called).
    assert "in0_quad(" in text and text.count("in0_at(") == text.count("fn in0_at("), text[:2000]


@pytest.mark.parametrize("length", [4, 32, 60, 64, 128])
@pytest.mark.parametrize("form", ["sum", "dot", "max", "argmax", "mean_sq_int"])
def test_short_rows_take_a_thread_each(gpu, tmp_path, monkeypatch, length, form):
    """Rows of at most 64 elements (a multiple of 4) take a thread per row reading its row by
    groups of four on CPU adapters: a subgroup per row spent more on each row's shuffles and
    store than on its loads, a thread reading one element at a time more on its loads
    (lavapipe, sums of 4M floats in rows of 4 / 32 / 64: 6.3-8.2 / 10.2-11.3 / 6.0-6.4 ms
    -> 3.4 / 2.3-3.0 / 2.3-2.5). Rows of 128 keep the subgroup (3.9 against 6.0 ms)."""
    rows = (1 << 16) // length
    a, b = arr(rows, length), arr(rows, length)
    f = {
        "sum": lambda a, b: jnp.sum(a, -1),
        "dot": lambda a, b: jnp.sum(a * b, -1),
        "max": lambda a, b: jnp.max(a, -1),
        "argmax": lambda a, b: jnp.argmax(a * b, -1),
        "mean_sq_int": lambda a, b: jnp.sum((a * 10).astype(jnp.int32) ** 2, -1),
    }[form]
    monkeypatch.setenv("WGPU_HLO_DUMP", str(tmp_path))
    compare_with_cpu(gpu, f, a, b, tol=2e-5)
    monkeypatch.delenv("WGPU_HLO_DUMP")
    if cpu_kernel_class(gpu) and length % 4 == 0 and length >= 32:
        heads = [open(p).readline() for p in glob.glob(os.path.join(tmp_path, "*.wgsl"))]
        reduce = [h for h in heads if "reduce " in h]
        assert reduce and all(("subgroup per row" in h) == (length > 64) for h in reduce), heads
