"""Benchmark: aoti-run against torch 2.13's own runner (aoti_load_package) on the same CPU plugins.

    .venv/bin/python bench/bench_cpu.py [--examples mlp_bench,attention,convnet_bench] [--threads 1,2]
                                        [--calls 1000] [--rounds 3] [--cold 10]

For each model one vectorised link_libtorch=False plugin is exported (`aoti-toolchain export`'s settings)
and both sides run that very file, measured in the same run, interleaved round by round. torch can only
load such a plugin after libtorch_cpu.so is re-opened RTLD_GLOBAL (FACTS.md); that is how its runner
is given the same plugin.
- per call: median over --calls calls in one warm process (aoti-run --repeat; torch: a perf_counter
  loop under no_grad), at each OMP_NUM_THREADS of --threads (torch: the same variable, read at start).
  The reported figure is the median over --rounds interleaved rounds; ratio = ours / torch's.
- cold start: exec of a new aoti-run process to its first output written (load, Create, one Run,
  write .npy); torch's equivalent (`python -c`: import torch, load the package, one call) for scale.
Targets (issue 7): per call <= 0.9x torch's runner on each model; cold start <= 20 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    BUILD,
    aoti_run_command,
    build_runtime,
    interleaved_medians,
    model_options,
    parser,
    save_inputs,
    torch_runner_command,
)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def bench_model(name: str, args: argparse.Namespace, build: Path) -> list[str]:
    from toolchain import examples
    from toolchain.export import export

    work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=build))
    module, inputs = examples.get(name)
    pt2 = export(module, inputs, work / f"{name}.pt2", build_dir=build)
    xs = save_inputs(inputs, work, "x")
    ours_cmd = aoti_run_command(pt2, xs, work / "out")
    torch_cmd = torch_runner_command(pt2, xs)
    extra = dict(e.split("=", 1) for e in args.env)
    env1 = {**os.environ, **extra, "OMP_NUM_THREADS": "1"}

    # warm the page cache and the plugin extraction, and check both sides agree
    subprocess.run(ours_cmd, env=env1, check=True)
    subprocess.run([*torch_cmd, "0", str(work / "torch_out.npy"), "0"], env=env1, check=True, capture_output=True)
    diff = float(np.max(np.abs(np.load(work / "out" / "output_0.npy") - np.load(work / "torch_out.npy"))))

    lines = [f"model {name}: plugin {pt2.name}, outputs of aoti-run and torch's runner agree to {diff:.2g}"]
    ours_cold, torch_cold = [], []
    for i in range(args.cold):
        ours_cold.append(timed(ours_cmd, env1))
        if i % 4 == 0:
            torch_cold.append(timed([*torch_cmd, "0", str(work / "torch_out.npy"), "0"], env1))
    oc, tc = statistics.median(ours_cold), statistics.median(torch_cold)
    lines.append(f"  cold start (exec -> first output written), median: aoti-run {oc * 1e3:.1f} ms (n={len(ours_cold)}, "
                 f"min {min(ours_cold) * 1e3:.1f}), torch {tc * 1e3:.0f} ms (n={len(torch_cold)})  "
                 f"(target: aoti-run <= 20 ms)")
    for threads in args.threads:
        env = {**os.environ, **extra, "OMP_NUM_THREADS": str(threads)}
        ours, theirs = interleaved_medians(ours_cmd, torch_cmd, args.calls, args.rounds, env, work / "torch_out.npy")
        ratios = sorted(o / t for o, t in zip(ours, theirs, strict=True))
        ol, tl = statistics.median(ours), statistics.median(theirs)
        lines.append(f"  per call, {threads} thread(s), median of {args.rounds} interleaved rounds x {args.calls}: "
                     f"aoti-run {ol:.1f} us {sorted(ours)}, torch {tl:.1f} us {sorted(theirs)}  "
                     f"ratio {ol / tl:.3f} (per-round {ratios[0]:.2f}..{ratios[-1]:.2f}; target <= 0.9)")
    return lines


def main() -> int:
    ap = model_options(parser(__doc__), "mlp_bench,attention,convnet_bench", 1000, 3,
                       "interleaved per-call rounds per thread count")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cold", type=int, default=10, help="cold starts of aoti-run (torch gets a quarter)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for both sides (e.g. OMP_WAIT_POLICY=passive)")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]

    build_runtime()
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"extra env: {' '.join(args.env) or 'none'}", flush=True)
    for name in args.examples.split(","):
        for line in bench_model(name, args, BUILD):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
