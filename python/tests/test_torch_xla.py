"""PyTorch/XLA on the wgpu PJRT plugin (`PJRT_DEVICE=WGPU`, through the `torch_xla.plugins` entry
point of this package) against torch on the cpu, in the same process.

Runs where `torch_xla` is importable (scripts/test_frameworks.sh makes such a venv); elsewhere
(the JAX test venv) it is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Before torch_xla is imported: it picks the PJRT device when it starts its runtime.
os.environ.setdefault("PJRT_DEVICE", "WGPU")

torch = pytest.importorskip("torch", reason="torch is not installed in this interpreter")
torch_xla = pytest.importorskip(
    "torch_xla", reason="torch_xla is not installed in this interpreter"
)
import torch_xla.runtime as xr  # noqa: E402

if os.environ["PJRT_DEVICE"] != "WGPU":  # pragma: no cover - a user's choice
    pytest.skip("PJRT_DEVICE is not WGPU", allow_module_level=True)


@pytest.fixture(scope="module")
def xla():
    device = torch_xla.device()
    assert xr.device_type() == "WGPU"
    return device


def test_plugin_selected_through_entry_point(xla):
    from torch_xla.experimental import plugins

    plugin = plugins.default()
    assert type(plugin).__name__ == "WgpuPlugin"
    assert plugin.library_path().endswith("libpjrt_wgpu.so")
    assert xr.global_runtime_device_count() == 1
    # StableHLO unless the user chose otherwise (see torch_xla_wgpu).
    assert os.environ.get("XLA_STABLEHLO_COMPILE") in ("0", "1")


def test_elementwise_and_reduction(xla):
    a = torch.linspace(-3, 3, 24).reshape(4, 6)
    got = (torch.tanh(a.to(xla)) * 2 + a.to(xla).exp()).sum(dim=1).cpu()
    want = (torch.tanh(a) * 2 + a.exp()).sum(dim=1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )


def _train(model, device, steps, x, y):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if device.type == "xla":
            torch_xla.sync()
        losses.append(loss.detach().cpu().item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_mlp_training_matches_cpu(xla):
    torch.manual_seed(1)
    x = torch.randn(64, 8)
    y = torch.randn(64, 4)
    cpu_losses, cpu_params = _train(_mlp(), torch.device("cpu"), 5, x, y)
    xla_losses, xla_params = _train(_mlp(), xla, 5, x, y)
    assert cpu_losses[-1] < cpu_losses[0]  # it learns
    torch.testing.assert_close(torch.tensor(xla_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    for name, want in cpu_params.items():
        torch.testing.assert_close(xla_params[name], want, rtol=1e-4, atol=1e-5, msg=name)


HLO_SCRIPT = textwrap.dedent(
    """
    import torch, torch_xla
    d = torch_xla.device()
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    print(((a.to(d) * 2 + 1).sum(0).cpu() - (a * 2 + 1).sum(0)).abs().max().item())
    """
)


def test_hlo_proto_path():
    """`XLA_STABLEHLO_COMPILE=0`: torch_xla sends serialized HloModuleProtos (format "hlo")."""
    env = dict(os.environ, PJRT_DEVICE="WGPU", XLA_STABLEHLO_COMPILE="0")
    out = subprocess.run(
        [sys.executable, "-c", HLO_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    if 'format "hlo" is not supported' in out.stderr:
        pytest.skip("this build of the plugin has no HLO proto frontend (format \"hlo\")")
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.strip().splitlines()[-1]) == 0.0
