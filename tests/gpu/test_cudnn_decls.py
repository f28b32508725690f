"""The runtime's own declarations of cuDNN's C API (runtime/src/shims/cuda/cudnn_api.h: the build needs no
cuDNN, the library is resolved with dlsym at run time) against cuDNN's real headers, where they are installed
(the nvidia-cudnn-cu13 wheel torch depends on, or a system cuDNN). runtime/tests/cuda/test_cudnn_decls.cpp
static_asserts every enum value, struct layout and function type; compiling it is the check.

Needs no GPU, only the headers (on the GPU machine: torch's site-packages/nvidia/cudnn/include); skips where
they are absent, as on CI, which does not download the 700 MB wheel for its headers.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cudnn_include() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    roots = [Path(p) / "cudnn" / "include" for p in (spec.submodule_search_locations or [])] if spec else []
    roots += [Path(os.environ.get("CUDNN_HOME", "/nonexistent")) / "include", Path("/usr/include"),
              Path("/usr/local/cuda/include")]
    return next((r for r in roots if (r / "cudnn_cnn.h").exists()), None)


def cuda_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    roots = [Path(os.path.realpath(nvcc)).parents[1] / "include"] if nvcc else []
    roots += [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include", Path("/usr/local/cuda/include")]
    spec = importlib.util.find_spec("nvidia")
    roots += [Path(p) / "cu13" / "include" for p in (spec.submodule_search_locations or [])] if spec else []
    return next((r for r in roots if (r / "cuda_runtime_api.h").exists()), None)


def test_declarations_match_cudnn_headers(tmp_path):
    inc, cuda_inc = cudnn_include(), cuda_include()
    if inc is None:
        pytest.skip("no cuDNN headers (cudnn_cnn.h) here: `pip install nvidia-cudnn-cu13` (the GPU machine has them)")
    if cuda_inc is None:
        pytest.skip("no CUDA headers (cuda_runtime_api.h) here")
    exe = tmp_path / "test_cudnn_decls"
    cxx = os.environ.get("CXX", "g++")
    proc = subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-Wno-unused-variable",
                           f"-I{REPO / 'runtime' / 'src'}", "-isystem", str(inc), "-isystem", str(cuda_inc),
                           str(REPO / "runtime" / "tests" / "cuda" / "test_cudnn_decls.cpp"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"cudnn_api.h differs from cuDNN's headers in {inc}:\n{proc.stderr[-6000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cudnn_api.h matches cuDNN 9." in run.stdout, run.stdout
    print(run.stdout.strip())
