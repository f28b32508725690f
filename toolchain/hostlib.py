"""Where this project's host runtime library (libaoti_host.so) is: one lookup for the Python runtime
(toolchain.runtime, which opens it) and for verify (which assumes it as the default host and must start
without numpy or ctypes)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LIBRARY_ENV = "AOTI_HOST_LIBRARY"
_CPU = ("cpu-gcc-release", "cpu-clang-release", "cpu-gcc-debug")
_CUDA = ("cuda-gcc-release", "cuda-clang-release", "cuda-gcc-debug")


def candidates(device: str = "cpu") -> list[Path]:
    """The builds of this checkout, in the order default_library prefers them."""
    return [REPO_ROOT / "build" / v / "dist" / "lib" / "libaoti_host.so"
            for v in (_CUDA + _CPU if device.startswith("cuda") else _CPU + _CUDA)]


def find_library(device: str = "cpu") -> Path | None:
    """$AOTI_HOST_LIBRARY, else the first build of this checkout that exists; None when there is none."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return Path(env)
    return next((c for c in candidates(device) if c.exists()), None)


def default_library(device: str = "cpu") -> Path:
    """find_library(), or the path the release build would have (for a clear "not built" message)."""
    return find_library(device) or REPO_ROOT / "build" / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"
