"""Lowering rules JAX lacks for a platform it does not know.

JAX lowers some primitives (linalg: cholesky, triangular_solve, lu, qr, eigh, svd, ...) to
custom calls registered only for `cpu`, `cuda`, `rocm` and `tpu`. For `wgpu` each such
primitive needs a rule that emits plain StableHLO (or raises a clear error). Add them to
`RULES` as `(primitive, rule)` pairs; `register` installs them with
`mlir.register_lowering(primitive, rule, platform="wgpu")` when the plugin initializes.
"""

from __future__ import annotations

from typing import Any, Callable

RULES: list[tuple[Any, Callable[..., Any]]] = []
"""`(primitive, lowering rule)` pairs installed for the `wgpu` platform."""


def register(platform: str) -> None:
    """Installs every rule in `RULES` for `platform`."""
    if not RULES:
        return
    from jax._src.interpreters import mlir

    for primitive, rule in RULES:
        mlir.register_lowering(primitive, rule, platform=platform)
