"""Times JAX programs on `wgpu` and on `cpu` in the same run and prints their ratio.

    python examples/bench_jax.py [--repeat N] [--budget S] [--only SUBSTR ...] [--no-iree | --iree-dir DIR]
    python examples/bench_jax.py --iree-export DIR [--only SUBSTR ...]

Each case is compiled and run once first (not timed); then the median of up to N timed runs
(fewer for slow cases: as many as fit in --budget seconds, at least 3), each ending with
block_until_ready. Ratios, not absolute times, are the point: the machines are noisy, and the
baselines are measured in the same process:

* `cpu`: jax's own cpu backend;
* `floor`: the raw-wgpu floor, one empty dispatch and a 4-byte map round trip through wgpu alone
  on the plugin's own device (`jax_plugins.wgpu.raw_wgpu_floor_ms`), so per-call overhead reads
  as a multiple of what wgpu itself costs;
* `iree`: IREE's Vulkan HAL running the same StableHLO (lowered for wgpu) on the same Vulkan
  adapter, when `iree-base-compiler` and `iree-base-runtime` are installed (`-` where IREE
  cannot compile the program), each program in a child process that holds only IREE.

For a machine without the IREE compiler, `--iree-export DIR` compiles every case here (nothing is
timed) into DIR/<slug>.vmfb, plus DIR/<slug>.nv.vmfb tuned for NVIDIA
(`--iree-vulkan-target=IREE_NV_TARGET`); `--iree-dir DIR` there then needs only
`iree-base-runtime`, times both builds of each case and reports the faster (`-` where there is
neither).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

CPU = jax.devices("cpu")[0]


def timeit(f, args, repeat, budget):
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    first = time.perf_counter() - t0
    n = max(3, min(repeat, int(budget / max(first, 1e-6))))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(shape, seed=0, scale=1.0):
    return (rng(seed).normal(size=shape) * scale).astype(np.float32)


def mlp_step():
    sizes = [256, 512, 512, 10]
    params = [(normal((a, b), i, np.sqrt(2 / a)), np.zeros((b,), np.float32))
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))]
    x = normal((128, sizes[0]), 10)
    y = normal((128, sizes[-1]), 11)

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


def flax_cnn_step():
    """A small flax/optax CNN training step on 32×28×28×1 images (Conv 32, Conv 64, Dense)."""
    import flax.linen as nn
    import optax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(128)(x))
            return nn.Dense(10)(x)

    model = CNN()
    x = normal((32, 28, 28, 1), 3)
    y = rng(4).integers(0, 10, size=(32,)).astype(np.int32)
    params = jax.jit(model.init)(jax.device_put(jax.random.PRNGKey(0), CPU), jax.device_put(x, CPU))
    tx = optax.adam(1e-3)
    opt = jax.jit(tx.init)(params)

    @jax.jit
    def step(params, opt, x, y):
        def loss(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        l, g = jax.value_and_grad(loss)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, l

    return step, (params, opt, x, y)


def transformer_step():
    """A 2-layer pre-LN transformer encoder (d=128, 4 heads, seq 64, batch 8) with adamw."""
    import flax.linen as nn
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            h = nn.MultiHeadDotProductAttention(num_heads=4)(h, h)
            x = x + h
            h = nn.LayerNorm()(x)
            h = nn.Dense(512)(h)
            h = nn.gelu(h)
            return x + nn.Dense(128)(h)

    class Model(nn.Module):
        @nn.compact
        def __call__(self, tok):
            x = nn.Embed(256, 128)(tok)
            for _ in range(2):
                x = Block()(x)
            return nn.Dense(256)(nn.LayerNorm()(x))

    model = Model()
    tok = rng(5).integers(0, 256, size=(8, 64)).astype(np.int32)
    params = jax.jit(model.init)(jax.device_put(jax.random.PRNGKey(0), CPU), jax.device_put(tok, CPU))
    tx = optax.adamw(1e-3)
    opt = jax.jit(tx.init)(params)

    @jax.jit
    def step(params, opt, tok):
        def loss(p):
            logits = model.apply(p, tok[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:]).mean()
        l, g = jax.value_and_grad(loss)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, l

    return step, (params, opt, tok)


def spd(n, seed):
    a = normal((n, n), seed)
    return (a @ a.T / n + np.eye(n, dtype=np.float32)).astype(np.float32)


def cases():
    n16 = 1 << 24
    yield "jit(x + 1), 4 elements", jax.jit(lambda x: x + 1), (np.ones((4,), np.float32),)
    yield ("16M-element fused chain", jax.jit(lambda x: jnp.tanh(x * 1.5 + 0.5) * x - jnp.exp(-x * x)),
           (np.linspace(-2, 2, n16, dtype=np.float32),))
    yield "softmax 1024x1024", jax.jit(lambda x: jax.nn.softmax(x, axis=-1)), (normal((1024, 1024)),)
    big = normal((4096, 4096), 2)
    yield "row sums 4096x4096", jax.jit(lambda x: x.sum(axis=1)), (big,)
    yield "column sums 4096x4096", jax.jit(lambda x: x.sum(axis=0)), (big,)
    yield "transpose 4096x4096", jax.jit(lambda x: x.T + 0.0), (big,)
    a = normal((512, 512), 1)
    yield "matmul 512 + tanh", jax.jit(lambda a, b: jnp.tanh(a @ b)), (a, a.T.copy())
    a = normal((1024, 1024), 6)
    yield "matmul 1024", jax.jit(lambda a, b: a @ b), (a, a.T.copy())
    bf = jnp.bfloat16
    yield ("matmul 1024 bf16 (f32 in, converts in jit)",
           jax.jit(lambda a, b: jnp.dot(a.astype(bf), b.astype(bf), preferred_element_type=jnp.float32)),
           (a, a.T.copy()))
    a = normal((64, 128, 128), 7)
    yield "batched matmul 64x128x128", jax.jit(lambda a, b: a @ b), (a, a + 1)
    x = normal((8, 56, 56, 64), 8)
    w = normal((3, 3, 64, 64), 9, 1 / 24)
    conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
    yield "conv 3x3 8x56x56x64 -> 64", conv, (x, w)
    step, args = mlp_step()
    yield "MLP SGD step (256-512-512-10, b128)", step, args
    try:
        step, args = flax_cnn_step()
        yield "flax/optax CNN step (b32 28x28)", step, args
        step, args = transformer_step()
        yield "transformer step (2L d128 s64 b8)", step, args
    except ImportError as e:
        print(f"(flax/optax not installed, model steps left out: {e})", file=sys.stderr)
    for n in (48, 256):
        yield f"eigh {n}x{n}", jax.jit(jnp.linalg.eigh), (spd(n, 20 + n),)
        # JAX's eigh with the vectors unread: the compiler leaves them out.
        yield f"eigvalsh {n}x{n}", jax.jit(jnp.linalg.eigvalsh), (spd(n, 20 + n),)
        yield f"svd {n}x{n}", jax.jit(lambda a: jnp.linalg.svd(a, compute_uv=False)), (normal((n, n), 21 + n),)
        # What `jnp.linalg.svd(a)`, `pinv` and `lstsq` run: singular vectors too.
        yield f"svd {n}x{n} with U, V", jax.jit(jnp.linalg.svd), (normal((n, n), 21 + n),)
        yield f"cholesky {n}x{n}", jax.jit(jnp.linalg.cholesky), (spd(n, 22 + n),)


# iree-compile 3.13 knows no Hopper Vulkan target; the A100 (sm_80, with its SM count) is the
# nearest datacenter part, and what it enables (subgroups of 32, NV MMA, 163 KiB workgroup
# memory) an H100/H200 has too.
IREE_NV_TARGET = "a100"


def slug(name):
    """`name` as a file name: letters, digits, `.`, `_` and `-` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def first_error(text):
    """The first `error:` line of `text`, else the first that mentions an error, else its last."""
    lines = text.splitlines()
    err = ([line for line in lines if "error:" in line.lower()]
           or [line for line in lines if "error" in line.lower()] or lines[-1:])
    return err[0][:160] if err else ""


def iree_stablehlo(f, gpu_args):
    """The StableHLO text jax lowers `f` to for these (wgpu) arguments, as IREE takes it."""
    # IREE has no Shardy dialect: lower with the older sharding attributes for it.
    shardy = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        return f.lower(*gpu_args).as_text()
    finally:
        jax.config.update("jax_use_shardy_partitioner", shardy)


def iree_compile(text, target=None):
    """`text` compiled by IREE for its Vulkan HAL (for `--iree-vulkan-target=target` if given)."""
    import iree.compiler as ic

    extra = [f"--iree-vulkan-target={target}"] if target else []
    return ic.compile_str(text, target_backends=["vulkan-spirv"], input_type="stablehlo", extra_args=extra)


def iree_export(d, dev, only):
    """Writes d/<slug>.vmfb and d/<slug>.nv.vmfb for every case (see the module docstring),
    lowered on `dev`; a variant IREE cannot compile is left out with the reason printed."""
    os.makedirs(d, exist_ok=True)
    total = 0
    for name, f, host_args in cases():
        if only and not any(s in name for s in only):
            continue
        try:
            text = iree_stablehlo(f, jax.device_put(host_args, dev))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: not lowered: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
            continue
        done = []
        for suffix, target in ((".vmfb", None), (".nv.vmfb", IREE_NV_TARGET)):
            path = os.path.join(d, slug(name) + suffix)
            if os.path.exists(path):
                os.remove(path)
            try:
                vm = iree_compile(text, target)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"{name}: {suffix} not compiled: {first_error(str(e)) or type(e).__name__}", flush=True)
                continue
            with open(path, "wb") as fh:
                fh.write(vm)
            total += len(vm)
            done.append(f"{os.path.basename(path)} {len(vm) / 1024:.0f} KiB")
        if done:
            print(f"{name}: {', '.join(done)}", flush=True)
    print(f"{d}: {total / 2**20:.2f} MiB of vmfb in all")
    return 0


class Iree:
    """IREE's Vulkan HAL on the same adapter, fed the StableHLO jax lowers for wgpu.

    Each program runs in a child process (`--iree-child`) holding only IREE: a live IREE Vulkan
    runtime in this process slowed jax cpu and wgpu alike by about 2x on lavapipe, so the
    three are timed one at a time with nothing else resident. With `vmfb_dir` (`--iree-dir`) the
    programs come precompiled from there and only `iree.runtime` is needed."""

    def __init__(self, vmfb_dir=None):
        import importlib.util

        self.dir = vmfb_dir
        self.said = set()
        for mod in ("iree.runtime",) if vmfb_dir else ("iree.compiler", "iree.runtime"):
            if importlib.util.find_spec(mod) is None:
                raise ImportError(f"{mod} is not installed")
        if vmfb_dir and not os.path.isdir(vmfb_dir):
            raise FileNotFoundError(f"no directory {vmfb_dir}")

    def time(self, name, f, host_args, gpu_args, repeat, budget):
        import tempfile

        if self.dir:
            vmfbs = [os.path.join(self.dir, slug(name) + s) for s in (".nv.vmfb", ".vmfb")]
            vmfbs = [v for v in vmfbs if os.path.exists(v)]
            if not vmfbs:
                raise FileNotFoundError(f"no {slug(name)}.vmfb in {self.dir}")
        else:
            text = iree_stablehlo(f, gpu_args)
        leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(host_args)]
        with tempfile.TemporaryDirectory() as d:
            np.savez(os.path.join(d, "args.npz"), *leaves)
            if not self.dir:
                with open(os.path.join(d, "program.mlir"), "w") as fh:
                    fh.write(text)
                return self._child(d, repeat, budget)
            # Every variant there is, and IREE's best: the tuned one is not always the faster
            # (on lavapipe the a100 build took 8-11 ms for x + 1 against 0.1 ms).
            errors, best = [], None
            for vmfb in vmfbs:
                try:
                    t = self._child(d, repeat, budget, vmfb)
                except RuntimeError as e:
                    errors.append(f"{os.path.basename(vmfb)}: {e}")
                    continue
                if best is None or t < best[0]:
                    best = (t, vmfb)
            if best is not None:
                t, vmfb = best
                variant = "nv" if vmfb.endswith(".nv.vmfb") else "default"
                if errors:
                    print(f"  (iree: {errors[0]})", file=sys.stderr)
                if len(vmfbs) > 1 or variant not in self.said:
                    self.said.add(variant)
                    print(f"  (iree: fastest of {len(vmfbs) - len(errors)} builds: {os.path.basename(vmfb)})",
                          file=sys.stderr)
                return t
            raise RuntimeError("; ".join(errors))

    @staticmethod
    def _child(d, repeat, budget, *vmfb):
        import subprocess

        # The child imports this file, hence jax: keep it to jax cpu, off the Vulkan device.
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        p = subprocess.run([sys.executable, __file__, "--iree-child", d, str(repeat), str(budget), *vmfb],
                           capture_output=True, text=True, timeout=1800, env=env)
        if p.returncode != 0:
            raise RuntimeError(first_error(p.stderr) or f"exit {p.returncode}")
        return float(p.stdout.split()[-1])


def iree_child(d, repeat, budget, vmfb=None):
    """Compiles d/program.mlir with IREE for Vulkan (or loads the precompiled `vmfb`, with no
    IREE compiler imported), times it on d/args.npz, prints seconds."""
    import iree.runtime as ir

    if vmfb is None:
        with open(os.path.join(d, "program.mlir")) as fh:
            vm = iree_compile(fh.read())
    else:
        with open(vmfb, "rb") as fh:
            vm = fh.read()
    npz = np.load(os.path.join(d, "args.npz"))
    leaves = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    # The first Vulkan device IREE enumerates: the GPU where it is the only one.
    config = ir.Config("vulkan")
    ctx = ir.SystemContext(config=config)
    ctx.add_vm_module(ir.VmModule.copy_buffer(ctx.instance, vm))
    module = ctx.modules[[k for k in ctx.modules.keys() if k != "hal"][0]]
    fn = module.main
    dev = [ir.asdevicearray(config.device, a) for a in leaves]
    # The invocation returns once its results are ready (IREE's synchronous ABI).
    t0 = time.perf_counter()
    fn(*dev)
    first = time.perf_counter() - t0
    n = max(3, min(repeat, int(budget / max(first, 1e-6))))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(*dev)
        times.append(time.perf_counter() - t0)
    print(statistics.median(times))


def gpu_report(gpu, cpu, args):
    """The figures a GPU run is quoted by (issue 11): the device's own copy bandwidth, fused
    elementwise GB/s against it, matmul GFLOP/s from 1024 to `--max-n` (against
    `--peak-tflops` when given), tiny-jit microseconds against the raw-wgpu floor, and the
    training steps against jax cpu on the same machine. Runs on any adapter."""
    from jax_plugins.wgpu import copy_bandwidth_gbs, raw_wgpu_floor_ms

    print(f"wgpu device: {gpu.device_kind}")
    copy = copy_bandwidth_gbs(1 << 28, 10)
    floor = raw_wgpu_floor_ms()
    print(f"copy_buffer_to_buffer: {copy:.1f} GB/s (bytes read + written); raw-wgpu floor {floor * 1e3:.1f} us")
    t = timeit(jax.jit(lambda x: x + 1), (jax.device_put(np.ones((4,), np.float32), gpu),), args.repeat, args.budget)
    print(f"tiny jit(x + 1): {t * 1e6:.1f} us = {t * 1e3 / floor:.2f}x the floor")
    for n in (1 << 24, 1 << 26):
        x = jax.device_put(np.linspace(-2, 2, n, dtype=np.float32), gpu)
        chain = jax.jit(lambda x: jnp.tanh(x * 1.5 + 0.5) * x - jnp.exp(-x * x))
        add = jax.jit(lambda x: x * 2.0 + 1.0)
        for what, f in (("x * 2 + 1", add), ("tanh/exp chain", chain)):
            t = timeit(f, (x,), args.repeat, args.budget)
            gbs = 8 * n / t / 1e9
            print(f"fused {what}, {n >> 20}M f32: {t * 1e3:.3f} ms, {gbs:.1f} GB/s = {gbs / copy:.2f} of copy")
    n = 1024
    while n <= args.max_n:
        a = jax.device_put(normal((n, n), 6), gpu)
        b = jax.device_put(normal((n, n), 7), gpu)
        t = timeit(jax.jit(lambda a, b: a @ b), (a, b), args.repeat, args.budget)
        gf = 2 * n**3 / t / 1e9
        line = f"matmul {n}: {t * 1e3:.2f} ms, {gf:.0f} GFLOP/s"
        if args.peak_tflops:
            line += f" = {gf / (args.peak_tflops * 1e3):.2f} of the {args.peak_tflops} TFLOP/s fp32 peak"
        if n <= 2048:
            tc = timeit(jax.jit(lambda a, b: a @ b), jax.device_put((normal((n, n), 6), normal((n, n), 7)), cpu),
                        args.repeat, args.budget)
            line += f" (jax cpu {2 * n**3 / tc / 1e9:.0f} GFLOP/s, wgpu/cpu time {t / tc:.2f})"
        print(line, flush=True)
        n *= 2
    steps = [("MLP SGD step (256-512-512-10, b128)", mlp_step)]
    try:
        import flax  # noqa: F401
        import optax  # noqa: F401

        steps += [("flax/optax CNN step (b32 28x28)", flax_cnn_step),
                  ("transformer step (2L d128 s64 b8)", transformer_step)]
    except ImportError as e:
        print(f"(flax/optax not installed, model steps left out: {e})", file=sys.stderr)
    for name, make in steps:
        step, host_args = make()
        tw = timeit(step, jax.device_put(host_args, gpu), args.repeat, args.budget)
        tc = timeit(step, jax.device_put(host_args, cpu), args.repeat, args.budget)
        print(f"{name}: wgpu {tw * 1e3:.2f} ms, jax cpu {tc * 1e3:.2f} ms, wgpu/cpu {tw / tc:.2f}", flush=True)
    return 0


def main():
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--iree-child":
        iree_child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), *sys.argv[5:])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timed runs per case and backend")
    ap.add_argument("--only", nargs="*", help="run only cases whose name contains one of these")
    ap.add_argument("--no-iree", action="store_true")
    ap.add_argument("--cuda", action="store_true",
                    help="also time jax's own CUDA backend on the same GPU (JAX_PLATFORMS must include cuda)")
    ap.add_argument("--iree-dir", metavar="DIR", help="run IREE from the vmfbs --iree-export wrote to DIR")
    ap.add_argument("--iree-export", metavar="DIR",
                    help="only compile every case for IREE into DIR (see the module docstring), time nothing")
    ap.add_argument("--gpu-report", action="store_true",
                    help="copy GB/s, fused GB/s, matmul GFLOP/s, tiny-jit us, training steps (see gpu_report)")
    ap.add_argument("--max-n", type=int, default=8192, help="largest matmul of --gpu-report")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the adapter's fp32 peak, for --gpu-report")
    args = ap.parse_args()
    try:
        gpu = jax.devices("wgpu")[0]
    except RuntimeError as e:
        if args.iree_export:
            # Same programs save the linalg ones, which lower to lapack calls IREE cannot compile.
            print(f"(no wgpu device, lowering for cpu instead: {e})", file=sys.stderr)
            return iree_export(args.iree_export, jax.devices("cpu")[0], args.only)
        print(f"no wgpu device: {e}", file=sys.stderr)
        return 2
    if args.iree_export:
        return iree_export(args.iree_export, gpu, args.only)
    cpu = jax.devices("cpu")[0]
    if args.gpu_report:
        return gpu_report(gpu, cpu, args)
    iree = None
    if not args.no_iree:
        try:
            iree = Iree(args.iree_dir)
        except Exception as e:  # noqa: BLE001 - IREE is optional
            print(f"(IREE not available: {type(e).__name__}: {e})", file=sys.stderr)
    print(f"wgpu device: {gpu.device_kind}")
    floor = None
    try:
        from jax_plugins.wgpu import raw_wgpu_floor_ms
        floor = raw_wgpu_floor_ms()
        print(f"raw-wgpu floor (empty dispatch + map round trip): {floor:.4f} ms")
    except (ImportError, AttributeError, RuntimeError) as e:
        print(f"(raw-wgpu floor not available: {e})", file=sys.stderr)
    head = f"{'case':38} {'wgpu ms':>10} {'cpu ms':>10} {'wgpu/cpu':>9}"
    if floor is not None:
        head += f" {'/floor':>8}"
    if iree is not None:
        head += f" {'iree ms':>10} {'wgpu/iree':>9}"
    cuda = None
    if args.cuda:
        try:
            cuda = jax.devices("cuda")[0]
            head += f" {'cuda ms':>10} {'wgpu/cuda':>9}"
        except RuntimeError as e:
            print(f"(jax has no cuda backend here: {e})", file=sys.stderr)
    print(head)
    for name, f, host_args in cases():
        if args.only and not any(s in name for s in args.only):
            continue
        gpu_args = jax.device_put(host_args, gpu)
        tw = timeit(f, gpu_args, args.repeat, args.budget)
        tc = timeit(f, jax.device_put(host_args, cpu), args.repeat, args.budget)
        line = f"{name:38} {tw * 1e3:10.3f} {tc * 1e3:10.3f} {tw / tc:9.2f}"
        if floor is not None:
            line += f" {tw * 1e3 / floor:8.1f}"
        if iree is not None:
            try:
                ti = iree.time(name, f, host_args, gpu_args, args.repeat, args.budget)
                line += f" {ti * 1e3:10.3f} {tw / ti:9.2f}"
            except Exception as e:  # noqa: BLE001 - report and go on
                line += f" {'-':>10} {'-':>9}"
                print(f"  (iree: {type(e).__name__}: {str(e).splitlines()[0][:120]})", file=sys.stderr)
        if cuda is not None:
            try:
                tg = timeit(f, jax.device_put(host_args, cuda), args.repeat, args.budget)
                line += f" {tg * 1e3:10.3f} {tw / tg:9.2f}"
            except Exception as e:  # noqa: BLE001 - report and go on
                line += f" {'-':>10} {'-':>9}"
                print(f"  (cuda: {type(e).__name__}: {str(e).splitlines()[0][:120]})", file=sys.stderr)
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
