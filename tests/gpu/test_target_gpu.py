"""The CUDA side of the target record on the GPU machine: the exported plugin's record names this GPU's
architecture and passes verify's CUDA rules; a package whose record says its kernels are for an architecture
this GPU lacks (or need a newer CUDA than this driver) is refused by the runtime's preflight with the message,
before dlopen. Messages go to $OUT/preflight-messages.txt for bench/RESULTS.md.

Needs the GPU machine (tests/gpu/run.sh sets AOTI_GPU_ARTIFACTS, AOTI_RUN); anywhere else every test skips."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason

pytestmark = pytest.mark.gpu
TARGET = "extra/aoti_toolchain_target.json"


_REASON = gpu_skip_reason("AOTI_GPU_ARTIFACTS", "AOTI_RUN")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

ART = Path(os.environ["AOTI_GPU_ARTIFACTS"])
AOTI_RUN = os.environ["AOTI_RUN"]
MLP = ART / "mlp.pt2"


def _record(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(TARGET)]
        return json.loads(zf.read(name))


def _capability() -> int:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return major * 10 + minor


def _with_cuda(dst: Path, cuda: dict) -> Path:
    with zipfile.ZipFile(MLP) as zi, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            data = zi.read(info.filename)
            if info.filename.endswith(TARGET):
                doc = json.loads(data)
                doc["cuda"] = {**(doc["cuda"] or {}), **cuda}
                data = json.dumps(doc).encode()
            zo.writestr(info.filename, data)
    return dst


def _run(pt2: Path, tmp: Path) -> subprocess.CompletedProcess:
    args = []
    for k in range(8):
        x = ART / f"mlp.in{k}.npy"
        if x.exists():
            args += ["-i", str(x)]
    return subprocess.run([AOTI_RUN, str(pt2), *args, "-o", str(tmp / "out"), "--device", "cuda"],
                          capture_output=True, text=True, timeout=300)


def _save(name: str, text: str) -> None:
    out = os.environ.get("OUT")
    if out:
        with open(Path(out) / "preflight-messages.txt", "a") as f:
            f.write(f"== {name}\n{text}\n")


def test_record_names_this_gpu_and_verify_agrees():
    from toolchain.verify import verify_paths

    cc = _capability()
    rec = _record(MLP)["cuda"]
    assert rec is not None, "the CUDA plugin's record has no cuda section"
    assert cc in rec["sass"] or any(p <= cc for p in rec["ptx"]), rec
    rules = {f.rule for f in verify_paths([MLP], host=None, profile="dgx-h200").findings}
    if cc == 90:
        assert "cuda-arch-missing" not in rules
    _save("record of mlp.pt2", json.dumps(_record(MLP), indent=1))


def test_sm90_export_runs(tmp_path):
    proc = _run(MLP, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert np.isfinite(np.load(tmp_path / "out" / "output_0.npy")).all()


def test_plugin_for_an_architecture_this_gpu_lacks_is_refused(tmp_path):
    cc = _capability()
    other = 80 if cc // 10 != 8 else 90
    pt2 = _with_cuda(tmp_path / "other-arch.pt2", {"sass": [other], "ptx": []})
    proc = _run(pt2, tmp_path)
    _save(f"sass sm_{other} only, on sm_{cc}", proc.stderr)
    assert proc.returncode == 4, proc.stderr
    assert "no kernel image for this GPU" in proc.stderr and f"sm_{other}" in proc.stderr
    assert f"is sm_{cc}" in proc.stderr and "--cuda-arch" in proc.stderr
    # PTX of an older architecture JIT-compiles here: not refused by the preflight
    ok = _run(_with_cuda(tmp_path / "ptx.pt2", {"sass": [other], "ptx": [min(other, cc)]}), tmp_path)
    assert "no kernel image" not in ok.stderr


def test_plugin_needing_a_newer_cuda_than_this_driver_is_refused(tmp_path):
    pt2 = _with_cuda(tmp_path / "newer-cuda.pt2", {"cuda": "99.0", "min_driver": "999.00"})
    proc = _run(pt2, tmp_path)
    _save("needs CUDA 99.0", proc.stderr)
    assert proc.returncode == 4 and "needs CUDA 99.0" in proc.stderr and "driver supports CUDA" in proc.stderr
