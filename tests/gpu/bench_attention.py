"""Times the runtime's CUDA attention fallbacks against torch's own kernels on the same inputs.

    AOTI_HOST_LIBRARY=.../libaoti_host.so python tests/gpu/bench_attention.py
Prints one line per shape: milliseconds per call (CUDA events around 20 calls after 3 warm-up calls) of
aoti_torch_cuda__scaled_dot_product_efficient_attention / _flash_attention on each of the runtime's two
paths (AOTI_HOST_CUDA_ATTENTION=kernel: the fused kernel; =gemm: cuBLAS products around a softmax kernel)
and of torch's aten._scaled_dot_product_efficient_attention / _flash_attention, and the ratios to torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.gpu import timed  # noqa: E402
from tests.gpu.test_cuda_ops import Host  # noqa: E402

SHAPES = [  # batch, heads, sequence, head size, causal
    (8, 16, 512, 64, False),
    (8, 16, 512, 64, True),
    (4, 16, 2048, 64, True),
    (4, 8, 1024, 128, False),
    (1, 8, 128, 64, False),  # small: where the fused kernel should stay
    (2, 16, 4096, 64, True),  # more than the 64 MiB scratch: blocks of query rows
]


def main() -> int:
    host = Host()
    kinds = (("efficient", (torch.float32, torch.float16, torch.bfloat16)), ("flash", (torch.float16, torch.bfloat16)))
    for kind, dtypes in kinds:
        for dtype in dtypes:
            for b, h, s, d, causal in SHAPES:
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2) for _ in range(3))

                def ours(q=q, k=k, v=v, causal=causal, kind=kind):
                    if kind == "efficient":
                        host.launch("_scaled_dot_product_efficient_attention", q, k, v, None, 1, 0.0, int(causal), None)
                    else:
                        host.launch("_scaled_dot_product_flash_attention", q, k, v, 0.0, int(causal), 0, None)
                    host.release()

                def theirs(q=q, k=k, v=v, causal=causal, kind=kind):
                    if kind == "efficient":
                        torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
                    else:
                        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)

                t = timed(theirs)
                times = {}
                for path in ("kernel", "gemm"):
                    os.environ["AOTI_HOST_CUDA_ATTENTION"] = path
                    times[path] = timed(ours)
                os.environ.pop("AOTI_HOST_CUDA_ATTENTION", None)
                print(f"{kind:9s} {str(dtype):14s} B={b} H={h} S={s} D={d} causal={int(causal)}: "
                      f"kernel {times['kernel']:8.3f} ms ({times['kernel'] / t:5.1f}x)  "
                      f"gemm {times['gemm']:8.3f} ms ({times['gemm'] / t:5.1f}x)  torch {t:8.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
