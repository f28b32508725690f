"""bfloat16 and float16 CUDA plugins on the GPU: CUDA torch tensors (DLPack), host torch tensors, numpy arrays
(ml_dtypes.bfloat16) and DeviceArrays in; numpy, DeviceArray and CUDA torch tensors out; aoti-run with .npy
files ('<V2' for bfloat16, '<f2' for float16). Each against eager torch on the same GPU.

Needs the GPU machine (tests/gpu/run.sh sets AOTI_HOST_LIBRARY and AOTI_RUN to the CUDA build); the models
are exported here with that machine's torch. Anywhere else every test skips, saying why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason
from tests.models_corpus import half_conv_mlp

pytestmark = pytest.mark.gpu
# (rtol, atol): eager rounds each op to the dtype, the plugin fuses in float; cuBLAS/cuDNN may pick other
# reduction orders than eager. A few units in the last place at outputs of magnitude ~0.3.
TOL = {"bfloat16": (1e-2, 1e-2), "float16": (5e-3, 5e-3)}


def _skip_reason() -> str | None:
    reason = gpu_skip_reason("AOTI_HOST_LIBRARY", "AOTI_RUN")
    if reason:
        return reason
    try:
        import ml_dtypes  # noqa: F401
        import torch
    except ImportError as exc:
        return f"{exc.name} is not installed"
    if not torch.cuda.is_available():
        return "torch has no CUDA here: the bf16/fp16 CUDA plugins are exported with the GPU machine's torch"
    return None


_REASON = _skip_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

import ml_dtypes  # noqa: E402
import torch  # noqa: E402

from toolchain import runtime  # noqa: E402
from toolchain.runtime import cuda  # noqa: E402

AOTI_RUN = os.environ["AOTI_RUN"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """dtype -> (pt2, host input tensor, eager output on the GPU, moved to the host)."""
    from toolchain.export import export

    root = tmp_path_factory.mktemp("half-cuda")
    build = Path(os.environ.get("AOTI_GPU_ARTIFACTS", root)) / "build"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {}
    for dtype in TOL:
        module, (x,) = half_conv_mlp(dtype)
        module = module.to("cuda")
        with torch.no_grad():
            expected = module(x.to("cuda")).cpu()
        pt2 = export(module, (x.to("cuda"),), root / f"convmlp_{dtype}_cuda.pt2", build_dir=build, device="cuda")
        out[dtype] = (pt2, x, expected)
    return out


def _f32(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().float().numpy()
    return np.asarray(a).astype(np.float32)


def _close(got, expected, dtype: str, what: str) -> None:
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(_f32(got), _f32(expected), rtol=rtol, atol=atol, err_msg=what)


def _np_dtype(dtype: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


@pytest.mark.parametrize("dtype", list(TOL))
def test_python_module_cuda_tensors_in_and_out(models, dtype: str) -> None:
    pt2, x, expected = models[dtype]
    with runtime.load(pt2, device="cuda") as prog:
        xd = x.to("cuda")
        # a CUDA torch tensor in (DLPack, no copy), numpy out in the dtype
        (got,) = prog.run([xd])
        assert isinstance(got, np.ndarray) and got.dtype == _np_dtype(dtype)
        _close(got, expected, dtype, "CUDA torch in, numpy out")
        # CUDA torch tensors out, on the device, in torch's dtype
        (got_t,) = prog.run([xd], device_outputs=True, output_type="torch")
        assert got_t.is_cuda and got_t.dtype == getattr(torch, dtype)
        assert torch.equal(got_t.cpu(), runtime.to_torch(got))
        # a strided (transposed) CUDA view
        (got_s,) = prog.run([xd.transpose(2, 3).contiguous().transpose(2, 3)])
        np.testing.assert_array_equal(got_s.view(np.uint16), got.view(np.uint16))
        # host memory in: a CPU torch tensor and a numpy array (ml_dtypes for bfloat16)
        for host in (x, runtime.to_numpy(x)):
            (got_h,) = prog.run([host])
            np.testing.assert_array_equal(got_h.view(np.uint16), got.view(np.uint16))
        # DeviceArrays in and out keep the dtype (the CUDA array interface alone says '<V2' for bfloat16)
        dev = cuda.DeviceArray.from_numpy(runtime.to_numpy(x))
        assert dev.dtype == _np_dtype(dtype)
        (out_dev,) = prog.run([dev], device_outputs=True)
        assert isinstance(out_dev, cuda.DeviceArray) and out_dev.dtype == _np_dtype(dtype)
        np.testing.assert_array_equal(out_dev.numpy().view(np.uint16), got.view(np.uint16))


@pytest.mark.parametrize("dtype", list(TOL))
def test_aoti_run_cuda_npy_in_the_dtype(models, dtype: str, tmp_path: Path) -> None:
    pt2, x, expected = models[dtype]
    np.save(tmp_path / "x.npy", runtime.to_numpy(x))  # '<V2' for bfloat16 (ml_dtypes), '<f2' for float16
    proc = subprocess.run([AOTI_RUN, str(pt2), "--device", "cuda", "-i", str(tmp_path / "x.npy"),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"output_0: {dtype}[2, 10]" in proc.stdout
    got = np.load(tmp_path / "out" / "output_0.npy")
    if dtype == "bfloat16":
        assert got.dtype == np.dtype("V2")
        got = got.view(ml_dtypes.bfloat16)
    else:
        assert got.dtype == np.float16
    _close(got, expected, dtype, "aoti-run on cuda")
