"""Throughput from one GPU to two, in one run: ResNet-50 (torchvision architecture, random init, float32,
224x224, batch 32: compute-bound) exported once on cuda:0, then driven by one worker process per GPU, each
loading the package on its own device (cuda:N) with CUDA graphs and device inputs, started together behind a
barrier and timed over the same wall-clock window.

    AOTI_HOST_LIBRARY=.../libaoti_host.so python bench/bench_multi_gpu.py [--work DIR] [--calls N] [--batch B]

Prints, per configuration, the calls per second of each worker and in all, the 1 -> 2 GPU ratio (the issue's
bar: >= 1.8), and each worker's first output against eager torch. Also one process driving both GPUs from
two threads (the runtime releases the GIL in run). Needs two visible GPUs for the scaling rows (one GPU: the
1-GPU row alone, and it says so). NCCL is never used; NCCL_NVLS_ENABLE=0 is set for the workers anyway.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["NCCL_NVLS_ENABLE"] = "0"


def _drive(prog, x, calls: int, start, out: dict, key) -> None:
    """`calls` runs of `prog` on device input `x` after `start` (a barrier), timed until the device is done."""
    for _ in range(10):  # warm-up, capture, replays
        prog.run([x], device_outputs=True)
    prog.synchronize()
    start.wait()
    t0 = time.perf_counter()
    for _ in range(calls):
        prog.run([x], device_outputs=True)
    prog.synchronize()
    out[key] = calls / (time.perf_counter() - t0)


def _worker(pt2: str, xin: str, device: int, calls: int, start, results) -> None:
    import numpy as np

    from toolchain import runtime
    from toolchain.runtime import cuda

    prog = runtime.load(pt2, device=f"cuda:{device}", cuda_graphs=True)
    x = cuda.DeviceArray.from_numpy(np.load(xin), device=device)
    first = prog.run([np.load(xin)])[0]
    out: dict = {}
    _drive(prog, x, calls, start, out, device)
    results.put((device, out[device], first))


def _processes(pt2: Path, xin: Path, devices: list[int], calls: int) -> tuple[dict[int, float], dict]:
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(len(devices)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(pt2), str(xin), d, calls, start, results)) for d in devices]
    for p in procs:
        p.start()
    got = [results.get(timeout=1200) for _ in devices]
    for p in procs:
        p.join()
    return {d: rate for d, rate, _ in got}, {d: first for d, _, first in got}


def _threads(pt2: Path, xin: Path, devices: list[int], calls: int) -> dict[int, float]:
    import numpy as np

    from toolchain import runtime
    from toolchain.runtime import cuda

    start, out = threading.Barrier(len(devices)), {}
    progs = {d: runtime.load(pt2, device=f"cuda:{d}", cuda_graphs=True) for d in devices}
    xs = {d: cuda.DeviceArray.from_numpy(np.load(xin), device=d) for d in devices}
    threads = [threading.Thread(target=_drive, args=(progs[d], xs[d], calls, start, out, d)) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / "build" / "bench-multi-gpu")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    import numpy as np
    import torch
    import torchvision

    from toolchain import export
    from toolchain.runtime import cuda

    ngpu = cuda.device_count()
    print(f"{ngpu} visible GPU(s): {', '.join(torch.cuda.get_device_name(i) for i in range(ngpu))}", flush=True)
    if ngpu < 1:
        print("no GPU: nothing to measure")
        return 2
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval().to("cuda:0")
    x = torch.randn(a.batch, 3, 224, 224, device="cuda:0")
    with torch.no_grad():
        ref = model(x).cpu().numpy()
    xin = work / "x.npy"
    np.save(xin, x.cpu().numpy())
    pt2 = work / f"resnet50_b{a.batch}.pt2"
    if not pt2.exists():
        build = work / "build"
        export.prepare_build_dirs(build)
        t0 = time.perf_counter()
        export.export(model, [x], pt2, weights="embedded", build_dir=build, device="cuda:0")
        print(f"exported {pt2.name} on cuda:0 in {time.perf_counter() - t0:.0f} s", flush=True)
    del model
    torch.cuda.empty_cache()

    def report(label: str, rates: dict[int, float], firsts: dict | None = None) -> float:
        total = sum(rates.values())
        each = ", ".join(f"cuda:{d} {r:.1f}" for d, r in sorted(rates.items()))
        print(f"{label}: {total:.1f} calls/s ({total * a.batch:.0f} images/s); per GPU: {each}", flush=True)
        for d, first in sorted((firsts or {}).items()):
            err = float(np.abs(first - ref).max() / max(np.abs(ref).max(), 1e-12))
            print(f"  cuda:{d} first output vs eager (cuda:0): max rel err {err:.1e}", flush=True)
        return total

    print(f"ResNet-50 batch {a.batch} 224x224 float32, CUDA graphs, device inputs, {a.calls} timed calls per GPU")
    one = report("1 GPU  (1 process, cuda:0)", *_processes(pt2, xin, [0], a.calls))
    if ngpu < 2:
        print("1 -> 2 GPU scaling: not measured, one GPU visible")
        return 0
    two = report("2 GPUs (2 processes, cuda:0 + cuda:1)", *_processes(pt2, xin, [0, 1], a.calls))
    print(f"scaling 1 -> 2 GPUs (processes): {two / one:.2f}x", flush=True)
    one_t = report("1 GPU  (this process, 1 thread)", _threads(pt2, xin, [0], a.calls))
    two_t = report("2 GPUs (this process, 2 threads)", _threads(pt2, xin, [0, 1], a.calls))
    print(f"scaling 1 -> 2 GPUs (threads of one process): {two_t / one_t:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
