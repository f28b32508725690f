"""Times the runtime's CUDA attention against torch's own kernels on the same inputs.

    AOTI_HOST_LIBRARY=.../libaoti_host.so python tests/gpu/bench_attention.py
Prints one line per shape: milliseconds per call (CUDA events around 20 calls after 3 warm-up calls) of
aoti_torch_cuda__scaled_dot_product_efficient_attention / _flash_attention on the runtime's default path (cuDNN's
fused attention where the runtime was built with it and cuDNN takes the problem: float16/bfloat16; else its own
kernels) and on each of its own two paths (AOTI_HOST_CUDNN_SDPA=off with AOTI_HOST_CUDA_ATTENTION=kernel: the
fused kernel; =gemm: cuBLAS products around a softmax kernel), and of torch's aten._scaled_dot_product_efficient_
attention / _flash_attention, with the ratios to torch. Each row also checks the default path's output against
torch's (the largest absolute difference, and "MISMATCH" past torch's test tolerance for the dtype).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.gpu import timed  # noqa: E402
from tests.gpu.test_cuda_ops import ATTN_TOL, Host  # noqa: E402

SHAPES = [  # batch, heads, sequence, head size, causal
    (8, 16, 512, 64, False),
    (8, 16, 512, 64, True),
    (4, 16, 2048, 64, True),
    (4, 8, 1024, 128, False),
    (1, 8, 128, 64, False),  # small: where the fused kernel should stay
    (2, 16, 4096, 64, True),  # more than the 128 MiB scratch: blocks of query rows
]
# (column, AOTI_HOST_CUDNN_SDPA, AOTI_HOST_CUDA_ATTENTION); None: unset
PATHS = (("default", None, None), ("kernel", "off", "kernel"), ("gemm", "off", "gemm"))


def set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def main() -> int:
    host = Host()
    kinds = (("efficient", (torch.float32, torch.float16, torch.bfloat16)), ("flash", (torch.float16, torch.bfloat16)))
    print("default: the runtime's default path (cuDNN's fused attention for float16/bfloat16 where built in; "
          "float32 and refused problems on its own kernels); kernel/gemm: its own paths (AOTI_HOST_CUDNN_SDPA=off)")
    for kind, dtypes in kinds:
        for dtype in dtypes:
            for b, h, s, d, causal in SHAPES:
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(3))

                def ours(q=q, k=k, v=v, causal=causal, kind=kind, fetch=False):
                    if kind == "efficient":
                        out = host.launch("_scaled_dot_product_efficient_attention", q, k, v, None, 1, 0.0,
                                          int(causal), None, fetch=fetch)
                    else:
                        out = host.launch("_scaled_dot_product_flash_attention", q, k, v, 0.0, int(causal), 0, None,
                                          fetch=fetch)
                    host.release()
                    return out

                def theirs(q=q, k=k, v=v, causal=causal, kind=kind):
                    if kind == "efficient":
                        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
                    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)

                t = timed(theirs)
                times = {}
                for column, sdpa, path in PATHS:
                    set_env("AOTI_HOST_CUDNN_SDPA", sdpa)
                    set_env("AOTI_HOST_CUDA_ATTENTION", path)
                    if column == "default":
                        diff = (ours(fetch=True)[0].float() - theirs()[0].float()).abs().max().item()
                    times[column] = timed(ours)
                set_env("AOTI_HOST_CUDNN_SDPA", None)
                set_env("AOTI_HOST_CUDA_ATTENTION", None)
                rtol, atol = ATTN_TOL[dtype]
                verdict = "" if diff <= atol + rtol * 4 else "  MISMATCH"  # |out| is ~1 for these inputs
                cols = "  ".join(f"{c} {times[c]:8.3f} ms ({times[c] / t:5.2f}x)" for c, _, _ in PATHS)
                print(f"{kind:9s} {str(dtype):14s} B={b} H={h} S={s} D={d} causal={int(causal)}: {cols}  "
                      f"torch {t:8.3f} ms  max|diff| {diff:.1e}{verdict}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
