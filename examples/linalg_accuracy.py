"""Accuracy and time of `jnp.linalg.eigh` / `svd` on `wgpu`, against float64 references.

    python examples/linalg_accuracy.py [N ...]      (default 48 256)

For a random normal matrix of each size (symmetrized for eigh), prints the time of one call
after a warm-up and, relative to the matrix's 2-norm: eigh's residual max|A V - V diag(w)|,
orthogonality max|V^T V - I| and eigenvalue error; svd's reconstruction, orthogonality of U
and singular-value error. jax cpu reaches ~1e-7 to 1e-6 on these.
"""

import sys
import time

import numpy as np

import jax
import jax.numpy as jnp


def timed(f, x):
    jax.block_until_ready(f(x))
    t = time.perf_counter()
    out = jax.block_until_ready(f(x))
    return out, (time.perf_counter() - t) * 1e3


def main():
    gpu = jax.devices("wgpu")[0]
    rng = np.random.default_rng(0)
    for n in [int(a) for a in sys.argv[1:]] or [48, 256]:
        a = rng.normal(size=(n, n)).astype(np.float32)
        a = (a + a.T) / 2
        big_a = a.astype(np.float64)
        norm = np.linalg.norm(big_a, 2)
        (w, v), te = timed(jax.jit(jnp.linalg.eigh), jax.device_put(a, gpu))
        w, v = np.asarray(w, np.float64), np.asarray(v, np.float64)
        res = np.abs(big_a @ v - v * w).max() / norm
        orth = np.abs(v.T @ v - np.eye(n)).max()
        werr = np.abs(w - np.linalg.eigvalsh(big_a)).max() / norm
        b = rng.normal(size=(n, n)).astype(np.float32)
        big_b = b.astype(np.float64)
        norm_b = np.linalg.norm(big_b, 2)
        (u, s, vt), ts = timed(jax.jit(jnp.linalg.svd), jax.device_put(b, gpu))
        u, s, vt = (np.asarray(z, np.float64) for z in (u, s, vt))
        rec = np.abs((u * s) @ vt - big_b).max() / norm_b
        orth_u = np.abs(u.T @ u - np.eye(n)).max()
        serr = np.abs(s - np.linalg.svd(big_b, compute_uv=False)).max() / norm_b
        print(f"n={n}: eigh {te:.1f} ms, residual {res:.1e}, orthogonality {orth:.1e}, "
              f"eigenvalues {werr:.1e} | svd {ts:.1f} ms, reconstruction {rec:.1e}, "
              f"orthogonality {orth_u:.1e}, values {serr:.1e}", flush=True)


if __name__ == "__main__":
    main()
