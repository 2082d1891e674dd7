"""Independent launches run as one dispatch (`compile::merge`, `codegen::merged`): a GRU's
value and gradient, independent dots and reductions of different shapes and dtypes, more
independent kernels than one merged launch takes, merging inside loops and branches, and the
GPU kernel class (`WGPU_HLO_ADAPTER_CLASS=gpu`: workgroup memory, barriers, parts of smaller
workgroups packed together), and parts reading their inputs through textures (CPU adapters). Each part runs its own code, so results must equal those with
merging off (`WGPU_HLO_MERGE_LAUNCHES=0`) to the bit, and jax cpu's to rounding; the dump's
program shows fewer launches."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from conftest import cpu_kernel_class

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def launches(dump):
    """Launch steps in the dumped programs, and how many of them launch merged kernels."""
    steps = merged = 0
    for p in glob.glob(os.path.join(dump, "*.program.txt")):
        for line in open(p):
            words = line.split()
            if words[:1] == ["launch"]:
                steps += 1
                merged += "+" in words[1]
    return steps, merged


def check(gpu, f, args, tmp_path, monkeypatch, rtol=2e-5, atol=2e-6,
          switch="WGPU_HLO_MERGE_LAUNCHES", count=None):
    """`f` on gpu with `switch` on (merging, by default) against cpu and against itself with
    it off; returns `count(dump)` of both builds (by default `launches`: the launches and
    merged launches). The dumps are `tmp_path / "on"` and `tmp_path / "off"`."""
    counts = []
    results = []
    for on in ("1", "0"):
        dump = str(tmp_path / ("on" if on == "1" else "off"))
        monkeypatch.setenv("WGPU_HLO_DUMP", dump)
        monkeypatch.setenv(switch, on)
        # A new function object each time: JAX's cache would hand back the first executable.
        results.append(leaves(jax.jit(lambda *a: f(*a))(*jax.device_put(args, gpu))))
        monkeypatch.delenv("WGPU_HLO_DUMP")
        monkeypatch.delenv(switch)
        counts.append((count or launches)(dump))
    want = leaves(jax.jit(f)(*jax.device_put(args, jax.devices("cpu")[0])))
    for g, a, w in zip(results[0], results[1], want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, a)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return counts


def gru_loss(params, xs, h0):
    wz, wr, wh, uz, ur, uh = params

    def cell(h, x):
        z = jax.nn.sigmoid(x @ wz + h @ uz)
        r = jax.nn.sigmoid(x @ wr + h @ ur)
        c = jnp.tanh(x @ wh + (r * h) @ uh)
        h = (1 - z) * h + z * c
        return h, h

    h, hs = lax.scan(cell, h0, xs)
    return jnp.mean(hs**2) + jnp.sum(h)


def gru_args(t=12, b=8, d=16, h=32):
    params = tuple(normal(s, i) * 0.3 for i, s in enumerate([(d, h)] * 3 + [(h, h)] * 3))
    return params, normal((t, b, d), 7), normal((b, h), 8)


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_gru_value_and_grad(gpu, tmp_path, monkeypatch, cls):
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", cls)
    f = jax.value_and_grad(gru_loss)
    (on, merged), (off, none) = check(gpu, f, gru_args(), tmp_path, monkeypatch, rtol=1e-4, atol=1e-5)
    assert none == 0
    assert merged > 0 and on < off, (on, off)


def independent(x, w1, w2, w3, n):
    """Dots of three shapes, reductions along both axes, an integer sum, a sort: none reads
    another."""
    return (
        x @ w1,
        jnp.tanh(x @ w2),
        x.T @ w3,
        x.sum(0),
        x.max(1),
        (x * 3).astype(jnp.int32).sum(1),
        jnp.sort(n),
        n * 2 + 1,
    )


def independent_args():
    return (
        normal((64, 48)),
        normal((48, 40), 1),
        normal((48, 72), 2),
        normal((64, 24), 3),
        normal((300,), 4),
    )


def test_independent_kernels(gpu, tmp_path, monkeypatch):
    # Dots of 48 terms of order 1: sums of order 7, so absolute rounding of ~1e-6.
    args = independent_args()
    (on, merged), (off, _) = check(gpu, independent, args, tmp_path, monkeypatch, atol=1e-5)
    assert merged > 0 and on < off, (on, off)


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_many_independent_kernels(gpu, tmp_path, monkeypatch, cls):
    """More independent kernels than one merged launch takes, of the CPU and the GPU kernel
    classes (the GPU class packs 64-lane kernels into 256-lane workgroups and merges kernels
    with workgroup memory and barriers)."""
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", cls)

    def f(xs, w):
        outs = []
        for i, x in enumerate(xs):
            outs.append(x @ w if i % 3 == 0 else jnp.sum(jnp.exp(x) * i, axis=i % 2))
            outs.append(jnp.sin(x[: 8 + i]) * i)
        return outs

    xs = [normal((32, 32), i) for i in range(14)]
    (on, merged), (off, _) = check(gpu, f, (xs, normal((32, 32), 99)), tmp_path, monkeypatch)
    assert merged > 0 and on < off, (on, off)


def test_inside_loops_and_branches(gpu, tmp_path, monkeypatch):
    def f(x, w, p):
        def body(i, c):
            a, b = c
            return jnp.tanh(a @ w + i), b * 0.5 + jnp.cos(a).sum(0)

        a, b = lax.fori_loop(0, 5, body, (x, x[0]))
        c = lax.cond(p > 0, lambda: (a @ w.T, b.sum()), lambda: (a * 2, b.max()))
        return a, b, c

    args = (normal((16, 16)), normal((16, 16), 1) * 0.2, np.float32(1.0))
    (on, merged), (off, _) = check(gpu, f, args, tmp_path, monkeypatch)
    assert merged > 0 and on < off, (on, off)


def body_launches(dump):
    """The kernels launched in the dumped programs' loop bodies (the launch and update steps
    indented under a `body` line; a condition's come under `cond`)."""
    names = []
    for p in glob.glob(os.path.join(dump, "*.program.txt")):
        section = None
        for line in open(p):
            words = line.split()
            if not line.startswith(" "):
                section = None
            elif words[:1] in (["body"], ["cond"]):
                section = words[0]
            elif section == "body" and words[:1] in (["launch"], ["update"], ["updates"]):
                names.append(words[1])
    return names


@pytest.mark.parametrize("step", ["dot", "wide dot", "elementwise"])
def test_loop_counter_joins_the_step(gpu, tmp_path, monkeypatch, step):
    """A `fori_loop`'s counter (`i + 1`, one invocation) runs in the launch of the step's
    only kernel on CPU adapters: beside a dot of one-subgroup workgroups (the counter takes
    a workgroup of 8 lanes of its own), and packed into one 256-lane workgroup beside a loop
    kernel. On llvmpipe a launch costs ~50 µs whatever it computes. A dot whose WGSL is past
    the merged kernels' bound (~25 KiB at 256 x 256 weights, as an LSTM step's 128 x 512)
    takes it too: the counter's code is tiny (`compile::merge::TINY_WGSL_BYTES`)."""
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", "cpu")
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    # The elementwise loop would run whole in one kernel.
    monkeypatch.setenv("WGPU_HLO_WHILE_KERNELS", "0")
    n = 256 if step == "wide dot" else 128
    u = normal((n, n), 1) / n**0.5

    def f(h, u):
        if step != "elementwise":
            return lax.fori_loop(0, 7, lambda i, h: jnp.tanh(h @ u), h)
        return lax.fori_loop(0, 7, lambda i, h: jnp.tanh(h * 1.0001 + i), h)

    (on, merged), (off, _) = check(gpu, f, (normal((32, n)), u), tmp_path, monkeypatch, atol=1e-5)
    body = body_launches(str(tmp_path / "on"))
    assert len(body) == 1 and "+" in body[0], body
    if step != "elementwise":
        assert body[0].startswith("dot_"), body
    assert on < off, (on, off)


def test_reversed_scan_step_computes_its_index(gpu, tmp_path, monkeypatch):
    """`jax.grad` of a `lax.scan` runs the scan backwards; the reversed step number
    `T - 1 - i` starts the in-place update of the stacked gradients and the slices of the
    residuals. The kernels reading the residuals compute it again instead of waiting for its
    own launch (`fusion::recomputed_indices`): fewer launches a step, the same bits as with
    `WGPU_HLO_RECOMPUTE_INDICES=0`, jax cpu's values to rounding. The kernel reading the
    residuals is kept apart from the update step (`WGPU_HLO_UPDATE_OUTPUTS=0`): the update
    step takes it otherwise, in both settings (3 launches a step either way)."""
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    monkeypatch.setenv("WGPU_HLO_UPDATE_OUTPUTS", "0")
    u = normal((64, 64), 1) / 8

    def f(h, u, xs):
        def loss(u):
            def cell(c, x):
                c = jnp.tanh(c @ u + x)
                return c, c

            _, hs = lax.scan(cell, h, xs)
            return jnp.sum(hs**2)

        return jax.grad(loss)(u)

    args = (normal((16, 64)), u, normal((9, 16, 64), 2))
    on, off = check(gpu, f, args, tmp_path, monkeypatch, rtol=1e-4, atol=1e-4,
                    switch="WGPU_HLO_RECOMPUTE_INDICES", count=body_launches)
    assert len(on) < len(off), (on, off)


def stacked_gradient_steps(h, u, w, xs):
    """A gradient through a scan of a gated cell stacking its state: the backward scan's
    update step computes the gate gradients it stacks (`fusion::updates`)."""

    def loss(u, w):
        def cell(c, x):
            z = jax.nn.sigmoid(x @ w)
            c = (1 - z) * c + z * jnp.tanh(c @ u + x)
            return c, c

        _, cs = lax.scan(cell, h, xs)
        return jnp.sum(cs**2)

    return jax.grad(loss, argnums=(0, 1))(u, w)


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_reversed_scan_step_writes_no_unread_index(gpu, tmp_path, monkeypatch, cls):
    """The reversed step number `T - 1 - i` that every kernel and the update step of a
    backward scan step compute inline is not written by a launch of its own as well
    (`fusion::unread`), and the step counter `i + 1` left alone in that launch moves after
    the update step, where launch merging takes it into another launch: one launch a step
    fewer, the same bits as with `WGPU_HLO_PRUNE_UNREAD=0`, jax cpu's values to rounding.
    Under GPU-class kernels the update step must have taken the gate kernel first (before
    horizontal fusion merges it with the index: `WGPU_HLO_UPDATES_FIRST`)."""
    monkeypatch.setenv("WGPU_HLO_ADAPTER_CLASS", cls)
    monkeypatch.setenv("WGPU_HLO_UNROLL", "0")
    args = (normal((16, 64)), normal((64, 64), 1) / 8, normal((64, 64), 3) / 8,
            normal((9, 16, 64), 2))
    on, off = check(gpu, stacked_gradient_steps, args, tmp_path, monkeypatch, rtol=1e-4,
                    atol=1e-4, switch="WGPU_HLO_PRUNE_UNREAD", count=body_launches)
    assert len(on) < len(off), (on, off)


def test_parts_reading_textures_merge(gpu, tmp_path, monkeypatch):
    """Kernels reading inputs through textures (CPU adapters; every eligible input here) merge
    like the others, their textures at the merged kernel's renumbered bindings: expm's
    squaring loop runs its product and its counter in one launch a step. Until 2026-12-05
    they were not merged (`WGPU_HLO_MERGE_TEXTURES=0`)."""
    if not cpu_kernel_class(gpu):
        pytest.skip("texture reads are for CPU adapters")
    monkeypatch.setenv("WGPU_HLO_TEXTURE_READS", "all")

    def squarings(r, s, x, y):
        r = lax.fori_loop(0, 16, lambda i, r: jnp.where(i < s, r @ r, r), r)
        # Two independent products and a reduction beside them.
        return r, x @ y, jnp.tanh(y) @ x, (x * x).sum(0)

    args = (normal((64, 64)) * 0.1, np.int32(5), normal((32, 32), 1), normal((32, 32), 2))
    on, off = check(gpu, squarings, args, tmp_path, monkeypatch, switch="WGPU_HLO_MERGE_TEXTURES")
    assert on[0] < off[0] and on[1] > off[1], (on, off)
    merged = [p for p in glob.glob(str(tmp_path / "on" / "*.wgsl")) if "+" in os.path.basename(p)]
    assert any("texture_2d" in open(p).read() for p in merged), merged
