"""`WGPU_HLO_CRASH_REPORT=1`: a native crash on a thread without Python names the thread and
the library, then Python's faulthandler (the handler that was there before) still runs."""

import os
import resource
import subprocess
import sys

import pytest

CRASH = r"""
import ctypes, faulthandler, threading, jax
faulthandler.enable()
jax.devices("wgpu")
def crash():
    ctypes.CDLL(None).prctl(15, b"crashing-thread")  # PR_SET_NAME, this thread
    ctypes.string_at(8)
t = threading.Thread(target=crash)
t.start()
t.join()
print("not reached")
"""


@pytest.mark.parametrize("report", ["1", "0"])
def test_a_crash_names_its_thread_then_hands_over(report, tmp_path):
    env = dict(os.environ, WGPU_HLO_CRASH_REPORT=report, JAX_PLATFORMS="wgpu,cpu")
    # No core file from this deliberate crash, wherever core dumps are on.
    no_core = lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # noqa: E731
    out = subprocess.run([sys.executable, "-c", CRASH], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, preexec_fn=no_core)
    assert out.returncode == -11, (out.returncode, out.stderr)
    assert "not reached" not in out.stdout
    # faulthandler ran either way: the report hands over to it.
    assert "Fatal Python error: Segmentation fault" in out.stderr, out.stderr
    reported = "native crash report" in out.stderr
    assert reported == (report == "1"), out.stderr
    if reported:
        assert 'SIGSEGV on thread "crashing-thread"' in out.stderr, out.stderr
        assert "fault address 0x8" in out.stderr, out.stderr
        assert "in mapping:" in out.stderr and "libc.so" in out.stderr, out.stderr
        assert out.stderr.index("end of the native crash report") < out.stderr.index(
            "Fatal Python error"), out.stderr
