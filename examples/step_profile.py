"""Where a training step's time goes on `wgpu`: the host, the device's kernels, or the gaps.

    python examples/step_profile.py [--steps N] [--only mlp cnn transformer]

For each training step of `bench_jax.py` (MLP, flax CNN, transformer), from one process:

* `wall`: median time of one step ending with `block_until_ready` (what bench_jax reports);
* `host`: median time until the step's call returns (tracing cached: JAX's dispatch, the
  plugin's argument checks, recording and submitting the kernels);
* `loop`: time per step of N steps that feed their outputs back without blocking (a training
  loop as users write it: the host records step i+1 while the device runs step i);
* `kernels` / `span`: from timestamp queries of the dump's profiled executions
  (`WGPU_HLO_DUMP`): the sum of the times between each dispatch's own begin and end
  timestamps and the time from the first kernel's start to the last one's end (kernels plus
  the device's gaps between them), and the number of dispatches (on lavapipe the first can
  undercount after kernels with storage textures: see the dump's `kernel_times.txt`);
* the same step's `wall` and `loop` on jax's cpu backend, and on jax's CUDA backend when
  jax has one (set JAX_PLATFORMS to include cuda): the same GPU's native compiler.

`wall` far above `span` means per-call host or completion overhead; `span` far above
`kernels` means the device idles between kernels; `loop` near `span` means the host keeps
up when it may run ahead.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys
import tempfile
import time

DUMP = os.environ.setdefault("WGPU_HLO_DUMP", tempfile.mkdtemp(prefix="step_profile."))

import jax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_jax  # noqa: E402

MODELS = {
    "mlp": ("MLP SGD step", bench_jax.mlp_step),
    "cnn": ("flax/optax CNN step", bench_jax.flax_cnn_step),
    "transformer": ("transformer step", bench_jax.transformer_step),
}


def feed(args, out):
    """The next step's arguments: the step's outputs in place of the state it was given
    (every output but the loss), the data arguments unchanged."""
    state = list(out[:-1])
    return tuple(state) + tuple(args[len(state):])


def measure(step, args, steps):
    jax.block_until_ready(step(*args))
    wall, host = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = step(*args)
        t1 = time.perf_counter()
        jax.block_until_ready(out)
        wall.append(time.perf_counter() - t0)
        host.append(t1 - t0)
    a = args
    jax.block_until_ready(a)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step(*a)
        a = feed(a, out)
    jax.block_until_ready(out)
    loop = (time.perf_counter() - t0) / steps
    return statistics.median(wall), statistics.median(host), loop


def kernel_times(before):
    """(kernels ms, span ms, dispatches) of the last profiled execution of the newest step
    module dumped since `before` (a set of file names), or None."""
    files = sorted(set(glob.glob(os.path.join(DUMP, "*jit_step.kernel_times.txt"))) - before)
    if not files:
        return None
    # The header (runtime::executable::kernel_times_text): the span, the dispatches, and the
    # sum of the times between each dispatch's own timestamps.
    runs = re.findall(r"execution \d+: ([0-9.]+) ms from the first dispatch's start to the last "
                      r"one's end, in (\d+) dispatches;.*?\(([0-9.]+) ms in all\)",
                      open(files[-1]).read())
    if not runs:
        return None
    s, d, k = runs[-1]
    return float(k), float(s), int(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS), default=None)
    ap.add_argument("--wgpu-only", action="store_true", help="no cpu or cuda baselines (for a profiler)")
    args = ap.parse_args()
    gpu = jax.devices("wgpu")[0]
    cpu = jax.devices("cpu")[0]
    try:
        cuda = jax.devices("cuda")[0]
    except RuntimeError:
        cuda = None
    print(f"wgpu device: {gpu.device_kind}; dump {DUMP}")
    for key in args.only or list(MODELS):
        name, make = MODELS[key]
        step, host_args = make()
        before = set(glob.glob(os.path.join(DUMP, "*jit_step.kernel_times.txt")))
        w, h, loop = measure(step, jax.device_put(host_args, gpu), args.steps)
        # The profiled executions are read back on the polling thread.
        time.sleep(0.2)
        kt = kernel_times(before)
        line = f"{name}: wgpu wall {w * 1e3:.3f} ms, host {h * 1e3:.3f} ms, loop {loop * 1e3:.3f} ms/step"
        if kt:
            line += f", kernels {kt[0]:.3f} ms, span {kt[1]:.3f} ms, {kt[2]} dispatches"
        if args.wgpu_only:
            print(line, flush=True)
            continue
        cw, _, cl = measure(step, jax.device_put(host_args, cpu), args.steps)
        line += f"; jax cpu wall {cw * 1e3:.3f} ms, loop {cl * 1e3:.3f} ms"
        if cuda is not None:
            gw, _, gl = measure(step, jax.device_put(host_args, cuda), args.steps)
            line += f"; jax cuda wall {gw * 1e3:.3f} ms, loop {gl * 1e3:.3f} ms"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
