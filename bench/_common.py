"""What the benchmarks share: the repository on sys.path, torch's scratch space under build/, the MLP the
serving benchmarks export, example inputs saved as .npy, and torch's own runner with its timing loop."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BUILD = REPO / "build"
AOTI_RUN = BUILD / "cpu-gcc-release" / "dist" / "bin" / "aoti-run"

# torch's AOTI runner on a package: argv pt2, comma-separated .npy inputs, calls, the .npy path its first
# output is written to ("" for none), warm-up calls (at most `calls`). The plugins are link_libtorch=False:
# libtorch_cpu.so is re-opened RTLD_GLOBAL first so they bind their aoti_torch_* shims (FACTS.md). Prints
# "latency_us: median=..." over `calls` timed calls (none when calls is 0).
TORCH_RUNNER = r"""
import ctypes, os, sys, time
import numpy as np
import torch
ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"), mode=os.RTLD_GLOBAL)
import torch._inductor
pt2, xs, calls, out, warmup = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
runner = torch._inductor.aoti_load_package(pt2)
inputs = [torch.from_numpy(np.load(x)) for x in xs]
with torch.no_grad():
    if out:
        y = runner(*inputs)
        np.save(out, (y[0] if isinstance(y, (list, tuple)) else y).contiguous().numpy())
    if calls:
        for _ in range(min(calls, warmup)):
            runner(*inputs)
        times = []
        for _ in range(calls):
            t = time.perf_counter_ns()
            runner(*inputs)
            times.append(time.perf_counter_ns() - t)
        times.sort()
        print("latency_us: median=%.2f p10=%.2f p90=%.2f threads=%d" % (
            times[len(times)//2] / 1e3, times[len(times)//10] / 1e3, times[9 * len(times)//10] / 1e3,
            torch.get_num_threads()))
"""


def torch_runner_command(pt2: Path, xs: list[str]) -> list[str]:
    """TORCH_RUNNER on `pt2` and inputs `xs`; append calls, output path and warm-up calls."""
    return [sys.executable, "-c", TORCH_RUNNER, str(pt2), ",".join(xs)]


def aoti_run_command(pt2: Path, xs: list[str], out: Path) -> list[str]:
    """aoti-run on `pt2` and inputs `xs`, outputs into `out`, quiet; append --repeat N to time it."""
    return [str(AOTI_RUN), str(pt2), *sum((["-i", x] for x in xs), []), "-o", str(out), "--quiet"]


def model_options(ap: argparse.ArgumentParser, examples: str, calls: int, rounds: int,
                  rounds_help: str | None = None) -> argparse.ArgumentParser:
    """The options of the benchmarks that time example models call by call: --examples (toolchain.examples
    names, comma-separated), --calls per timed run, --rounds of interleaved runs."""
    ap.add_argument("--examples", default=examples)
    ap.add_argument("--calls", type=int, default=calls)
    ap.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    return ap


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line, its module docstring as the help."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def build_runtime() -> None:
    """The default build (scons -j2, quiet): aoti-run, the runtime library and the Python module up to date."""
    subprocess.run([str(Path(sys.executable).with_name("scons")), "-C", str(REPO), "-Q", "-s", "-j2"], check=True)


def parse_median(text: str) -> float:
    """The median of a "latency_us: median=..." line (TORCH_RUNNER, aoti-run --repeat)."""
    for line in text.splitlines():
        if line.startswith("latency_us:"):
            return float(line.split("median=")[1].split()[0])
    raise RuntimeError(f"no latency line in:\n{text}")


def interleaved_medians(ours_cmd: list[str], torch_cmd: list[str], calls: int, rounds: int, env: dict[str, str],
                        torch_out: Path) -> tuple[list[float], list[float]]:
    """Per-call medians of aoti-run --repeat and of TORCH_RUNNER (50 warm-up calls), `rounds` rounds each,
    interleaved so that both sides see the machine's load alike: (ours, torch's), one figure a round."""
    ours, theirs = [], []
    for _ in range(rounds):
        p = subprocess.run([*ours_cmd, "--repeat", str(calls)], env=env, check=True, capture_output=True, text=True)
        ours.append(parse_median(p.stdout + p.stderr))
        p = subprocess.run([*torch_cmd, str(calls), str(torch_out), "50"], env=env, check=True, capture_output=True,
                           text=True)
        theirs.append(parse_median(p.stdout))
    return ours, theirs


def torch_scratch() -> None:
    """Inductor writes hundreds of MB to TMPDIR even with its cache dir set: both go under build/torch."""
    torch_dir = BUILD / "torch"
    (torch_dir / "tmp").mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(torch_dir / "tmp")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(torch_dir / "inductor-cache"))


def save_inputs(inputs, folder: Path, prefix: str) -> list[str]:
    """Each input tensor as folder/<prefix><i>.npy; their paths, in order."""
    import numpy as np

    paths = []
    for i, x in enumerate(inputs):
        np.save(folder / f"{prefix}{i}.npy", x.numpy())
        paths.append(str(folder / f"{prefix}{i}.npy"))
    return paths


def export_mlp(pt2: Path, width: int, max_rows: int, device: str = "cpu") -> Path:
    """The serving benchmarks' model: a `width`-wide 3-layer MLP (16 outputs) with a dynamic batch 1..max_rows,
    exported once to `pt2` (reused while it exists)."""
    if pt2.exists():
        return pt2
    torch_scratch()
    import torch

    from toolchain.export import export

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 16)).eval()
    batch = torch.export.Dim("batch", min=1, max=max_rows)
    return export(model, (torch.randn(4, width),), pt2, build_dir=BUILD, device=device,
                  dynamic_shapes={"input": {0: batch}})
