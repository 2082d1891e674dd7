"""Trains a small MLP on synthetic data on the `wgpu` device, then the same on `cpu`.

Nothing is downloaded: the data is a fixed random regression problem. Prints the device, the
loss per epoch and steps/s for each backend, and compares the final losses. Exits non-zero
when no wgpu device is available or the two backends disagree.

    python examples/mlp_train.py [--epochs N] [--steps-per-epoch N]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp


def init_params(key, sizes):
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        key, wk = jax.random.split(key)
        w = jax.random.normal(wk, (d_in, d_out), jnp.float32) * jnp.sqrt(2.0 / d_in)
        params.append((w, jnp.zeros((d_out,), jnp.float32)))
    return params


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


def make_step(lr):
    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return params, loss

    return step


def synthetic_data(n, d_in, d_out):
    kx, kw = jax.random.split(jax.random.PRNGKey(42))
    x = jax.random.normal(kx, (n, d_in), jnp.float32)
    w_true = jax.random.normal(kw, (d_in, d_out), jnp.float32)
    y = jnp.sin(x @ w_true)
    return x, y


def train(device, epochs, steps_per_epoch, batch=128):
    sizes = [32, 128, 128, 8]
    x_all, y_all = synthetic_data(batch * steps_per_epoch, sizes[0], sizes[-1])
    with jax.default_device(device):
        params = init_params(jax.random.PRNGKey(0), sizes)
    params = jax.device_put(params, device)
    x_all = jax.device_put(x_all, device)
    y_all = jax.device_put(y_all, device)
    batches = [
        (x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch])
        for i in range(steps_per_epoch)
    ]
    step = make_step(0.05)
    # Compile (not timed).
    _, warm = step(params, *batches[0])
    warm.block_until_ready()
    print(f"device: {device} ({device.platform})")
    losses = []
    t_total = 0.0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        epoch_loss = 0.0
        for xb, yb in batches:
            params, loss = step(params, xb, yb)
            epoch_loss += loss
        epoch_loss = float(epoch_loss) / steps_per_epoch
        dt = time.perf_counter() - t0
        t_total += dt
        losses.append(epoch_loss)
        print(f"  epoch {epoch + 1:2d}: loss {epoch_loss:.6f}  ({steps_per_epoch / dt:7.1f} steps/s)")
    print(f"  {epochs * steps_per_epoch / t_total:.1f} steps/s overall")
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    args = ap.parse_args()
    try:
        gpu = jax.devices("wgpu")[0]
    except RuntimeError as e:
        print(f"no wgpu device: {e}", file=sys.stderr)
        return 2
    cpu = jax.devices("cpu")[0]
    print("== wgpu")
    lw = train(gpu, args.epochs, args.steps_per_epoch)
    print("== cpu")
    lc = train(cpu, args.epochs, args.steps_per_epoch)
    rel = abs(lw[-1] - lc[-1]) / max(abs(lc[-1]), 1e-12)
    print(f"final loss: wgpu {lw[-1]:.6f}, cpu {lc[-1]:.6f}, relative difference {rel:.2e}")
    if lw[-1] >= lw[0]:
        print("the loss did not go down on wgpu", file=sys.stderr)
        return 1
    if rel > 1e-2:
        print("wgpu and cpu disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
