"""Times a few JAX programs on `wgpu` and on `cpu` in the same run and prints their ratio.

    python examples/bench_jax.py [--repeat N]

Each case is compiled and run once first (not timed); then the median of N timed runs, each
ending with block_until_ready. Ratios, not absolute times, are the point: the machines are
noisy, and the baseline is measured in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp


def timeit(f, args, repeat):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mlp_step():
    sizes = [256, 512, 512, 10]
    rng = np.random.default_rng(0)
    params = [(rng.normal(size=(a, b)).astype(np.float32) * np.sqrt(2 / a),
               np.zeros((b,), np.float32)) for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(128, sizes[0])).astype(np.float32)
    y = rng.normal(size=(128, sizes[-1])).astype(np.float32)

    def loss(p, x, y):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = p[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    @jax.jit
    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, d: a - 0.01 * d, p, g), l

    return step, (params, x, y)


def cases():
    n16 = 1 << 24
    yield "jit(x + 1), 4 elements", jax.jit(lambda x: x + 1), (np.ones((4,), np.float32),)
    yield ("16M-element fused chain", jax.jit(lambda x: jnp.tanh(x * 1.5 + 0.5) * x - jnp.exp(-x * x)),
           (np.linspace(-2, 2, n16, dtype=np.float32),))
    a = np.random.default_rng(1).normal(size=(512, 512)).astype(np.float32)
    yield "512x512 matmul + tanh", jax.jit(lambda a, b: jnp.tanh(a @ b)), (a, a.T.copy())
    step, args = mlp_step()
    yield "MLP SGD step (256-512-512-10, batch 128)", step, args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    try:
        gpu = jax.devices("wgpu")[0]
    except RuntimeError as e:
        print(f"no wgpu device: {e}", file=sys.stderr)
        return 2
    cpu = jax.devices("cpu")[0]
    print(f"wgpu device: {gpu.device_kind} ({getattr(gpu, 'backend', '')})")
    print(f"{'case':44} {'wgpu ms':>10} {'cpu ms':>10} {'wgpu/cpu':>9}")
    for name, f, host_args in cases():
        tw = timeit(f, jax.device_put(host_args, gpu), args.repeat)
        tc = timeit(f, jax.device_put(host_args, cpu), args.repeat)
        print(f"{name:44} {tw * 1e3:10.3f} {tc * 1e3:10.3f} {tw / tc:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
