"""One process of the compilation-cache test: compiles a function on `wgpu` with JAX's
persistent compilation cache in a given directory and prints one JSON line: the backend
compile time (`Lowered.compile()`, which reads the cache; wall and process CPU time), JAX's cache hit/miss events and how
far the result is from the cpu backend's.

Usage: python compile_cache_child.py CACHE_DIR {mlp,flax,gp}
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import monitoring


def mlp():
    """A jitted MLP gradient step (no flax needed)."""

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    def step(params, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        return l, jax.tree.map(lambda p, d: p - 0.1 * d, params, g)

    rng = np.random.default_rng(0)
    sizes = [16, 32, 32, 4]
    params = [
        (rng.standard_normal((a, b), np.float32) * 0.3, np.zeros(b, np.float32))
        for a, b in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((8, 16), np.float32)
    y = rng.standard_normal((8, 4), np.float32)
    return step, (params, x, y)


def flax_train_step():
    """A flax (linen) CNN + MLP classifier trained with optax adam: one training step."""
    import flax.linen as nn
    import optax

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(8, (3, 3))(x)
            x = nn.relu(x)
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = nn.Conv(16, (3, 3))(x)
            x = nn.relu(x)
            x = x.reshape((x.shape[0], -1))
            x = nn.Dense(64)(x)
            x = nn.LayerNorm()(x)
            x = nn.gelu(x)
            return nn.Dense(10)(x)

    model = Model()
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 16, 3), np.float32)
    labels = rng.integers(0, 10, 8)
    with jax.default_device(jax.devices("cpu")[0]):
        params = model.init(jax.random.key(0), x)
        opt_state = tx.init(params)
    params, opt_state = jax.device_get((params, opt_state))

    def step(params, opt_state, x, labels):
        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    return step, (params, opt_state, x, labels)


def gaussian_process():
    """A Gaussian process's negative log likelihood and its gradient (Cholesky, triangular
    solves: kernels that read copies of their in-place state on CPU adapters)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 3)).astype(np.float32)
    y = np.sin(x.sum(1)).astype(np.float32)

    def nll(log_scale, x, y):
        d = jnp.sum((x[:, None] - x[None]) ** 2, -1)
        k = jnp.exp(-0.5 * d / jnp.exp(2 * log_scale)) + 0.1 * jnp.eye(x.shape[0])
        c = jnp.linalg.cholesky(k)
        a = jax.scipy.linalg.cho_solve((c, True), y)
        return 0.5 * y @ a + jnp.sum(jnp.log(jnp.diag(c)))

    return jax.value_and_grad(nll), (np.float32(0.3), x, y)


def main() -> None:
    cache_dir, kind = sys.argv[1], sys.argv[2]
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    events: list[str] = []
    monitoring.register_event_listener(lambda event, **kwargs: events.append(event))

    fn, args = {"mlp": mlp, "flax": flax_train_step, "gp": gaussian_process}[kind]()
    gpu, cpu = jax.devices("wgpu")[0], jax.devices("cpu")[0]
    on_gpu = jax.device_put(args, gpu)
    lowered = jax.jit(fn).lower(*on_gpu)
    del events[:]
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    # Only the wgpu compile's events (the cpu reference below uses the cache too).
    events = list(events)
    got = jax.device_get(compiled(*on_gpu))
    want = jax.device_get(jax.jit(fn)(*jax.device_put(args, cpu)))
    err = max(
        float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)), initial=0.0))
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want))
    )
    print(
        json.dumps(
            {
                "compile_s": compile_s,
                "compile_cpu_s": compile_cpu_s,
                "hits": events.count("/jax/compilation_cache/cache_hits"),
                "misses": events.count("/jax/compilation_cache/cache_misses"),
                "max_abs_err": err,
            }
        )
    )


if __name__ == "__main__":
    main()
