"""The raw-wgpu floor from Python: a small positive time on the plugin's own device."""

import math


def test_raw_wgpu_floor_ms(gpu):
    from jax_plugins.wgpu import raw_wgpu_floor_ms

    ms = raw_wgpu_floor_ms(20)
    assert math.isfinite(ms) and 0.0 < ms < 1000.0


def test_copy_bandwidth_gbs(gpu):
    """The device's own copy bandwidth, the ceiling of `bench_jax.py --gpu-report`'s fused
    GB/s: positive and finite, also for sizes that are not multiples of 4 or below 4 bytes."""
    from jax_plugins.wgpu import copy_bandwidth_gbs

    for nbytes, runs in ((1 << 20, 3), (4099, 1), (3, 1)):
        gbs = copy_bandwidth_gbs(nbytes, runs)
        assert math.isfinite(gbs) and gbs > 0.0
