"""TensorFlow (pip, NextPluggableDevice) on the wgpu PJRT plugin: device `WGPU` vs TF on cpu.

Runs where `tensorflow` is importable (scripts/test_frameworks.sh makes such a venv); elsewhere
(the JAX test venv) it is skipped with the reason. TensorFlow runs in a child process that ends
with `os._exit`: on lavapipe, Mesa's LLVM and the LLVM inside libtensorflow_framework.so.2 both
destroy LLVM's global `cl::opt`s at exit and glibc aborts ("free(): invalid pointer") after all
work is done; skipping exit handlers sidesteps that.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow is not installed in this interpreter", allow_module_level=True)

import tensorflow_wgpu  # noqa: E402

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    import keras

    results = {}

    def check(name, fn):
        try:
            results[name] = {"ok": fn()}
        except Exception as e:  # reported to the test
            results[name] = {"error": f"{type(e).__name__}: {e}"[:3000]}
        # What is known so far, in case a later step kills the process.
        sys.stdout.write("PARTIAL " + json.dumps(results) + "\\n")
        sys.stdout.flush()

    WGPU, CPU = "/device:WGPU:0", "/device:CPU:0"

    @tf.function(jit_compile=True)
    def elementwise(x, y):
        return tf.tanh(x) * 2.0 + y * y

    x_e = tf.constant(np.linspace(-2, 2, 16, dtype=np.float32))
    y_e = tf.constant(np.linspace(1, 3, 16, dtype=np.float32))
    rng = np.random.default_rng(0)
    x_k = rng.standard_normal((32, 8)).astype(np.float32)
    y_k = rng.standard_normal((32, 2)).astype(np.float32)

    def dense():
        return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(2)])

    keras.utils.set_random_seed(0)
    init = dense().get_weights()

    def train(dev):
        with tf.device(dev):
            model = dense()
            model.set_weights(init)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
            losses = [float(model.train_on_batch(x_k, y_k)) for _ in range(3)]
        return losses, model.get_weights()

    # TensorFlow on cpu first: once the wgpu adapter is open, lavapipe's LLVM (Mesa) shares
    # LLVM's global option registry with the LLVM inside TensorFlow, and TF's own XLA:CPU
    # compiler then crashes (CommandLineParser::ResetAllOptionOccurrences).
    with tf.device(CPU):
        want_e = elementwise(x_e, y_e).numpy()
    want_k = train(CPU)

    results["devices"] = [d.device_type for d in tf.config.list_physical_devices()]

    def round_trip():
        with tf.device(WGPU):
            x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
        assert x.device.endswith("WGPU:0"), x.device
        # The adapter is open now: is it lavapipe (Mesa's LLVM-based software Vulkan)?
        with open("/proc/self/maps") as maps:
            results["lavapipe"] = "libvulkan_lvp" in maps.read()
        return x.numpy().tolist()
    check("round_trip", round_trip)

    def run_elementwise():
        with tf.device(WGPU):
            got = elementwise(x_e, y_e)
        assert got.device.endswith("WGPU:0"), got.device
        np.testing.assert_allclose(got.numpy(), want_e, rtol=1e-5, atol=1e-6)
        return True
    check("jit_elementwise", run_elementwise)

    def keras_train_step():
        (cl, cw), (gl, gw) = want_k, train(WGPU)
        np.testing.assert_allclose(gl, cl, rtol=1e-4, atol=1e-5)
        for a, b in zip(gw, cw):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        return cl
    check("keras_train_step", keras_train_step)

    sys.stdout.write("RESULTS " + json.dumps(results) + "\\n")
    sys.stdout.flush()
    os._exit(0)
    """
)

HLO_MISSING = 'format "hlo" is not supported'


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    env = dict(os.environ)
    if "TF_PLUGGABLE_DEVICE_LIBRARY_PATH" not in env and not (
        tensorflow_wgpu.plugin_dir() / tensorflow_wgpu.FACTORY_LIBRARY
    ).exists():
        # Not installed in site-packages: install into a scratch directory TensorFlow is told of.
        dest = tmp_path_factory.mktemp("tensorflow-plugins")
        tensorflow_wgpu.install(dest)
        env["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = str(dest)
    flags = env.get("TF_XLA_FLAGS", "")
    if tensorflow_wgpu.TF_XLA_FLAGS not in flags:
        env["TF_XLA_FLAGS"] = f"{flags} {tensorflow_wgpu.TF_XLA_FLAGS}".strip()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900,
        cwd=pathlib.Path(__file__).parent,
    )
    lines = [l for l in out.stdout.splitlines() if l.startswith(("RESULTS ", "PARTIAL "))]
    assert lines, f"TensorFlow child failed (rc {out.returncode}):\n{out.stderr[-5000:]}"
    results = json.loads(lines[-1].split(" ", 1)[1])
    if not lines[-1].startswith("RESULTS "):
        results["died"] = {"rc": out.returncode, "stderr": out.stderr[-3000:]}
    return results


def _ok(results, name):
    if name not in results and "died" in results:
        died = results["died"]
        if died["rc"] < 0 and results.get("lavapipe"):
            # Lavapipe compiles shaders with Mesa's libLLVM, whose llvm:: symbols resolve to
            # the LLVM copy libtensorflow_framework.so.2 exports (seen: a SIGSEGV in
            # llvm::FixedVectorType::get called from libvulkan_lvp.so). A GPU driver that does
            # not use LLVM is not affected.
            pytest.skip(f"{name}: TensorFlow died by signal {-died['rc']} on lavapipe (Mesa's "
                        "LLVM clashes with the LLVM inside TensorFlow)")
        pytest.fail(f"{name}: TensorFlow child died (rc {died['rc']}):\n{died['stderr']}")
    r = results[name]
    if "error" in r and HLO_MISSING in r["error"]:
        pytest.skip(f"{name}: this build of the plugin has no HLO proto frontend (TensorFlow "
                    f"sends format \"hlo\"): {r['error'][:300]}")
    assert "ok" in r, r.get("error")
    return r["ok"]


def test_wgpu_device_listed(results):
    assert "WGPU" in results["devices"]


def test_tensor_round_trip(results):
    assert _ok(results, "round_trip") == [[float(4 * i + j) for j in range(4)] for i in range(3)]


def test_jit_compile_elementwise_matches_cpu(results):
    assert _ok(results, "jit_elementwise") is True


def test_keras_dense_training_step_matches_cpu(results):
    losses = _ok(results, "keras_train_step")
    assert losses[-1] < losses[0]
