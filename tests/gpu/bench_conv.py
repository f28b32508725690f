"""Times the runtime's CUDA convolution (aoti_torch_cuda_convolution: cuDNN, else the direct kernel) against
torch's own (aten.convolution, cuDNN) on the same inputs, layer by layer.

    AOTI_HOST_LIBRARY=.../libaoti_host.so python tests/gpu/bench_conv.py [--quick]
Prints one line per shape, dtype and layout as it is measured: the path ours took (cuDNN's graph API and its
engine, cuDNN's legacy API and its algorithm, or the direct kernel: read from the runtime's debug log line of the
row's first call), the GPU time per call (the sum of the kernels
torch's profiler records over 10 calls after 3 warm-up calls: cuDNN's and ours, such as a layout copy or the
bias) of ours through cuDNN and of torch's, their ratio, and the wall time per call of ours through ctypes
(CUDA events around 20 calls: Python's argument marshalling dominates small shapes) and of torch's; then the
direct kernel's wall time per row (a child process with AOTI_HOST_CUDNN=off). Both sides run with torch's
defaults (float32 may use TF32, torch.backends.cudnn.allow_tf32=True, benchmark=False); the float32-ieee rows
turn TF32 off on both (allow_tf32=False, AOTI_HOST_CUDNN_ALLOW_TF32=0). Every row checks ours against torch's
output first.
AOTI_HOST_CUDNN_GRAPH=0 in the environment gives the legacy API's table (the graph API's is the default).
--quick (or BENCH_QUICK=1, as tests/gpu/run.sh passes it): QUICK_SHAPES in float32, float16 and bfloat16, NCHW
and channels-last (24 of the 76 rows), without the direct kernel's child.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.gpu import timed  # noqa: E402
from tests.gpu.test_cuda_ops import Host  # noqa: E402

# name: (input sizes, c_out, kernel, stride, padding, groups, transposed, output_padding)
SHAPES = {
    "resnet18 stem 7x7/2": ((8, 3, 224, 224), 64, 7, 2, 3, 1, False, 0),
    "resnet18 3x3 64": ((8, 64, 56, 56), 64, 3, 1, 1, 1, False, 0),
    "resnet18 3x3/2 128": ((8, 64, 56, 56), 128, 3, 2, 1, 1, False, 0),
    "resnet18 3x3 256": ((8, 256, 14, 14), 256, 3, 1, 1, 1, False, 0),
    "resnet18 1x1/2 512": ((8, 256, 14, 14), 512, 1, 2, 0, 1, False, 0),
    "mobilenet dw 3x3 96": ((8, 96, 56, 56), 96, 3, 1, 1, 96, False, 0),
    "mobilenet dw 5x5/2 240": ((8, 240, 28, 28), 240, 5, 2, 2, 240, False, 0),
    "resnext grouped 3x3 g32": ((8, 256, 28, 28), 256, 3, 1, 1, 32, False, 0),
    "decoder transposed 4x4/2": ((8, 128, 28, 28), 64, 4, 2, 1, 1, True, 0),
    "conv1d k5 (audio)": ((8, 256, 4000), 256, 5, 1, 2, 1, False, 0),
}
ROWS = [("float32", torch.float32, True), ("float32-ieee", torch.float32, False), ("float16", torch.float16, True),
        ("bfloat16", torch.bfloat16, True)]
LAYOUTS = ("nchw", "channels_last")
# The quick table: ResNet-18's stem, a 3x3 layer early and late, and a depthwise layer; torch's default dtypes.
QUICK_SHAPES = ["resnet18 stem 7x7/2", "resnet18 3x3 64", "resnet18 3x3 256", "mobilenet dw 3x3 96"]
QUICK_ROWS = [r for r in ROWS if r[0] != "float32-ieee"]


def kernel_ms(fn, iters: int = 10) -> float:
    """GPU milliseconds per call: the kernels the profiler saw, summed, over `iters` calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in gpu) / iters / 1000


@contextlib.contextmanager
def runtime_log(lines: list[str]):
    """Collects what the process writes to file descriptor 2 (the runtime's log) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            lines.extend(f.read().decode(errors="replace").splitlines())
    sys.stderr.write("".join(ln + "\n" for ln in lines if "aoti-host: debug:" not in ln))


def path_of(lines: list[str]) -> str:
    """The path the runtime's log says a new shape took: graph (engine), legacy (algorithm) or direct."""
    for ln in lines:
        if "direct kernel" in ln and "refuses" in ln:
            return "direct"
        m = re.search(r"cuDNN plan for the .*: graph API engine (\S*)", ln)
        if m:
            return f"graph {m.group(1)[:14]}"
        m = re.search(r"cuDNN plan for the .*: legacy API algorithm (\d+)", ln)
        if m:
            return f"legacy algo {m.group(1)}"
    return "?"


def operands(shape, dtype, layout):
    sizes, c_out, k, stride, pad, groups, transposed, out_pad = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    nd = len(sizes) - 2
    x = torch.randn(sizes, generator=g, device="cuda").to(dtype)
    w_sizes = (sizes[1], c_out // groups, *[k] * nd) if transposed else (c_out, sizes[1] // groups, *[k] * nd)
    w = (torch.randn(w_sizes, generator=g, device="cuda") / (w_sizes[1] * k**nd) ** 0.5).to(dtype)
    if layout == "channels_last" and nd == 2:
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    b = torch.randn(c_out, generator=g, device="cuda").to(dtype)
    args = ([stride] * nd, [pad] * nd, [1] * nd, int(transposed), [out_pad] * nd, groups)
    return x, w, b, args


def measure(names, rows, layouts, check: bool, report=None) -> dict:
    """Each row's timings (check: also the output against torch's and both sides' GPU time), passed to
    `report(key, row)` as soon as measured."""
    host = Host()
    out = {}
    for name in names:
        for row, dtype, tf32 in rows:
            for layout in layouts:
                if layout == "channels_last" and len(SHAPES[name][0]) != 4:
                    continue
                torch.backends.cudnn.allow_tf32 = tf32
                os.environ["AOTI_HOST_CUDNN_ALLOW_TF32"] = "1" if tf32 else "0"
                x, w, b, args = operands(SHAPES[name], dtype, layout)
                stride, pad, dil, transposed, out_pad, groups = args

                def theirs(x=x, w=w, b=b, a=args):
                    return torch.ops.aten.convolution(x, w, b, a[0], a[1], a[2], bool(a[3]), a[4], a[5])

                def ours(x=x, w=w, b=b, a=args):
                    host.launch("convolution", x, w, b, *a)
                    host.release()

                err = None
                log: list[str] = []
                if check:
                    want = theirs()
                    with runtime_log(log):
                        got = host("convolution", x, w, b, *args)
                    host.release()
                    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
                r = {"ours": timed(ours, 20 if check else 5), "err": err, "path": path_of(log)}
                if check:
                    r.update(torch=timed(theirs), ours_gpu=kernel_ms(ours), torch_gpu=kernel_ms(theirs))
                out[f"{name}|{row}|{layout}"] = r
                if report is not None:
                    report(f"{name}|{row}|{layout}", r)
    return out


def print_row(key: str, r: dict) -> None:
    name, row, layout = key.split("|")
    print(f"{name:26s} {row:13s} {layout:13s} {r['path']:20s}: gpu ours {r['ours_gpu']:7.3f} torch {r['torch_gpu']:7.3f} ms "
          f"({r['ours_gpu'] / r['torch_gpu']:5.2f}x)  wall ours {r['ours']:7.3f} torch {r['torch']:7.3f} ms  "
          f"max rel err {r['err']:.1e}", flush=True)


def main() -> int:
    quick = "--quick" in sys.argv or os.environ.get("BENCH_QUICK") == "1"
    # the plan lines that name each row's path are debug lines (read once, when the runtime loads)
    os.environ["AOTI_HOST_LOG"] = "debug"
    if "--child" in sys.argv:  # the direct kernel's timings (AOTI_HOST_CUDNN=off in this process)
        print("CHILD " + json.dumps(measure(list(SHAPES), ROWS, LAYOUTS, check=False)))
        return 0
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"torch.backends.cudnn.allow_tf32 default {torch.backends.cudnn.allow_tf32}, "
          f"benchmark {torch.backends.cudnn.benchmark}" + (" (quick: QUICK_SHAPES, no direct kernel)" if quick else ""),
          flush=True)
    print("path ours took, GPU ms per call (ours through cuDNN / torch's), wall ms per call (ours through ctypes, "
          "torch's)")
    res = measure(QUICK_SHAPES if quick else list(SHAPES), QUICK_ROWS if quick else ROWS, LAYOUTS, check=True,
                  report=print_row)
    if not quick:
        env = {**os.environ, "AOTI_HOST_CUDNN": "off"}
        proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                              timeout=400)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CHILD ")), None)
        if not line:
            print("direct-kernel child failed:", proc.stderr[-2000:])
        print("the direct kernel (AOTI_HOST_CUDNN=off): wall ms per call through ctypes")
        for key, r in (json.loads(line[6:]) if line else {}).items():
            name, row, layout = key.split("|")
            print(f"{name:26s} {row:13s} {layout:13s}: direct {r['ours']:8.3f} ms", flush=True)
    ratios = sorted(r["ours_gpu"] / r["torch_gpu"] for r in res.values())
    print(f"GPU time ours/torch over {len(ratios)} rows: median {ratios[len(ratios) // 2]:.2f}x, "
          f"worst {ratios[-1]:.2f}x, best {ratios[0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
