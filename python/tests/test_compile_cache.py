"""JAX's persistent compilation cache on `wgpu`: a second Python process compiling the same
function loads the serialized executable (kernels and step program) from the cache instead
of compiling, and gets the same results as the cpu backend."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

CHILD = pathlib.Path(__file__).with_name("compile_cache_child.py")


def _run(cache_dir: pathlib.Path, kind: str) -> dict:
    env = dict(os.environ)
    # The driver's pipeline cache too lives in the test's directory, shared by both processes.
    env["WGPU_HLO_PIPELINE_CACHE_DIR"] = str(cache_dir / "pipelines")
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    p = subprocess.run(
        [sys.executable, str(CHILD), str(cache_dir / "jax"), kind],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    assert "Error reading persistent compilation cache" not in p.stderr, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


# No assertion on the times: loading skips parsing, passes, fusion and code generation, but on
# lavapipe the driver's pipeline creation, the same in both processes (Mesa 22's lavapipe keeps
# nothing in a VkPipelineCache), is most of a compile; the times are printed (`pytest -s`).


def _first_and_second(tmp_path: pathlib.Path, kind: str) -> tuple[dict, dict]:
    first = _run(tmp_path, kind)
    entries = list((tmp_path / "jax").iterdir())
    second = _run(tmp_path, kind)
    print(
        f"{kind}: first process compile {first['compile_s']:.3f} s "
        f"(cpu {first['compile_cpu_s']:.3f} s), second {second['compile_s']:.3f} s "
        f"(cpu {second['compile_cpu_s']:.3f} s): "
        f"{first['compile_s'] / second['compile_s']:.1f}x"
    )
    assert first["hits"] == 0 and first["misses"] >= 1, first
    assert entries, "the first process wrote no cache entry"
    assert second["hits"] >= 1 and second["misses"] == 0, second
    return first, second


def test_second_process_loads_from_cache(gpu, tmp_path):
    first, second = _first_and_second(tmp_path, "mlp")
    assert first["max_abs_err"] < 1e-4, first
    assert second["max_abs_err"] < 1e-4, second


@pytest.mark.skipif(
    importlib.util.find_spec("flax") is None or importlib.util.find_spec("optax") is None,
    reason="flax and optax are not installed",
)
def test_flax_optax_train_step_second_process(gpu, tmp_path):
    first, second = _first_and_second(tmp_path, "flax")
    assert first["max_abs_err"] < 1e-3, first
    assert second["max_abs_err"] < 1e-3, second


def test_gaussian_process_second_process(gpu, tmp_path):
    # Linear algebra plans from the cache: their kernels' state copies (texture bindings after
    # the buffers) come back with them.
    first, second = _first_and_second(tmp_path, "gp")
    assert first["max_abs_err"] < 1e-3, first
    assert second["max_abs_err"] < 1e-3, second
