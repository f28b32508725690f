"""GPU tests (run on the GPU machine by tests/gpu/run.sh)."""

from __future__ import annotations

import os


def gpu_skip_reason(*env_vars: str) -> str | None:
    """Why a GPU test module can't run here (no CUDA device, or run.sh's variables unset), or None."""
    from toolchain.runtime import cuda

    if cuda.device_count() == 0:
        return "no CUDA device visible (or cuda-python missing): GPU tests run on the GPU machine via tests/gpu/run.sh"
    for var in env_vars:
        if not os.environ.get(var):
            return f"{var} is not set: run tests/gpu/run.sh, which builds, exports and sets it"
    return None
