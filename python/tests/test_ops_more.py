"""Ops JAX's own tests reach for beyond the basics, on `wgpu` against JAX's `cpu` backend:
`rng_bit_generator` (bit-exact), f8 types, collectives over one device, copies."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax


CPU = jax.devices("cpu")[0]


def on(device, f, *args):
    out = jax.jit(f)(*[jax.device_put(a, device) for a in args])
    return jax.tree_util.tree_map(np.asarray, out)


def same_bits(gpu, f, *args):
    g, c = on(gpu, f, *args), on(CPU, f, *args)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(c)):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


ALGORITHMS = [
    lax.RandomAlgorithm.RNG_DEFAULT,
    lax.RandomAlgorithm.RNG_THREE_FRY,
    lax.RandomAlgorithm.RNG_PHILOX,
]
CASES = [("uint32", s) for s in [(), (0,), (7,), (5, 7), (2, 3, 5)]] + [
    ("uint8", (9, 1, 3)),
    ("uint16", (5, 7)),
]


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_rng_bit_generator_bits(gpu, algorithm):
    key = np.array([3, 1, 4, 2], np.uint32)
    same_bits(
        gpu,
        lambda k: [lax.rng_bit_generator(k, s, dtype=d, algorithm=algorithm) for d, s in CASES],
        key,
    )


def test_rng_bit_generator_u64(gpu):
    with jax.enable_x64(True):
        for key in [np.array([1, 2], np.uint64), np.array([2**64 - 1, 2**64 - 3], np.uint64)]:
            same_bits(
                gpu,
                lambda k: [
                    lax.rng_bit_generator(k, s, dtype="uint64", algorithm=a)
                    for s in [(5, 7), (33,)]
                    for a in ALGORITHMS[1:]
                ],
                key,
            )


def test_rng_bit_generator_vmap(gpu):
    keys = np.arange(2 * 3 * 4).reshape((2, 3, 4)).astype(np.uint32)
    same_bits(gpu, jax.vmap(jax.vmap(lambda k: lax.rng_bit_generator(k, shape=(5, 7)))), keys)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_random_with_rbg(gpu, impl):
    def draws(seed):
        k = jax.random.key(seed, impl=impl)
        k1, k2 = jax.random.split(k)
        return (
            jax.random.key_data(k1),
            jax.random.key_data(jax.random.fold_in(k, 3)),
            jax.random.bits(k1, (9,), jnp.uint8),
            jax.random.bits(k2, (200,)),
            jax.random.uniform(k1, (7, 5)),
            jax.random.randint(k2, (13,), 0, 10),
        )

    same_bits(gpu, draws, np.int32(42))
    # normal() goes through erf_inv: the bits agree, its last ulp may not.
    n = [on(d, lambda s: jax.random.normal(jax.random.key(s, impl=impl), (100,)), np.int32(7))
         for d in (gpu, CPU)]
    np.testing.assert_allclose(n[0], n[1], rtol=1e-6, atol=1e-6)


NARROW_FLOATS = [
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e8m0fnu",
    "float4_e2m1fn",
]


def narrow_float_probes(t):
    """f32 values that probe `t`'s rounding: specials, every finite value, the midpoints between
    neighbours (ties) and their neighbours, overflow, subnormals, a spread of magnitudes."""
    codes = np.arange(2 ** (8 if t.itemsize * 8 == 8 and "float4" not in t.name else 4), dtype=np.uint8)
    fin = codes.view(t).astype(np.float32)
    fin = np.sort(fin[np.isfinite(fin)])
    mids = ((fin[1:].astype(np.float64) + fin[:-1]) / 2).astype(np.float32)
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(500).astype(np.float32) * np.float32(10.0) ** rng.integers(-12, 12, 500)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, 1e-40, 1.5 * 2.0**-127], np.float32)
    up, down = np.float32(np.inf), np.float32(-np.inf)
    with np.errstate(over="ignore"):
        doubled = fin * np.float32(2)
    probes = [specials, spread, fin, -fin, mids, np.nextafter(mids, up), np.nextafter(mids, down), doubled]
    return codes.view(t), np.concatenate(probes).astype(np.float32)


@pytest.mark.parametrize("name", NARROW_FLOATS)
def test_narrow_float_converts(gpu, name):
    t = jnp.dtype(getattr(jnp, name))
    codes, probes = narrow_float_probes(t)
    same_bits(gpu, lambda c, x: (c.astype(jnp.float32), x.astype(t), c.astype(jnp.bfloat16)), codes, probes)
    # ml_dtypes agrees with XLA up to the sign of NaNs, and for normal f32 inputs: how it rounds a
    # subnormal f32 depends on the host (CI once saw 0x5fffff give float8_e8m0fnu code 0 where
    # this host and XLA's cpu backend give 1), so subnormal probes are checked against jax cpu
    # alone, by `same_bits` above.
    enc = on(gpu, lambda x: x.astype(t), probes)
    want = probes.astype(t)
    keep = ~np.isnan(probes) & ((probes == 0) | ~(np.abs(probes) < np.finfo(np.float32).tiny))
    np.testing.assert_array_equal(enc.view(np.uint8)[keep], want.view(np.uint8)[keep])


@pytest.mark.parametrize(
    "lhs_t,rhs_t",
    [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn"),
     ("float8_e4m3fnuz", "float8_e5m2fnuz"), ("float8_e4m3fn", "float8_e4m3fn")],
)
def test_narrow_float_dots(gpu, lhs_t, rhs_t):
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (4, 3)).astype(getattr(jnp, lhs_t))
    y = rng.uniform(-3, 3, (3, 6)).astype(getattr(jnp, rhs_t))
    same_bits(
        gpu,
        lambda a, b: (
            lax.dot(a, b, preferred_element_type=jnp.float32),
            lax.dot(a.astype(jnp.float32), b.astype(jnp.float32)),
            lax.dot(a, a.T) if lhs_t == rhs_t else a,
            jnp.sum(a, axis=1),
            a * 2 + 1,
        ),
        x, y,
    )


def test_copies_and_buffer_identity(gpu):
    x = jax.device_put(np.arange(5, dtype=np.float32), gpu)
    y = jnp.array(x, copy=True)
    np.testing.assert_array_equal(np.asarray(y), np.arange(5, dtype=np.float32))
    assert y.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    assert lax.convert_element_type(x, jnp.float32).unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
    assert lax.convert_element_type(x, jnp.int32).unsafe_buffer_pointer() != x.unsafe_buffer_pointer()


def test_dce_sink_keeps_its_operand(gpu):
    def f(x):
        lax.dce_sink(x + 1, prevent_mlir_dce=True)
        return x * 2

    with jax.default_device(gpu):
        x = jnp.array(3.0)
        text = jax.jit(f).lower(x).compile().as_text()
        assert "dce_sink" in text and "add" in text
        assert float(jax.jit(f)(x)) == 6.0


def test_collectives_over_one_device(gpu):
    """Inside pmap and shard_map over one device, collectives are identities (one participant)
    and axis indices are 0: the results equal cpu's."""
    from jax import shard_map
    from jax.sharding import Mesh, PartitionSpec as P

    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4)

    def body(v):
        return (
            lax.psum(v, "i"),
            lax.pmax(v, "i"),
            lax.pmean(v, "i"),
            lax.all_gather(v, "i"),
            lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
            lax.all_to_all(v, "i", 0, 0, tiled=True),
            lax.ppermute(v, "i", [(0, 0)]),
            lax.axis_index("i"),
        )

    def run(d):
        pm = jax.pmap(body, axis_name="i", devices=[d])(x)
        mesh = Mesh(np.array([d]), ("i",))
        sm = jax.jit(
            shard_map(
                lambda v: (lax.psum(v, "i"), lax.all_gather(v, "i"), lax.axis_index("i")[None]),
                mesh=mesh,
                in_specs=P("i"),
                out_specs=(P("i"), P("i"), P("i")),
                check_vma=False,
            )
        )(jax.device_put(x[0], d))
        return [np.asarray(a) for a in (*pm, *sm)]

    for a, b in zip(run(gpu), run(CPU)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _same_or_both_nan(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (np.isnan(a) & np.isnan(b)) | (a.view(np.uint32) == b.view(np.uint32))


def test_max_min_ieee(gpu):
    """max / min / relu on every pair of NaN, signed zeros, infinities and normals, and max /
    min reductions over rows, columns and all of a matrix holding them: the same bits as
    jax cpu (any NaN for NaN). Subnormals are left out: jax cpu flushes them."""
    vals = np.array([np.nan, -np.nan, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.5], np.float32)
    a = np.repeat(vals, len(vals))
    b = np.tile(vals, len(vals))
    for f in (jnp.maximum, jnp.minimum, lambda x, y: jax.nn.relu(x) + 0 * y):
        g, c = on(gpu, f, a, b), on(CPU, f, a, b)
        bad = ~_same_or_both_nan(g, c)
        assert not bad.any(), (a[bad], b[bad], g[bad], c[bad])
    rows = np.array([[0.0, -0.0, -1.0], [-0.0, -0.0, -5.0], [np.nan, 1.0, 2.0],
                     [1.0, np.nan, -np.inf], [-np.inf, -np.inf, -np.inf], [-0.0, 0.0, -0.0]],
                    np.float32)
    rows = np.tile(rows, (1, 50))
    for f in (lambda x: x.max(axis=1), lambda x: x.min(axis=1), lambda x: x.max(axis=0),
              lambda x: x.min(axis=0), lambda x: x.max(), lambda x: x.min()):
        g, c = on(gpu, f, rows), on(CPU, f, rows)
        assert _same_or_both_nan(g, c).all(), (g, c)


def test_odeint_of_a_pytree_state(gpu):
    # JAX's ode_test: odeint of a (scalar, [1,1,1]) state concatenates 1-element pieces, so
    # some concatenation operands were read at constant positions outside them in branches
    # that never run; WGSL rejected the kernel ("Accessing index 4294967295 is out of bounds").
    from jax.experimental.ode import odeint

    def dynamics(y, _t):
        return jax.tree.map(jnp.negative, y)

    y0 = (np.array(-0.1, np.float32), np.array([[[0.1]]], np.float32))
    ts = np.linspace(0.0, 1.0, 11).astype(np.float32)

    def loss(y0):
        a, b = odeint(dynamics, y0, ts)
        return a.sum() + b.sum()

    results = []
    for dev in (gpu, jax.devices("cpu")[0]):
        with jax.default_device(dev):
            val, grad = jax.jit(jax.value_and_grad(loss))(y0)
            results.append([np.asarray(val)] + [np.asarray(g) for g in jax.tree.leaves(grad)])
    for g, c in zip(*results):
        np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("starts", [(5, 0, 0), (3, 7, -4), (-2, 100, 1 << 20)])
def test_dynamic_slices_whole_along_inner_dimensions(gpu, starts):
    """Dimensions a `dynamic_slice` takes whole start at 0 whatever their start index (it is
    clamped), and their elements are read four at a time: bit-identical to cpu, in a fused
    kernel and with starts out of range."""
    xs = np.random.default_rng(5).standard_normal((6, 8, 64)).astype(np.float32)
    y = np.random.default_rng(6).standard_normal((1, 8, 64)).astype(np.float32)

    def f(xs, y, a, b, c):
        s = lax.dynamic_slice(xs, (a, b, c), (1, 8, 64))
        t = lax.dynamic_slice(xs, (a + 1, c, b), (1, 8, 64))
        return s * 2.0 + y - t, lax.dynamic_slice(xs, (a, b, c), (2, 4, 64))

    same_bits(gpu, f, xs, y, *(np.int32(v) for v in starts))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_16bit_float_bits_survive_data_movement(gpu, name):
    """Every 16-bit pattern, signaling NaNs and NaN payloads included, comes out of views,
    transposes, slices, concatenations, selects and a scan's stacking bit for bit as jax cpu
    moves it (kernels compute these types as f32; writing one back kept a NaN's payload but set
    its quiet bit, so data packed into bfloat16 arrays changed, silently)."""
    t = getattr(jnp, name)
    codes = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    x = codes.view(t)
    mask = (codes % 3 == 0)

    def moves(x, c, m):
        stacked = lax.scan(lambda s, r: (s, r[::-1]), 0, x)[1]
        return (
            c.view(t),
            x.view(jnp.uint16),
            x.T,
            x[1::2, ::3],
            jnp.concatenate([x[:, 128:], x[:, :128]], axis=1),
            jnp.where(m, x, x.T),
            stacked,
        )

    same_bits(gpu, moves, x, codes, mask)


# 8-bit types whose values do not keep every byte: a bool is true or false whatever its
# nonzero byte, an IEEE-like f8's NaNs carry payloads. `view` between 8-bit types must move
# the bytes as jax cpu does, for 0-d arrays (fused: broadcast, bitcast, reshape) as for arrays.
VIEW_TYPES = [jnp.bool_, jnp.int8, jnp.uint8, jnp.float8_e4m3, jnp.float8_e5m2,
              jnp.float8_e3m4, jnp.float8_e4m3fn, jnp.float8_e8m0fnu]
VIEW_BYTES = np.array([96, 1, 0, 0x7f, 0x81, 0xff, 0x7c, 0xfd], dtype=np.uint8)


@pytest.mark.parametrize("src", VIEW_TYPES, ids=lambda t: np.dtype(t).name)
def test_views_between_8_bit_types_move_bytes(gpu, src):
    for dst in VIEW_TYPES:
        for x in [VIEW_BYTES.view(src), VIEW_BYTES[3].reshape(()).view(src),
                  VIEW_BYTES[0].reshape(()).view(src)]:
            same_bits(gpu, lambda x: x.view(dst), x)
    # Through a fused chain of views of a broadcast scalar.
    x = VIEW_BYTES[5].reshape(()).view(src)
    same_bits(gpu, lambda x: jnp.broadcast_to(x.view(jnp.uint8), (3,)).view(jnp.float8_e5m2), x)
