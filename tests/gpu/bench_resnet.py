"""ResNet-18 (torchvision architecture, random init, batch 8, 224x224) end to end: torch eager, torch's CUDA
graph replay, and aoti-run on the same package exported by toolchain.export, with the runtime's convolutions on
cuDNN and on the direct kernel (AOTI_HOST_CUDNN=off), outputs checked against eager.

    AOTI_RUN=.../aoti-run python tests/gpu/bench_resnet.py WORK_DIR [--no-direct]
float32; both sides use torch's defaults (float32 convolutions may use TF32: torch.backends.cudnn.allow_tf32=True).
Per call: median of `aoti-run --repeat 200 --device-inputs` (graphs on); torch's: CUDA events over 200 calls.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

N = 200


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--no-direct", action="store_true")
    a = ap.parse_args()
    import numpy as np
    import torch
    import torchvision

    from toolchain import export

    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    dtype = torch.float32
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().to("cuda", dtype)
    x = torch.randn(8, 3, 224, 224, device="cuda", dtype=dtype)
    with torch.no_grad():
        ref = model(x).float().cpu().numpy()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        start.record()
        for _ in range(N):
            model(x)
        end.record()
        torch.cuda.synchronize()
        eager_ms = start.elapsed_time(end) / N
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            model(x)
        g.replay()
        torch.cuda.synchronize()
        start.record()
        for _ in range(N):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        graph_ms = start.elapsed_time(end) / N
    pt2 = work / "resnet18.pt2"
    xin = work / "resnet18.in0.npy"
    np.save(xin, x.cpu().numpy())
    build = work / "build"
    export.prepare_build_dirs(build)
    t0 = time.perf_counter()
    export.export(model, [x], pt2, weights="embedded", build_dir=build, device="cuda")
    print(f"exported {pt2.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    exe = os.environ["AOTI_RUN"]
    rows = [("cudnn", {}), ("cudnn, AOTI_HOST_CUDNN_BENCHMARK=1", {"AOTI_HOST_CUDNN_BENCHMARK": "1"})]
    rows += [] if a.no_direct else [("direct", {"AOTI_HOST_CUDNN": "off"})]
    print(f"ResNet-18 batch 8 224x224 float32: torch eager {eager_ms:.3f} ms, torch CUDA graph {graph_ms:.3f} ms",
          flush=True)
    for label, env in rows:
        out = work / f"out_{len(label)}"
        out.mkdir(exist_ok=True)
        n = 5 if label == "direct" else N
        proc = subprocess.run([exe, str(pt2), "--device", "cuda", "-i", str(xin), "-o", str(out), "--quiet",
                               "--device-inputs", "--cuda-graphs", "--repeat", str(n), "--warmup", "3"],
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            print(f"aoti-run ({label}) failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
            continue
        med = next((float(ln.split("median=")[1].split()[0]) for ln in proc.stdout.splitlines()
                    if ln.startswith("latency_us:")), float("nan"))
        got = np.load(next(out.glob("*.npy"))).astype(np.float32)
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        print(f"  ours aoti-run --cuda-graphs ({label}): {med / 1000:.3f} ms per call = {med / 1000 / graph_ms:.2f}x "
              f"torch's CUDA graph, {med / 1000 / eager_ms:.2f}x eager; max rel err vs eager {err:.1e}", flush=True)
        for ln in proc.stderr.splitlines():
            if "cudnn" in ln.lower():
                print("   ", ln)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
