"""Programs whose values are read at many indices through chains of slices, pads and
concatenations: `lax.associative_scan` (an up-sweep of strided slices, a down-sweep of pads
and concatenations, one level per doubling of n) and chains of rotations. Fusion computes a
fused value once per index it is read at, so without a bound such a program fused into one
kernel exponential in its depth: an associative scan of 32 elements compiled for 105 s, one of
1M elements was killed at 24 GB. Fusion now writes a value once one kernel element would
evaluate it at more than `MAX_EVALUATIONS` indices (`src/fusion/mod.rs`). Each case runs in a
child process with a time limit, so a regression fails instead of hanging the suite, and
compares with jax cpu."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")

CASES = {
    "associative_scan_add_1m": """
        x = rng.standard_normal(1 << 20).astype(np.float32)
        f = lambda x: lax.associative_scan(jnp.add, x)
        args = (x,)
    """,
    "associative_scan_max_rows": """
        x = rng.standard_normal((64, 3000)).astype(np.float32)
        f = lambda x: lax.associative_scan(jnp.maximum, x, axis=1)
        args = (x,)
    """,
    "associative_scan_pairs": """
        a = rng.uniform(0.5, 1.0, 4096).astype(np.float32)
        b = rng.standard_normal(4096).astype(np.float32)
        def combine(p, q):
            return p[0] * q[0], q[0] * p[1] + q[1]
        f = lambda a, b: lax.associative_scan(combine, (a, b))[1]
        args = (a, b)
    """,
    "rotations_of_fused_values": """
        x = rng.standard_normal(4096).astype(np.float32)
        def f(x):
            for _ in range(24):
                x = jnp.tanh(jnp.concatenate([x[1:], x[:1]]) * 0.5 + x * 0.5)
            return x
        args = (x,)
    """,
}

CHILD = """
import numpy as np, jax, jax.numpy as jnp
from jax import lax
rng = np.random.default_rng(5)
{body}
g, c = jax.devices("wgpu")[0], jax.devices("cpu")[0]
got = np.asarray(jax.jit(f)(*[jax.device_put(a, g) for a in args]))
want = np.asarray(jax.jit(f)(*[jax.device_put(a, c) for a in args]))
scale = max(1.0, float(np.max(np.abs(want))))
err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
print("ERR", err)
"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_deep_index_chains_compile_and_match_cpu(gpu, name):
    code = CHILD.format(body=textwrap.dedent(CASES[name]))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = float(proc.stdout.split("ERR")[-1])
    assert err < 1e-5, err
