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

    .venv/bin/python bench/bench_load.py --writers [--mb 128] [--runs 7] [--device cpu|cuda] [--lib PATH]

Weight load of a blob-weights package written by torch itself (torch._inductor.aoti_compile_and_package with
the blob configs, no layouts of ours) against our own export of the same module (aoti-toolchain export,
weights="blob"): a stack of Linear(2048, 2048) layers holding about --mb MB, random init (seed 0), both
exported once into build/bench-load/. Each load runs in a fresh process, the two interleaved, --runs each,
AOTI_HOST_LOG=info: the weights phase of the runtime's own load log ("weights N ms"; on CUDA the upload
that started earlier is waited for there), the whole runtime.load call, and the load's peak resident growth
(VmHWM reset through /proc/self/clear_refs before the call), and the loading thread's CPU time in that call
(what a loaded 2-core VM does not blur). Prints the medians, the GB/s of the weights phase and the ratios
torch-written / ours (target <= 1.25). --lib measures another build of libaoti_host.so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import re
import subprocess
import sys
import zipfile
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


WRITERS_CHILD = r"""
import re, sys, time
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
runtime.library(sys.argv[3])
def status():
    return {k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k in ("VmRSS", "VmHWM")}
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status()
t0, c0 = time.perf_counter(), time.thread_time()
prog = runtime.load(sys.argv[2], library_path=sys.argv[3], device=sys.argv[4])
t, c = time.perf_counter() - t0, time.thread_time() - c0
print("load", t, c, (status()["VmHWM"] - before["VmRSS"]) // 1024)
prog.close()
"""


def export_writers(mb: int, device: str) -> dict[str, Path]:
    """The same module exported by torch itself and by aoti-toolchain export, both with a weights blob."""
    width = 2048
    layers = max(1, round(mb * 2**20 / (width * width * 4)))
    made = {w: OUT / f"writers-{device}-{layers}x{width}-{w}.pt2" for w in ("torch", "ours")}
    if all(p.exists() for p in made.values()):
        return made
    torch_scratch()
    import torch

    from toolchain.export import export, inductor_configs

    torch.manual_seed(0)
    module = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).eval().to(device)
    x = torch.randn(4, width, device=device)
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"exporting {layers} x Linear({width}, {width}) on {device}: "
          f"{sum(p.numel() * 4 for p in module.parameters()) / 2**20:.0f} MB of weights", flush=True)
    with torch.no_grad():
        ep = torch.export.export(module, (x,))
        tmp = made["torch"].with_suffix(".tmp.pt2")
        torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp), inductor_configs=inductor_configs("blob"))
        tmp.rename(made["torch"])
        export(module, (x,), made["ours"], weights="blob", device=device, build_dir=REPO / "build")
    return made


def load_weights_once(pt2: Path, lib: Path, device: str) -> tuple[float, float, float, int]:
    """(weights phase s, runtime.load s, the loading thread's CPU s in runtime.load, peak growth MiB) of one load
    in a fresh process."""
    env = {**os.environ, "AOTI_HOST_LOG": "info"}
    proc = subprocess.run([sys.executable, "-c", WRITERS_CHILD, str(REPO), str(pt2), str(lib), device], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"load of {pt2} failed:\n{proc.stderr[-3000:]}")
    m = re.search(r"loaded in [0-9.]+ ms: .*?weights ([0-9.]+)", proc.stderr)
    if m is None:
        raise SystemExit(f"no load log from {pt2}:\n{proc.stderr[-3000:]}")
    _, t, c, peak = proc.stdout.split()[-4:]
    return float(m.group(1)) / 1e3, float(t), float(c), int(peak)


def writers(args: argparse.Namespace) -> None:
    made = export_writers(args.mb, args.device)
    lib = Path(args.lib) if args.lib else LIB
    with zipfile.ZipFile(made["ours"]) as zf:
        blob = next(i.file_size for i in zf.infolist() if i.filename.endswith("_weights.blob"))
    print(f"weights blob {blob / 1e6:.1f} MB; device {args.device}; library {lib}", flush=True)
    base = {k: v for k, v in os.environ.items() if k != "AOTI_HOST_LOG"}
    os.environ.clear()
    os.environ.update(base)
    runs: dict[str, list[tuple[float, float, float, int]]] = {"torch": [], "ours": []}
    load_weights_once(made["torch"], lib, args.device)  # both packages in the page cache
    load_weights_once(made["ours"], lib, args.device)
    for _ in range(args.runs):
        for w in ("torch", "ours"):
            runs[w].append(load_weights_once(made[w], lib, args.device))
    med = {w: [statistics.median(r[i] for r in runs[w]) for i in range(4)] for w in runs}
    print(f"{'written by':<11} {'weights ms':>10} {'GB/s':>6} {'load ms':>8} {'load CPU ms':>11} {'peak MiB':>8}  "
          "weights ms per run")
    for w in ("torch", "ours"):
        wt, t, c, peak = med[w]
        print(f"{w:<11} {wt * 1e3:10.1f} {blob / wt / 1e9 if wt else 0:6.2f} {t * 1e3:8.1f} {c * 1e3:11.1f} {peak:8.0f}  "
              f"{' '.join(f'{r[0] * 1e3:.1f}' for r in runs[w])}")
    for i, what in ((0, "weights phase"), (2, "load CPU time")):
        ratios = sorted(a[i] / b[i] for a, b in zip(runs["torch"], runs["ours"]) if b[i] > 0)
        print(f"{what} torch-written / ours: {med['torch'][i] / med['ours'][i]:.2f} (medians); "
              f"per interleaved pair {ratios[0]:.2f}-{ratios[-1]:.2f} (target <= 1.25)")


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
    ap.add_argument("--writers", action="store_true",
                    help="weight load of a torch-written blob package against our export of the same module")
    ap.add_argument("--device", default="cpu", help="--writers: cpu or cuda")
    ap.add_argument("--lib", default="", help="--writers: the libaoti_host.so to measure (default: this build's)")
    args = ap.parse_args()
    if args.writers:
        if args.mb == 1024:
            args.mb = 128
        writers(args)
        return

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
