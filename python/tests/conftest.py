"""Shared fixtures of the JAX tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def gpu():
    """The `wgpu` device (the suite is skipped without the plugin)."""
    # Imported here so that the framework tests (test_torch_xla.py, test_tensorflow.py) run in
    # venvs without jax.
    jax = pytest.importorskip("jax")
    try:
        return jax.devices("wgpu")[0]
    except RuntimeError as e:  # pragma: no cover - the suite needs the plugin
        pytest.skip(f"no wgpu device: {e}")
