"""Benchmark: aoti-run against torch 2.13's own runner (aoti_load_package) on the same small plugin.

    .venv/bin/python bench/bench_cpu.py [--example mlp] [--calls 2000] [--cold 10]

Both run the very same link_libtorch=False plugin, one thread (OMP_NUM_THREADS=1), measured in the same
run, interleaved. torch can only load such a plugin after libtorch_cpu.so is re-opened RTLD_GLOBAL
(FACTS.md); that is how its runner is given the same plugin.
- cold start: exec of a new process to its first output written (aoti-run: the whole program; torch:
  `python -c` that imports torch, loads the package and runs one call).
- per call: median over --calls calls in one warm process (aoti-run --repeat; torch: a perf_counter loop).
Prints ratios (ours / torch's); targets: cold start <= 0.1x, per call <= 1.0x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TORCH_RUNNER = r"""
import ctypes, os, sys, time
import numpy as np
import torch
ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"), mode=os.RTLD_GLOBAL)
import torch._inductor
pt2, xs, calls, out = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4]
runner = torch._inductor.aoti_load_package(pt2)
inputs = [torch.from_numpy(np.load(x)) for x in xs]
with torch.no_grad():
    y = runner(*inputs)
    np.save(out, (y[0] if isinstance(y, (list, tuple)) else y).numpy())
    if calls:
        times = []
        for _ in range(calls):
            t = time.perf_counter_ns()
            runner(*inputs)
            times.append(time.perf_counter_ns() - t)
        times.sort()
        print("latency_us: median=%.2f p10=%.2f p90=%.2f" % (times[len(times)//2] / 1e3, times[len(times)//10] / 1e3,
              times[9 * len(times)//10] / 1e3))
"""


def parse_median(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("latency_us:"):
            return float(line.split("median=")[1].split()[0])
    raise RuntimeError(f"no latency line in:\n{text}")


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", default="mlp")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--cold", type=int, default=10, help="cold starts of aoti-run (torch gets a third, min 3)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved per-call rounds")
    args = ap.parse_args()

    build = REPO / "build"
    from toolchain import examples
    from toolchain.export import export

    aoti_run = build / "cpu-gcc-release" / "dist" / "bin" / "aoti-run"
    subprocess.run([str(Path(sys.executable).with_name("scons")), "-C", str(REPO), "-Q", "-s", "-j2"], check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=build))
    module, inputs = examples.get(args.example)
    pt2 = export(module, inputs, work / f"{args.example}.pt2", build_dir=build)
    xs = []
    for i, x in enumerate(inputs):
        np.save(work / f"x{i}.npy", x.numpy())
        xs.append(str(work / f"x{i}.npy"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ours_cmd = [str(aoti_run), str(pt2), *sum((["-i", x] for x in xs), []), "-o", str(work / "out"), "--quiet"]
    torch_cmd = [sys.executable, "-c", TORCH_RUNNER, str(pt2), ",".join(xs)]

    # warm the page cache and the plugin extraction, and check both agree
    subprocess.run(ours_cmd, env=env, check=True)
    subprocess.run([*torch_cmd, "0", str(work / "torch_out.npy")], env=env, check=True, capture_output=True)
    diff = float(np.max(np.abs(np.load(work / "out" / "output_0.npy") - np.load(work / "torch_out.npy"))))

    ours_cold, torch_cold = [], []
    for i in range(args.cold):
        ours_cold.append(timed(ours_cmd, env))
        if i % 3 == 0:
            torch_cold.append(timed([*torch_cmd, "0", str(work / "torch_out.npy")], env))
    ours_call, torch_call = [], []
    for _ in range(args.rounds):
        p = subprocess.run([*ours_cmd, "--repeat", str(args.calls)], env=env, check=True, capture_output=True, text=True)
        ours_call.append(parse_median(p.stdout + p.stderr))
        p = subprocess.run([*torch_cmd, str(args.calls), str(work / "torch_out.npy")], env=env, check=True,
                           capture_output=True, text=True)
        torch_call.append(parse_median(p.stdout))

    oc, tc = statistics.median(ours_cold), statistics.median(torch_cold)
    ol, tl = statistics.median(ours_call), statistics.median(torch_call)
    print(f"model: example:{args.example}  plugin: {pt2.name}  OMP_NUM_THREADS=1  outputs agree to {diff:.2g}")
    print(f"cold start (exec -> first output), median: aoti-run {oc * 1e3:.1f} ms (n={len(ours_cold)}), "
          f"torch aoti_load_package {tc * 1e3:.0f} ms (n={len(torch_cold)})  ratio {oc / tc:.4f}  (target <= 0.1)")
    print(f"per call, median of {args.rounds} interleaved rounds of {args.calls}: aoti-run {ol:.2f} us "
          f"{sorted(ours_call)}, torch {tl:.2f} us {sorted(torch_call)}  ratio {ol / tl:.3f}  (target <= 1.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
