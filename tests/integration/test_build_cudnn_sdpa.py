"""scons cuda=on with and without cuDNN's and cudnn-frontend's headers (toolchain/scons/cudnn.py): where they are
missing the CUDA variant still builds (the SDPA translation unit compiles to nothing) and scons says so once with
the fix; where they are found every translation unit gets the frontend's defines and the headers as system
includes. Dry runs (-n): the commands scons would run, no compiling."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT, scons_command
from toolchain.scons.nvcc import find_nvcc

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")

FETCHED = REPO_ROOT / "build" / "cudnn-headers"


def _dry_run(build_dir, **env_extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDNN_INCLUDE_DIR", "CUDNN_FRONTEND_INCLUDE_DIR")}
    proc = subprocess.run([*scons_command(), "-Q", "-n", "cuda=on", f"build_dir={build_dir}"], cwd=REPO_ROOT,
                          env={**env, **env_extra}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    compiles = [ln for ln in proc.stdout.splitlines() if " -c " in ln]
    return proc, compiles


def test_without_the_headers_the_cuda_variant_builds_without_the_path_and_says_so(tmp_path):
    proc, compiles = _dry_run(tmp_path)  # a fresh build folder: no fetched headers there
    notes = [ln for ln in proc.stdout.splitlines() if "cuDNN SDPA path" in ln]
    if not notes or not notes[0].startswith("scons: note: "):
        pytest.skip(f"this machine has both headers installed where scons looks: {notes}")
    assert len(notes) == 1 and "bash .ci/setup" in notes[0] and "runtime's own kernels" in notes[0], notes
    sdpa = [ln for ln in compiles if "cudnn_sdpa.cpp" in ln]
    assert sdpa and "AOTI_HAVE_CUDNN_FRONTEND" not in sdpa[0], sdpa
    assert not any("AOTI_HAVE_CUDNN_FRONTEND" in ln for ln in compiles)


@pytest.mark.skipif(not (FETCHED / ".versions").is_file(), reason="build/cudnn-headers missing: bash .ci/setup fetches it")
def test_with_the_headers_every_unit_gets_the_frontend_defines(tmp_path):
    proc, compiles = _dry_run(tmp_path, CUDNN_INCLUDE_DIR=str(FETCHED / "cudnn" / "include"),
                              CUDNN_FRONTEND_INCLUDE_DIR=str(FETCHED / "frontend" / "include"))
    assert "scons: cuDNN 9." in proc.stdout and "cudnn-frontend 1." in proc.stdout, proc.stdout[-2000:]
    host = [ln for ln in compiles if "nvcc" not in ln.split()[0]]
    assert host and all("-DAOTI_HAVE_CUDNN_FRONTEND=1" in ln and "-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING" in ln
                        for ln in host), host[:3]
    sdpa = next(ln for ln in compiles if "cudnn_sdpa.cpp" in ln)
    # relative to the top folder inside the checkout (machine-neutral command lines for the build cache)
    assert f"-isystem {(FETCHED / 'frontend' / 'include').relative_to(REPO_ROOT)} " in sdpa, sdpa
