"""Compare two settings of a compile-time switch in one process, runs alternated.

    python examples/bench_ab.py 'WGPU_HLO_FUSION_COST=0' '' [--runs N] [--only SUBSTR ...]

Each case of `bench_jax.py` and `bench_everyday.py` is compiled twice, once with each
environment (`VAR=value[,VAR=value]`, empty for the defaults; the plugin reads these switches
when it compiles), then the two executables run alternately, `--runs` times each. On a noisy
host (shared cores, CPU steal) whole-process timings of two builds differ by 30-50% between
runs of the same build; alternating within one process puts both under the same noise, so
the printed ratio B/A (median and minimum) is what to read."""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_everyday  # noqa: E402
import bench_jax  # noqa: E402


def cases():
    yield from bench_jax.cases()
    for name, (f, args) in bench_everyday.cases().items():
        # A new function object each time: jit's cache is keyed by the function, and a
        # module-level one (`gru_grads`, `gp_nll`) would give B the executable A compiled.
        yield name, jax.jit(lambda *a, f=f: f(*a)), args


def parse_env(text):
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a", help="environment A: VAR=value[,VAR=value] ('' for the defaults)")
    ap.add_argument("b", help="environment B")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--only", nargs="*", help="run only cases whose name contains one of these")
    opts = ap.parse_args()
    envs = [parse_env(opts.a), parse_env(opts.b)]
    keys = set(envs[0]) | set(envs[1])
    saved = {k: os.environ.get(k) for k in keys}

    def use(env):
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(env)

    gpu = jax.devices("wgpu")[0]
    names = [n for n, _, _ in cases() if not opts.only or any(s in n for s in opts.only)]
    print(f"A: {opts.a or '(defaults)'}   B: {opts.b or '(defaults)'}   {opts.runs} runs each")
    for name in names:
        built = []
        for env in envs:
            use(env)
            # A fresh function per environment, so that each compiles under its own.
            f, args = next((f, a) for n, f, a in cases() if n == name)
            args = jax.device_put(args, gpu)
            # Twice: a call that traces again (JAX's trace context changed under the first,
            # as the plugin's lazy imports did until 2026-12-06) compiles under this
            # environment, not under the one restored for the timed runs.
            jax.block_until_ready(f(*args))
            jax.block_until_ready(f(*args))
            built.append((f, args))
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        times = [[], []]
        for _ in range(opts.runs):
            for j, (f, args) in enumerate(built):
                start = time.perf_counter()
                jax.block_until_ready(f(*args))
                times[j].append(time.perf_counter() - start)
        a, b = (np.sort(t) * 1e3 for t in times)
        ma, mb = np.median(a), np.median(b)
        print(f"{name:44s} A {ma:9.2f} ms (min {a[0]:8.2f})  B {mb:9.2f} ms (min {b[0]:8.2f})"
              f"  B/A {mb / ma:.3f} (min {b[0] / a[0]:.3f})", flush=True)


if __name__ == "__main__":
    main()
