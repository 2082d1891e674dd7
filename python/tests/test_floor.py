"""The raw-wgpu floor from Python: a small positive time on the plugin's own device."""

import math


def test_raw_wgpu_floor_ms(gpu):
    from jax_plugins.wgpu import raw_wgpu_floor_ms

    ms = raw_wgpu_floor_ms(20)
    assert math.isfinite(ms) and 0.0 < ms < 1000.0
