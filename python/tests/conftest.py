"""Shared fixtures of the JAX tests."""

from __future__ import annotations

import jax
import pytest


@pytest.fixture(scope="module")
def gpu():
    """The `wgpu` device (the suite is skipped without the plugin)."""
    try:
        return jax.devices("wgpu")[0]
    except RuntimeError as e:  # pragma: no cover - the suite needs the plugin
        pytest.skip(f"no wgpu device: {e}")
