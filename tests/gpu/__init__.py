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


def timed(fn, iters: int = 20) -> float:
    """Milliseconds per call of `fn` on the GPU (CUDA events around `iters` calls, after 3 warm-up calls)."""
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters
