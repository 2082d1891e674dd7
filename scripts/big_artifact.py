"""Writes a ~20 MB portable artifact (an MLP whose weights are baked-in constants).

    python scripts/big_artifact.py OUT.mlirbc
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

rng = np.random.default_rng(0)
W1 = rng.normal(size=(1536, 2560)).astype(np.float32)
W2 = rng.normal(size=(2560, 512)).astype(np.float32)


def f(x):
    return jnp.tanh(jnp.tanh(x @ W1) @ W2).sum()


data = export.export(jax.jit(f))(jnp.ones((8, 1536), jnp.float32)).mlir_module_serialized
open(sys.argv[1], "wb").write(data)
print(f"{len(data) / 1e6:.1f} MB")
