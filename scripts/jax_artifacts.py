"""Writes StableHLO portable artifacts of real JAX programs for the bytecode reader's tests.

    python scripts/jax_artifacts.py OUTDIR

For each program: NAME.mlir (jaxlib's own text of the module) and NAME.V.mlirbc for every
target version V that jaxlib can write (serialize_portable_artifact_str), plus
NAME.export.mlirbc (jax.export's artifact, as JAX sends it to a plugin).
"""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax
from jaxlib.mlir.dialects import stablehlo


def programs():
    k = jax.random.PRNGKey(0)
    x = jnp.ones((8, 16), jnp.float32)

    def mlp_step(p, x, y):
        def loss(p):
            h = jnp.tanh(x @ p[0] + p[1])
            return jnp.mean((h @ p[2] - y) ** 2)

        l, g = jax.value_and_grad(loss)(p)
        return l, [a - 0.1 * b for a, b in zip(p, g)]

    params = [jnp.ones((16, 32)), jnp.zeros((32,)), jnp.ones((32, 4))]
    yield "mlp_grad_step", mlp_step, (params, x, jnp.ones((8, 4)))

    def convnet(w, img):
        y = lax.conv_general_dilated(img, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y)
        return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID").mean()

    yield "convnet", jax.grad(convnet), (jnp.ones((3, 3, 2, 4)), jnp.ones((1, 8, 8, 2)))
    yield "random", lambda k: (jax.random.normal(k, (4, 3)), jax.random.uniform(k, (5,))), (k,)
    yield "loops", lambda x: (
        lax.while_loop(lambda v: v.sum() < 100.0, lambda v: v * 2.0, x),
        lax.cond(x.sum() > 0, lambda v: v + 1, lambda v: v - 1, x),
        lax.scan(lambda c, v: (c + v, c * v), jnp.zeros(16), x)[1],
    ), (x,)
    yield "sort", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x[0])), (x,)
    yield "gather_scatter", lambda x, i: (x[i], x.at[i].add(1.0), jnp.take_along_axis(x, i[:, None] % 8, 0)), (
        x, jnp.array([1, 3, 5], jnp.int32))
    yield "cumsum", lambda x: (jnp.cumsum(x, 0), jnp.cumprod(x, 1)), (x,)


def versions():
    """StableHLO releases from jaxlib's minimum to its current version (0.9-0.20, then 1.x)."""
    lo = tuple(int(p) for p in stablehlo.get_minimum_version().split("."))
    hi = tuple(int(p) for p in stablehlo.get_current_version().split("."))
    releases = [(0, m, 0) for m in range(9, 21)] + [(1, m, 0) for m in range(0, 100)]
    return [".".join(map(str, v)) for v in releases if lo <= v <= hi]


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vs = versions()
    written = 0
    for name, fn, args in programs():
        lowered = jax.jit(fn).lower(*args)
        text = str(lowered.compiler_ir("stablehlo"))
        (out / f"{name}.mlir").write_text(text)
        for v in vs:
            try:
                data = stablehlo.serialize_portable_artifact_str(text, v)
            except Exception as e:  # noqa: BLE001 - versions jaxlib cannot target
                # (jax.random's text holds unrealized casts that only jax.export resolves.)
                print(f"skip {name} @ {v}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
                continue
            (out / f"{name}.{v}.mlirbc").write_bytes(data)
            written += 1
        exp = export.export(jax.jit(fn))(*args)
        (out / f"{name}.export.mlirbc").write_bytes(exp.mlir_module_serialized)
        written += 1
    print(f"{written} artifacts, versions {vs[0]}..{vs[-1]}")


if __name__ == "__main__":
    main()
