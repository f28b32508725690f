"""Benchmark: SCons null builds of the CPU and CUDA variants together, and a CacheDir rebuild, against a
full build of the same variants measured in the same run.

    .venv/bin/python bench/bench_build.py [--rounds 5] [--jobs 2]

Works in a scratch copy of the build inputs (SConstruct, toolchain/, runtime/, templates/) so the
repository's build/ is left alone:
1. full build of cpu (and cuda, when nvcc is found) with cache_dir= (the reference);
2. null build (`scons -q` per variant, summed), median of --rounds rounds; target <= 2 s;
3. the same variants built in a second copy at another path from the cache; ratio to the full build.
Prints each time and the ratios (null / full, cached / full).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from toolchain.scons.nvcc import find_nvcc  # noqa: E402

SCONS = str(Path(sys.executable).with_name("scons"))


def copy_inputs(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for rel in ("SConstruct", "toolchain", "runtime", "templates"):
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.os", "*.o"))
        else:
            shutil.copy(src, dest / rel)
    return dest


def timed(cwd: Path, *args: str) -> float:
    start = time.monotonic()
    proc = subprocess.run([SCONS, "-Q", *args], cwd=cwd, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"scons {' '.join(args)} failed in {cwd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    opts = ap.parse_args()
    variants = [["cuda=off"]] + ([["cuda=on"]] if find_nvcc() else [])
    names = ", ".join(v[0] for v in variants)
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        root = Path(tmp)
        cache = root / "cache"
        a = copy_inputs(root / "a")
        full = sum(timed(a, f"-j{opts.jobs}", f"cache_dir={cache}", *v) for v in variants)
        nulls = []
        for _ in range(opts.rounds):
            nulls.append(sum(timed(a, "-q", f"cache_dir={cache}", *v) for v in variants))
        null = statistics.median(nulls)
        b = copy_inputs(root / "b")
        cached = sum(timed(b, f"-j{opts.jobs}", f"cache_dir={cache}", *v) for v in variants)
    print(f"variants: {names}  jobs: {opts.jobs}  cores: {os.cpu_count()}")
    print(f"full build (reference): {full:.1f} s")
    print(f"null build, all variants together, median of {opts.rounds}: {null:.2f} s "
          f"{[round(x, 2) for x in nulls]}  ratio to full {null / full:.4f}  (target <= 2 s)")
    print(f"rebuild in another checkout from cache_dir: {cached:.1f} s  ratio to full {cached / full:.3f}")


if __name__ == "__main__":
    main()
