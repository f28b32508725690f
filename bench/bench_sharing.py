"""Benchmark: loading a two-method program with weights shared across methods vs each method its own copy.

    .venv/bin/python bench/bench_sharing.py [--width 2944] [--rounds 5]

The model is toolchain.examples.two_methods(width): `forward` and `embed` of one module, exported with
toolchain.export.export_methods (weights in a blob), sharing fc1 and fc2 (2 * width^2 float32: 69 MB at
the default width). Each load runs in a fresh process (so nothing is cached in the allocator), shared and
unshared interleaved, --rounds each; a process reports the growth of its anonymous resident memory
(RssAnon, where weight copies live) and of VmRSS after loading and running both methods once, its peak
(VmHWM) and the load time. Prints medians and the shared/unshared ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CHILD = r"""
import sys, time, numpy as np
sys.path.insert(0, sys.argv[1])
from toolchain import runtime
def status():
    d = {}
    for line in open("/proc/self/status"):
        k, v = line.split(":", 1)
        if k in ("RssAnon", "VmRSS", "VmHWM"):
            d[k] = int(v.split()[0]) * 1024
    return d
lib = runtime.library(sys.argv[5] if len(sys.argv) > 5 else None)
x = np.load(sys.argv[3])
before = status()
t0 = time.perf_counter()
prog = runtime.load(sys.argv[2], share_weights=sys.argv[4] == "1")
load_s = time.perf_counter() - t0
for m in prog.methods:
    prog.run([x], method=m)
after = status()
print(after["RssAnon"] - before["RssAnon"], after["VmRSS"] - before["VmRSS"], load_s, after["VmHWM"] - before["VmRSS"])
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=2944)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build-dir", type=Path, default=REPO / "build")
    args = ap.parse_args()

    import numpy as np

    from toolchain import examples
    from toolchain.export import export_methods

    work = args.build_dir / "bench" / f"sharing-{args.width}"
    manifest = work / "methods.json"
    module, (x,) = examples.two_methods(args.width)
    if not manifest.exists():
        export_methods(module, {"forward": (x,), "embed": (x,)}, work, weights="blob", build_dir=args.build_dir)
    np.save(work / "x.npy", x.numpy())
    weights = 2 * args.width * args.width * 4
    samples: dict[str, list[tuple[int, int, float, int]]] = {"1": [], "0": []}
    for _ in range(args.rounds):
        for share in ("1", "0"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(manifest), str(work / "x.npy"), share],
                                 capture_output=True, text=True, check=True).stdout.split()
            samples[share].append((int(out[0]), int(out[1]), float(out[2]), int(out[3])))

    def med(share: str, i: int) -> float:
        return statistics.median(s[i] for s in samples[share])

    mb = 1 / 2**20
    print(f"model: two_methods({args.width}), forward + embed share fc1/fc2 = {weights * mb:.1f} MiB; "
          f"{args.rounds} fresh processes each, interleaved")
    for label, i, unit, scale in (("RssAnon growth", 0, "MiB", mb), ("VmRSS growth", 1, "MiB", mb),
                                  ("peak (VmHWM) growth", 3, "MiB", mb), ("load time", 2, "ms", 1e3)):
        s, u = med("1", i), med("0", i)
        spread = [round(v[i] * scale, 1) for v in samples["1"]], [round(v[i] * scale, 1) for v in samples["0"]]
        print(f"{label}: shared {s * scale:.1f} {unit} {spread[0]}, unshared {u * scale:.1f} {unit} {spread[1]}, "
              f"ratio {s / u:.3f}")
    print(f"resident weights: shared {med('1', 0) / weights:.2f}x, unshared {med('0', 0) / weights:.2f}x "
          "the shared weights (target: about 1x, not 2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
