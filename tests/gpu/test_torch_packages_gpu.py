"""CUDA packages torch wrote itself (torch._inductor.aoti_compile_and_package with this machine's torch, no
contract of ours): the plugin's reason for refusing inputs reaches the Python module's exceptions and aoti-run
with what it means (the 0/1 specialisation, the dtypes in words) on the device, whether the plugin can give its
reason back (AOTInductorGetLastError, torch >= 2.13) or only prints it (torch 2.11 here: the host collects what
it writes to std::cerr); `contract add --device cuda` records a contract the host then checks.

Needs the GPU machine: tests/gpu/run.sh sets AOTI_HOST_LIBRARY (the CUDA build) and AOTI_RUN."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason

pytestmark = pytest.mark.gpu

_REASON = gpu_skip_reason("AOTI_HOST_LIBRARY", "AOTI_RUN")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
LIB = Path(os.environ["AOTI_HOST_LIBRARY"])
MIN1_REASON = "input_handles[0]: dim value is too small at 0, expected it to be >= 2, but got: 1"
BF16_REASON = "input_handles[0]: unmatched dtype, expected: 15(at::kBFloat16), but got: 6"


@pytest.fixture(scope="module")
def theirs(tmp_path_factory):
    import torch

    from toolchain.export import cuda_configs, inductor_configs

    out = tmp_path_factory.mktemp("theirs_cuda")
    made = {}
    for name, dtype, dynamic in (("min1", torch.float32, True), ("bf16", torch.bfloat16, False)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        model = model.to("cuda", dtype).eval()
        x = torch.randn(8, 16, device="cuda", dtype=dtype)
        dyn = {"input": {0: torch.export.Dim("batch", min=1, max=64)}} if dynamic else None
        ep = torch.export.export(model, (x,), dynamic_shapes=dyn)
        path = out / f"{name}.pt2"
        torch._inductor.aoti_compile_and_package(ep, package_path=str(path),
                                                 inductor_configs={**inductor_configs("embedded"), **cuda_configs()})
        with zipfile.ZipFile(path) as zf:
            assert not any(n.endswith("aoti_toolchain_contract.json") for n in zf.namelist())
        made[name] = (path, model)
    return made


def test_python_errors_carry_the_plugins_reason_on_the_device(theirs):
    from toolchain import runtime
    from toolchain.errors import InputError

    pt2, _ = theirs["min1"]
    with runtime.load(pt2, library_path=LIB, device="cuda") as prog, pytest.raises(InputError) as exc:
        prog.run([np.ones((1, 16), np.float32)])
    msg = str(exc.value)
    assert MIN1_REASON in msg and "specialises sizes 0 and 1" in msg, msg
    pt2, _ = theirs["bf16"]
    with runtime.load(pt2, library_path=LIB, device="cuda") as prog, pytest.raises(InputError) as exc:
        prog.run([np.ones((8, 16), np.float32)])
    msg = str(exc.value)
    assert BF16_REASON in msg and "compiled for bfloat16 there and was given float32" in msg, msg


def test_aoti_run_prints_the_reason_on_the_device(theirs, tmp_path):
    pt2, _ = theirs["min1"]
    np.save(tmp_path / "x.npy", np.ones((1, 16), np.float32))
    p = subprocess.run([os.environ["AOTI_RUN"], pt2, "--device", "cuda", "-i", tmp_path / "x.npy", "-o",
                        tmp_path / "out"], capture_output=True, text=True)
    assert p.returncode != 0 and MIN1_REASON in p.stderr and "specialises sizes 0 and 1" in p.stderr, p.stderr


def test_contract_add_on_the_device_then_the_host_checks(theirs, tmp_path):
    import torch

    from toolchain import runtime
    from toolchain.errors import InputError

    pt2, model = theirs["min1"]
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "min1.contract.pt2"
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOTI_HOST_LIBRARY": str(LIB)}
    p = subprocess.run([sys.executable, "-m", "toolchain", "contract", "add", pt2, "--example-inputs",
                        tmp_path / "x.npy", "-o", out, "--device", "cuda"], capture_output=True, text=True, env=env,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr
    with runtime.load(out, library_path=LIB, device="cuda") as prog:
        (y,) = prog.run([x])
        with torch.no_grad():
            ref = model(torch.from_numpy(x).cuda()).cpu().numpy()
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(InputError) as exc:
            prog.run([np.ones((1, 16), np.float32)])
        assert "must be 2..64" in str(exc.value) and "specialises sizes 0 and 1" in str(exc.value)
