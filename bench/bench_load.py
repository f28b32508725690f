"""Benchmark: loading a package's plugin from a sealed memfd (the default) vs from the private file cache.

    .venv/bin/python bench/bench_load.py [--mb 1024] [--runs 5]

Exports (once; reused while build/bench-load/model-<MB>mb.pt2 exists) a stack of bias-free 4096x4096 Linear
layers holding about --mb MB of float32 weights, embedded in the plugin (toolchain.export.export,
weights="embedded"), with TMPDIR and the inductor cache under build/. Each load runs in a fresh process
(toolchain.runtime.load, timed around the call only; the .pt2 is in the page cache for every mode), the
three modes interleaved, --runs each:

- memfd: AOTI_HOST_CACHE_DIR unset; HOME, XDG_CACHE_HOME and TMPDIR point at an empty directory, which is
  checked to stay empty;
- cache-cold: AOTI_HOST_CACHE_DIR set to a new empty directory (the entry is written, fsynced, renamed);
- cache-warm: AOTI_HOST_CACHE_DIR set to a directory that already holds the entry (it is re-hashed).

Prints the medians, the ratios to memfd, the resident shared-memory (memfd pages) and file-backed memory of
the last process of each mode after the load, and the SHA-256 speed of this machine (test_sha256 --speed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from _common import REPO, torch_scratch

OUT = REPO / "build" / "bench-load"
LIB = REPO / "build" / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"
SHA_TOOL = REPO / "build" / "cpu-gcc-release" / "tests" / "test_sha256"

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
runtime.library(sys.argv[3])
t0 = time.perf_counter()
prog = runtime.load(sys.argv[2], library_path=sys.argv[3])
t = time.perf_counter() - t0
st = {k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k.startswith("Rss")}
print(t, st["RssShmem"] // 1024, st["RssFile"] // 1024)
prog.close()
"""


def export_model(mb: int) -> Path:
    pt2 = OUT / f"model-{mb}mb.pt2"
    if pt2.exists():
        return pt2
    torch_scratch()
    import torch

    from toolchain.export import export

    width = 4096
    layers = max(1, round(mb * 2**20 / (width * width * 4)))
    module = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).eval()
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"exporting {layers} x Linear({width}, {width}): {layers * width * width * 4 / 2**20:.0f} MB of weights",
          flush=True)
    with torch.no_grad():
        export(module, (torch.randn(1, width),), pt2, weights="embedded", build_dir=REPO / "build")
    return pt2


def load_once(pt2: Path, env: dict[str, str], mem: dict[str, tuple[int, int]] | None = None,
              mode: str = "") -> float:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(pt2), str(LIB)], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"load failed:\n{proc.stderr[-3000:]}")
    t, shmem, file = proc.stdout.split()[-3:]
    if mem is not None:
        mem[mode] = (int(shmem), int(file))
    return float(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024, help="MB of float32 weights embedded in the plugin")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    pt2 = export_model(args.mb)
    print(f"{pt2}: {pt2.stat().st_size / 2**20:.0f} MB")
    base = {k: v for k, v in os.environ.items() if k not in ("AOTI_HOST_CACHE_DIR", "AOTI_HOST_LOG")}
    empty = OUT / "empty-home"
    warm = OUT / "cache-warm"
    shutil.rmtree(warm, ignore_errors=True)
    load_once(pt2, {**base, "AOTI_HOST_CACHE_DIR": str(warm)})  # fills the warm cache
    times: dict[str, list[float]] = {"memfd": [], "cache-cold": [], "cache-warm": []}
    mem: dict[str, tuple[int, int]] = {}
    for run in range(args.runs):
        shutil.rmtree(empty, ignore_errors=True)
        empty.mkdir(parents=True)
        times["memfd"].append(load_once(pt2, {**base, "HOME": str(empty), "XDG_CACHE_HOME": str(empty),
                                              "TMPDIR": str(empty)}, mem, "memfd"))
        assert not any(empty.iterdir()), f"the memfd load wrote to {empty}: {list(empty.iterdir())}"
        cold = OUT / f"cache-cold-{run}"
        shutil.rmtree(cold, ignore_errors=True)
        times["cache-cold"].append(load_once(pt2, {**base, "AOTI_HOST_CACHE_DIR": str(cold)}, mem, "cache-cold"))
        shutil.rmtree(cold, ignore_errors=True)
        times["cache-warm"].append(load_once(pt2, {**base, "AOTI_HOST_CACHE_DIR": str(warm)}, mem, "cache-warm"))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'mode':<12} {'median s':>9}  {'/ memfd':>8}  {'RssShmem MB':>11}  {'RssFile MB':>10}  runs")
    for k, v in times.items():
        print(f"{k:<12} {med[k]:9.3f}  {med[k] / med['memfd']:8.2f}  {mem[k][0]:11d}  {mem[k][1]:10d}  "
              f"{' '.join(f'{t:.3f}' for t in v)}")
    if SHA_TOOL.exists():
        print(subprocess.run([str(SHA_TOOL), "--speed", "256"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
