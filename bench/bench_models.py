"""Benchmark: real architectures on the CPU, aoti-run against torch's own runner on the same package.

    .venv/bin/python bench/bench_models.py [--models resnet18,lstm_acoustic,...] [--threads 1,2]
                                           [--rounds 3] [--seconds 2] [--reexport] [--no-build]
    BENCH_QUICK=1 .venv/bin/python bench/bench_models.py     # one round, ~0.3 s per measurement
    [--env OMP_WAIT_POLICY=passive]   # extra environment for both sides

The models (bench/real_models.py) are the layer configurations of torchvision's CNNs and ViT-B/16, of
BERT-base, GPT-2 small (prefill), a Llama decoder-block stack (GQA, RoPE), T5-small, Whisper-tiny's encoder,
wav2vec2-base and an LSTM acoustic model, written out with torch.nn and randomly initialised (seed 0;
nothing downloaded; each builder's docstring gives its batch and sequence). Each is exported once
(`aoti-toolchain export`'s settings: a vectorised link_libtorch=False plugin, cached under
build/bench-models/ and re-exported when real_models.py, the export script or torch changes) together with
its eager outputs.
Then, at each OMP_NUM_THREADS of --threads, --rounds interleaved rounds of:
- ours: `aoti-run --repeat N --warmup W` (the C++ floor a user gets; its median per call);
- torch's: `torch._inductor.aoti_load_package` on the very same .pt2 in a fresh Python process
  (libtorch_cpu.so re-opened RTLD_GLOBAL first, FACTS.md), a perf_counter loop under no_grad.
N is chosen so that a measurement lasts about --seconds. Each side's peak resident memory (ru_maxrss of
the process, torch's import included: what a deployment pays) is taken from the same runs. Every
side's outputs are checked against eager (fp32: |ours - eager| <= 1e-4 * (|eager| + max|eager|)), and eager's
outputs themselves must be finite, not all zero, and move by >= 1e-2 of their magnitude on another random
input (a model whose output is its classifier's bias would pass any comparison).
Printed per model: medians of the rounds per thread count, ratio = ours / torch's (target <= 1.0), and
the peak-RSS ratio (target <= 0.3).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import AOTI_RUN, REPO, aoti_run_command, build_runtime, parse_median, torch_runner_command  # noqa: E402

WORK = REPO / "build" / "bench-models"
RTOL = 1e-4

EXPORT = r"""
import sys
import numpy as np
import torch
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/bench")
import real_models
from toolchain.export import export
name, work = sys.argv[2], sys.argv[3]
torch.manual_seed(0)
module, inputs = real_models.MODELS[name]()
with torch.no_grad():
    ys = module(*inputs)
ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
for i, x in enumerate(inputs):
    np.save(f"{work}/x{i}.npy", x.numpy())
for i, y in enumerate(ys):
    np.save(f"{work}/eager_{i}.npy", y.numpy())
# the same model on other inputs (other token ids where the input is integer): how much the outputs
# depend on the input, so that a comparison with eager that no kernel error could fail is caught
torch.manual_seed(1)
others = [torch.randn_like(x) if x.is_floating_point() else torch.randint_like(x, 0, int(x.max()) + 1)
          for x in inputs]
with torch.no_grad():
    zs = module(*others)
zs = list(zs) if isinstance(zs, (list, tuple)) else [zs]
for i, z in enumerate(zs):
    np.save(f"{work}/other_{i}.npy", z.numpy())
export(module, inputs, f"{work}/{name}.pt2", build_dir=sys.argv[4])
"""


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[str, int]:
    """Runs cmd to completion; returns its output and its peak resident memory in KiB. GNU time reports
    the process's own peak; the fallback, ru_maxrss from wait4, also counts the forking parent's."""
    gnu_time = Path("/usr/bin/time")
    wrapped = [str(gnu_time), "-f", "bench-maxrss-kib=%M", *cmd] if gnu_time.is_file() else cmd
    with subprocess.Popen(wrapped, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        out = p.stdout.read() if p.stdout else ""
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({p.returncode}):\n{out[-3000:]}")
    rss = usage.ru_maxrss
    for line in out.splitlines():
        if line.startswith("bench-maxrss-kib="):
            rss = int(line.split("=", 1)[1])
    return out, rss


def export_model(name: str, reexport: bool) -> Path:
    """The model's directory (package, inputs, eager outputs), exported unless an export of the same
    real_models.py and torch is there already."""
    from importlib.metadata import version

    stamp = hashlib.sha256((REPO / "bench" / "real_models.py").read_bytes() + EXPORT.encode() +
                           version("torch").encode()).hexdigest()
    work = WORK / name
    if not reexport and (work / "stamp").is_file() and (work / "stamp").read_text() == stamp:
        return work
    work.mkdir(parents=True, exist_ok=True)
    (work / "stamp").unlink(missing_ok=True)
    for old in work.glob("*.npy"):
        old.unlink()
    env = {**os.environ, "TMPDIR": str(WORK), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", EXPORT, str(REPO), name, str(work), str(REPO / "build")], env=env,
                   check=True)
    print(f"  exported {name} in {time.perf_counter() - start:.0f} s", flush=True)
    (work / "stamp").write_text(stamp)
    return work


def check_outputs(work: Path, outdir: Path, who: str, first_only: bool = False) -> float:
    """The largest error of outdir's outputs (or its first, where the runner saves only that) against eager,
    relative to each output's largest magnitude; raises when an element is beyond
    RTOL * (|eager| + max|eager|)."""
    worst = 0.0
    for ref_path in sorted(work.glob("eager_*.npy"))[:1 if first_only else None]:
        i = ref_path.stem.split("_")[1]
        ref = np.load(ref_path)
        got = np.load(outdir / f"output_{i}.npy")
        if got.shape != ref.shape:
            raise RuntimeError(f"{who}: output {i} has shape {got.shape}, eager {ref.shape}")
        scale = float(np.max(np.abs(ref))) or 1.0
        err = np.abs(got.astype(np.float64) - ref)
        bad = err > RTOL * (np.abs(ref) + scale)
        if bad.any():
            raise RuntimeError(f"{who}: output {i} differs from eager in {int(bad.sum())} elements "
                               f"(max error {float(err.max()):.3g}, max |eager| {scale:.3g})")
        worst = max(worst, float(err.max()) / scale)
    return worst


# The least input sensitivity (max |y(x) - y(x')| / max |y(x)| over the elements of an output, x' another
# random input) for which the comparison with eager means something: far above RTOL, so that a kernel that
# computes its layer wrongly moves the output past the tolerance.
MIN_SENSITIVITY = 100 * RTOL


def check_eager(work: Path) -> float:
    """The least input sensitivity of the model's eager outputs (saved at export); raises when an output is
    degenerate: NaN or infinite, all zero, or (near) independent of the input, where any runtime that
    returns the classifier's bias would pass the comparison."""
    least = float("inf")
    for ref_path in sorted(work.glob("eager_*.npy")):
        i = ref_path.stem.split("_")[1]
        ref, other = np.load(ref_path).astype(np.float64), np.load(work / f"other_{i}.npy").astype(np.float64)
        if not np.isfinite(ref).all():
            raise RuntimeError(f"{work.name}: eager output {i} holds NaN or infinity")
        scale = float(np.max(np.abs(ref)))
        if scale == 0.0:
            raise RuntimeError(f"{work.name}: eager output {i} is all zero")
        sensitivity = float(np.max(np.abs(ref - other))) / scale
        if sensitivity < MIN_SENSITIVITY:
            raise RuntimeError(f"{work.name}: eager output {i} barely depends on the input (another input moves it "
                               f"by {sensitivity:.2g} of its largest magnitude, need >= {MIN_SENSITIVITY:.2g}): the "
                               f"comparison with eager could not fail")
        least = min(least, sensitivity)
    return least


def bench_model(name: str, args: argparse.Namespace) -> list[str]:
    work = export_model(name, args.reexport)
    sensitivity = check_eager(work)
    pt2 = work / f"{name}.pt2"
    xs = [str(p) for p in sorted(work.glob("x*.npy"))]
    ours_out, torch_out = work / "ours", work / "torch"
    ours_out.mkdir(exist_ok=True)
    torch_out.mkdir(exist_ok=True)
    ours_cmd = aoti_run_command(pt2, xs, ours_out)
    torch_cmd = torch_runner_command(pt2, xs)  # + calls, output file, warm-up calls
    extra = dict(e.split("=", 1) for e in args.env)
    env0 = {**os.environ, **extra, "OMP_NUM_THREADS": "1", "TMPDIR": str(WORK)}

    # correctness (and the calibration of N): one call each, outputs against eager
    out, _ = run_measured([*ours_cmd, "--repeat", "3"], env0)
    per_call = parse_median(out) * 1e-6
    run_measured([*torch_cmd, "0", str(torch_out / "output_0.npy"), "0"], env0)
    e_ours = check_outputs(work, ours_out, f"{name}: aoti-run")
    e_torch = check_outputs(work, torch_out, f"{name}: torch's runner", first_only=True)  # it saves output 0
    calls = int(min(2000, max(5, args.seconds / per_call)))
    warmup = max(2, calls // 10)
    lines = [f"model {name}: outputs against eager, max error / max|eager|: aoti-run {e_ours:.2g}, "
             f"torch's runner {e_torch:.2g} (another input moves eager's by {sensitivity:.2g}); "
             f"{calls} calls per measurement"]
    rss_ours, rss_torch = [], []
    for threads in args.threads:
        env = {**env0, "OMP_NUM_THREADS": str(threads)}
        ours, theirs = [], []
        for _ in range(args.rounds):
            out, rss = run_measured([*ours_cmd, "--repeat", str(calls), "--warmup", str(warmup)], env)
            ours.append(parse_median(out))
            rss_ours.append(rss)
            out, rss = run_measured([*torch_cmd, str(calls), "", str(warmup)], env)
            theirs.append(parse_median(out))
            rss_torch.append(rss)
        ratios = sorted(o / t for o, t in zip(ours, theirs, strict=True))
        ol, tl = statistics.median(ours), statistics.median(theirs)
        lines.append(f"  {threads} thread(s), median of {args.rounds}: aoti-run {ol / 1e3:.3f} ms, torch's runner "
                     f"{tl / 1e3:.3f} ms  ratio {ol / tl:.3f} (rounds {ratios[0]:.2f}..{ratios[-1]:.2f}; "
                     f"target <= 1.0)")
    ro, rt = max(rss_ours) / 1024, max(rss_torch) / 1024
    lines.append(f"  peak RSS: aoti-run {ro:.0f} MiB, torch's runner {rt:.0f} MiB  ratio {ro / rt:.3f} "
                 f"(target <= 0.3)")
    return lines


def main() -> int:
    from real_models import MODELS

    quick = os.environ.get("BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=1 if quick else 3, help="interleaved rounds per thread count")
    ap.add_argument("--seconds", type=float, default=0.3 if quick else 2.0,
                    help="about how long one measurement (one side, one round) runs")
    ap.add_argument("--reexport", action="store_true", help="export again even when a current export is cached")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for both sides (e.g. OMP_WAIT_POLICY=passive on a loaded machine)")
    ap.add_argument("--no-build", action="store_true", help="use the built aoti-run as it is (no scons)")
    ap.add_argument("--export-only", action="store_true", help="export the models (or find them cached), time nothing")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2

    if not args.no_build:
        build_runtime()
    if not AOTI_RUN.is_file():
        print(f"{AOTI_RUN} is missing: build the runtime (scons -j2) or drop --no-build", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; rounds {args.rounds}, ~{args.seconds} s each; "
          f"extra env: {' '.join(args.env) or 'none'}",
          flush=True)
    for name in args.models.split(","):
        if args.export_only:
            export_model(name, args.reexport)
            continue
        for line in bench_model(name, args):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
