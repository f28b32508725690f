"""Benchmark: the Python runtime module (toolchain.runtime) against torch's runner called from Python
(torch._inductor.aoti_load_package) on the same CPU packages, and Python threads on one loaded program.

    .venv/bin/python bench/bench_python.py [--examples two_outputs,embedding,attention] [--calls 2000]
                                           [--rounds 3] [--thread-calls 3000]

For each model one vectorised plugin is exported (`aoti-toolchain export`'s settings, cached under
build/bench-python/) and both sides run that very file at OMP_NUM_THREADS=1, each in its own process
(both export the aoti_torch_* symbols globally, so they never share one), interleaved round by round:
- per call: median of --calls timed calls (perf_counter_ns around each call) in a warm process; ours with
  numpy inputs (the compiled path), with torch tensor inputs (DLPack), and with the ctypes path alone
  (AOTI_HOST_PYTHON_FAST=0); torch's runner with torch tensors under no_grad; aoti-run --repeat for the
  C++ floor. The figure is the median over --rounds; ratio = ours / torch's.
- threads: runs/s of 1 and of 2 Python threads, each making --thread-calls calls on one loaded stateless
  program (the vectorised encoder block, OMP_NUM_THREADS=1), with num_models=2 (the default) and 1; each
  output of the threaded runs is compared with the serial run of the same input as it comes, then dropped. A control in the same
  process (hashlib's sha256 of 64 kB blocks, C work with the GIL released) shows what 2 threads can get on
  the machine at that moment: on a loaded machine that, not 2x, is the ceiling.
Targets (issue 17): per call <= 0.5x torch's runner for two_outputs and embedding, <= 0.9x for attention;
2 threads >= 1.7x the runs/s of one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    aoti_run_command,
    build_runtime,
    model_options,
    parse_median,
    parser,
    save_inputs,
    torch_runner_command,
    torch_scratch,
)

WORK = REPO / "build" / "bench-python"

OURS = r"""
import glob, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
pt2, xs, calls, kind = sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]), sys.argv[5]
inputs = [np.load(x) for x in xs]
if kind == "torch":
    import torch
    inputs = [torch.from_numpy(a) for a in inputs]
prog = runtime.load(pt2)
for _ in range(min(calls, 200)):
    prog.run(inputs)
times = []
for _ in range(calls):
    t = time.perf_counter_ns()
    prog.run(inputs)
    times.append(time.perf_counter_ns() - t)
times.sort()
print("latency_us: median=%.2f fast=%s" % (times[len(times) // 2] / 1e3, prog._fast is not None))
"""

THREADS = r"""
import sys, threading, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
pt2, x, calls, num_models = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
prog = runtime.load(pt2, num_models=num_models)
rng = np.random.default_rng(0)
base = np.load(x)
inputs = [[(base + rng.standard_normal(base.shape).astype(base.dtype))] for _ in range(8)]
serial = [prog.run(i)[0] for i in inputs]
for _ in range(200):
    prog.run(inputs[0])

def work(k, n, out):
    # each output is checked against the serial run's as it comes, then dropped, as a consumer would: keeping
    # them all (3000 x 16 kB per thread) made every call fault in fresh pages, and the two threads' page faults
    # contend on the process's memory map (1.75x against 1.90x for the same calls with outputs dropped)
    equal = True
    for c in range(n):
        i = (c + k) % len(inputs)
        equal = np.array_equal(prog.run(inputs[i])[0], serial[i]) and equal
    out[k] = equal

def rate_of(target, nthreads):
    # runs/s of `nthreads` threads each making `calls` calls of target(k, calls, out), and whether all set out[k]
    out = [None] * nthreads
    ts = [threading.Thread(target=target, args=(k, calls, out)) for k in range(nthreads)]
    t = time.perf_counter()
    for th in ts: th.start()
    for th in ts: th.join()
    dt = time.perf_counter() - t
    return nthreads * calls / dt, all(out)

def rate(nthreads):
    return rate_of(work, nthreads)

import hashlib
blob = b"x" * (1 << 16)
def hwork(k, n, out):
    for _ in range(n):
        hashlib.sha256(blob).digest()  # C work with the GIL released (inputs over 2 kB)
    out[k] = True

def hrate(nthreads):
    return rate_of(hwork, nthreads)[0]

r1, e1 = rate(1)
r2, e2 = rate(2)
h1, h2 = hrate(1), hrate(2)
r1b, _ = rate(1)
r1 = (r1 + r1b) / 2
h1 = (h1 + hrate(1)) / 2
print("threads: one=%.0f two=%.0f equal=%s control_one=%.0f control_two=%.0f" % (r1, r2, e1 and e2, h1, h2))
"""


def export_model(name: str) -> tuple[Path, list[str]]:
    pt2 = WORK / f"{name}.pt2"
    xs = sorted(str(p) for p in WORK.glob(f"{name}_x*.npy"))
    if pt2.is_file() and xs:
        return pt2, xs
    torch_scratch()
    from toolchain import examples
    from toolchain.export import export

    module, inputs = examples.get(name)
    export(module, inputs, pt2, build_dir=REPO / "build")
    return pt2, save_inputs(inputs, WORK, f"{name}_x")


def run(cmd: list[str], env: dict[str, str]) -> str:
    p = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return p.stdout + p.stderr


def bench_model(name: str, args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    pt2, xs = export_model(name)
    py = sys.executable
    sides = {
        "ours": [py, "-c", OURS, str(REPO), str(pt2), ",".join(xs), str(args.calls), "numpy"],
        "ours_torch_in": [py, "-c", OURS, str(REPO), str(pt2), ",".join(xs), str(args.calls), "torch"],
        "torch": [*torch_runner_command(pt2, xs), str(args.calls), "", "200"],
        "aoti_run": [*aoti_run_command(pt2, xs, WORK / f"{name}-out"), "--repeat", str(args.calls)],
        "ours_ctypes": [py, "-c", OURS, str(REPO), str(pt2), ",".join(xs), str(args.calls), "numpy"],
    }
    got: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.rounds):
        for side, cmd in sides.items():
            e = {**env, "AOTI_HOST_PYTHON_FAST": "0"} if side == "ours_ctypes" else env
            out = run(cmd, e)
            if side == "ours" and "fast=True" not in out:
                raise SystemExit("the compiled per-call path is not in use: build it with scons (numpy needed)")
            got[side].append(parse_median(out))
    med = {k: statistics.median(v) for k, v in got.items()}
    ratios = sorted(o / t for o, t in zip(got["ours"], got["torch"], strict=True))
    target = 0.9 if name == "attention" else 0.5
    return [
        f"model {name}: per call, median of {args.rounds} interleaved rounds x {args.calls} calls (OMP 1):",
        f"  torch runner from Python {med['torch']:.2f} us {sorted(got['torch'])}",
        f"  ours, numpy in {med['ours']:.2f} us {sorted(got['ours'])}  ratio {med['ours'] / med['torch']:.3f} "
        f"(per-round {ratios[0]:.2f}..{ratios[-1]:.2f}; target <= {target})",
        f"  ours, torch tensors in (DLPack) {med['ours_torch_in']:.2f} us  ratio "
        f"{med['ours_torch_in'] / med['torch']:.3f}",
        f"  ours, ctypes path alone (AOTI_HOST_PYTHON_FAST=0) {med['ours_ctypes']:.2f} us  ratio "
        f"{med['ours_ctypes'] / med['torch']:.3f}",
        f"  aoti-run --repeat (C++) {med['aoti_run']:.2f} us; Python / aoti-run {med['ours'] / med['aoti_run']:.2f}",
    ]


def bench_threads(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    pt2, xs = export_model("attention")
    lines = [f"threads: one loaded stateless program (attention), {args.thread_calls} calls per thread, OMP 1, "
             f"median of {args.rounds} rounds (num_models 2 and 1 interleaved):"]
    for_models: dict[int, list[tuple[float, float, bool]]] = {2: [], 1: []}
    for _ in range(args.rounds):
        for nm in for_models:
            out = run([sys.executable, "-c", THREADS, str(REPO), str(pt2), xs[0], str(args.thread_calls), str(nm)], env)
            line = next(x for x in out.splitlines() if x.startswith("threads:"))
            one = float(line.split("one=")[1].split()[0])
            two = float(line.split("two=")[1].split()[0])
            c1 = float(line.split("control_one=")[1].split()[0])
            c2 = float(line.split("control_two=")[1].split()[0])
            for_models[nm].append((one, two, "equal=True" in line, c2 / c1))
    for nm, vals in for_models.items():
        scale = statistics.median(v[1] / v[0] for v in vals)
        control = statistics.median(v[3] for v in vals)
        one = statistics.median(v[0] for v in vals)
        two = statistics.median(v[1] for v in vals)
        eq = all(v[2] for v in vals)
        lines.append(f"  num_models={nm}: 1 thread {one:.0f} runs/s, 2 threads {two:.0f} runs/s, scaling {scale:.2f}x "
                     f"(per-round {sorted(round(v[1] / v[0], 2) for v in vals)}; target >= 1.7 with the default 2); "
                     f"control in the same processes (sha256 of 64 kB, GIL released) {control:.2f}x, so ours / "
                     f"control {scale / control:.2f}; results equal to serial runs: {eq}")
    return lines


def main() -> int:
    ap = model_options(parser(__doc__), "two_outputs,embedding,attention", 2000, 3)
    ap.add_argument("--thread-calls", type=int, default=3000)
    ap.add_argument("--no-threads", action="store_true")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    build_runtime()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    for name in args.examples.split(","):
        for line in bench_model(name, args, env):
            print(line, flush=True)
    if not args.no_threads:
        for line in bench_threads(args, env):
            print(line, flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
