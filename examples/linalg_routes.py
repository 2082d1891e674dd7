"""eigh / svd with U, V / svd values on wgpu at several sizes: median ms of up to three calls
after the first, and errors against numpy in f64 (residual or reconstruction, orthogonality,
values; relative to the largest value). The route (Jacobi or the tridiagonal/bidiagonal
reductions) is what the process's environment picks, so comparing routes takes one run each:

    python examples/linalg_routes.py default eigh,svduv,svd 128 256 512
    WGPU_HLO_EIGH_TRIDIAGONAL=0 WGPU_HLO_SVD_BIDIAGONAL=0 python examples/linalg_routes.py jacobi eigh 128
    WGPU_HLO_EIGH_TRIDIAGONAL=1 WGPU_HLO_SVD_BIDIAGONAL=1 python examples/linalg_routes.py forced eigh 128

(arguments: a label printed on every line, the cases, the sizes). The GPU thresholds in
`src/codegen/op_kernels/{tridiagonal,bidiagonal}.rs` come from these runs on an H200."""

import sys
import time

import numpy as np

import jax
import jax.numpy as jnp


def timed(f, x, budget=2.0):
    """`f(x)`, the first call's seconds and the median ms of up to three calls after it."""
    t = time.perf_counter()
    out = jax.block_until_ready(f(x))
    first = time.perf_counter() - t
    ts = []
    t0 = time.perf_counter()
    while len(ts) < 3 and time.perf_counter() - t0 < budget:
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        ts.append(time.perf_counter() - t)
    return out, first, (np.median(ts) * 1e3 if ts else float("nan"))


def main():
    gpu = jax.devices("wgpu")[0]
    label = sys.argv[1]
    which = sys.argv[2].split(",")
    sizes = [int(s) for s in sys.argv[3:]] or [128, 256, 512]
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        s = a @ a.T / n + np.eye(n, dtype=np.float32)
        a64, s64 = a.astype(np.float64), s.astype(np.float64)
        if "eigh" in which:
            (w, v), first, ms = timed(jax.jit(jnp.linalg.eigh), jax.device_put(s, gpu))
            w, v = np.asarray(w, np.float64), np.asarray(v, np.float64)
            res = np.abs(s64 @ v - v * w).max() / np.abs(w).max()
            orth = np.abs(v.T @ v - np.eye(n)).max()
            werr = np.abs(np.sort(w) - np.linalg.eigvalsh(s64)).max() / np.abs(w).max()
            print(f"{label} eigh {n}: {ms:.2f} ms (first {first * 1e3:.0f} ms) residual {res:.1e} "
                  f"orth {orth:.1e} values {werr:.1e}", flush=True)
        want = np.linalg.svd(a64, compute_uv=False)
        if "svduv" in which:
            (u, sv, vt), first, ms = timed(jax.jit(jnp.linalg.svd), jax.device_put(a, gpu))
            u, sv, vt = (np.asarray(t, np.float64) for t in (u, sv, vt))
            rec = np.abs((u * sv) @ vt - a64).max() / sv.max()
            orth = max(np.abs(u.T @ u - np.eye(n)).max(), np.abs(vt @ vt.T - np.eye(n)).max())
            serr = np.abs(sv - want).max() / want.max()
            print(f"{label} svd U,V {n}: {ms:.2f} ms (first {first * 1e3:.0f} ms) reconstruction "
                  f"{rec:.1e} orth {orth:.1e} values {serr:.1e}", flush=True)
        if "svd" in which:
            sv, first, ms = timed(jax.jit(lambda x: jnp.linalg.svd(x, compute_uv=False)),
                                  jax.device_put(a, gpu))
            serr = np.abs(np.asarray(sv, np.float64) - want).max() / want.max()
            print(f"{label} svd values {n}: {ms:.2f} ms (first {first * 1e3:.0f} ms) values {serr:.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
