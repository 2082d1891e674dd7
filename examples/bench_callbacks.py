"""Times host callbacks on `wgpu` and on `cpu` in the same run: the cost of one host call
(a jitted function with a `pure_callback` minus the same function without it) and of an
ordered `io_callback` in every step of a 100-step `fori_loop`.

    python examples/bench_callbacks.py [--repeat N]

Medians of N timed runs after one untimed run; compare the two platforms' figures, not the
absolute times (the machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import io_callback


def median_ms(f, arg, repeat):
    jax.block_until_ready(f(arg))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(f(arg))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench(device, repeat):
    x = jax.device_put(jnp.ones(1000, jnp.float32), device)
    with_call = jax.jit(lambda x: jax.pure_callback(
        lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x * 2) + 1)
    without = jax.jit(lambda x: x * 2 + 1)
    step = lambda i, c: c + io_callback(  # noqa: E731
        lambda i: np.asarray(i, np.int32), jax.ShapeDtypeStruct((), jnp.int32), i, ordered=True)
    loop = jax.jit(lambda n: jax.lax.fori_loop(0, 100, step, n))
    a = median_ms(with_call, x, repeat)
    b = median_ms(without, x, repeat)
    c = median_ms(loop, jax.device_put(jnp.int32(0), device), max(3, repeat // 20))
    return a - b, c / 100


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=200)
    repeat = p.parse_args().repeat
    rows = {d: bench(jax.devices(d)[0], repeat) for d in ("wgpu", "cpu")}
    print(f"{'':10}{'one host call':>16}{'ordered io_callback/loop step':>32}")
    for d, (call, step) in rows.items():
        print(f"{d:10}{call:13.3f} ms{step:29.3f} ms")
    (wc, ws), (cc, cs) = rows["wgpu"], rows["cpu"]
    print(f"{'wgpu/cpu':10}{wc / max(cc, 1e-9):15.1f}x{ws / max(cs, 1e-9):31.1f}x")


if __name__ == "__main__":
    main()
