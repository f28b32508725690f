"""Benchmark: per-call time of the corpus-like models per `--cpu-isa`, ours against torch's runner on the same
package, and the cost of verify's decode (cpu-isa-too-new, cuda-*) on a 1 GB plugin.

    .venv/bin/python bench/bench_isa.py speed [--examples mlp_bench,attention,convnet_bench]
                                              [--isas avx512,avx2,x86-64-v2] [--calls 500] [--rounds 2]
    .venv/bin/python bench/bench_isa.py decode [--gb 1]

speed: each model is exported once per ISA (`export(cpu_isa=...)`); aoti-run --repeat and torch's
aoti_load_package runner (bench/_common.py's TORCH_RUNNER, libtorch_cpu re-opened RTLD_GLOBAL) run that very
file, interleaved round by round, OMP_NUM_THREADS=1; the figure is the median of the rounds' medians.
decode: a plugin of --gb GB (gcc-built: AVX2 and AVX-512 kernels, plus GB of weights in .lrodata, as
inductor embeds them) and the runtime library (its text has no prefilter-free region): scan time, bytes
decoded against bytes of code, and the whole `verify` of the plugin.
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
    REPO,
    aoti_run_command,
    interleaved_medians,
    model_options,
    parser,
    save_inputs,
    torch_runner_command,
)


def speed(args: argparse.Namespace) -> None:
    from toolchain import examples
    from toolchain.export import export
    from toolchain.target import read_record

    build = REPO / "build"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in args.examples.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"bench-isa-{name}-", dir=build))
        module, inputs = examples.get(name)
        xs = save_inputs(inputs, work, "x")
        for isa in args.isas.split(","):
            t = time.perf_counter()
            pt2 = export(module, inputs, work / f"{name}-{isa}.pt2", build_dir=build, cpu_isa=isa)
            took = time.perf_counter() - t
            cpu = (read_record(pt2) or {}).get("cpu", {})
            ours, theirs = interleaved_medians(aoti_run_command(pt2, xs, work / "out"), torch_runner_command(pt2, xs),
                                               args.calls, args.rounds, env, work / "torch_out.npy")
            ol, tl = statistics.median(ours), statistics.median(theirs)
            print(f"{name:14s} --cpu-isa {isa:10s} needs {cpu.get('isa', '?'):10s} ({len(cpu.get('extensions', []))} "
                  f"extensions, highest {cpu.get('highest', {}).get('extension', '-')}): aoti-run {ol:8.1f} us "
                  f"{sorted(ours)}, torch {tl:8.1f} us {sorted(theirs)}, ratio {ol / tl:.3f}; export {took:.0f} s",
                  flush=True)


def _big_plugin(d: Path, gb: float) -> Path:
    from tests.integration import elf_builders as eb
    from tests.integration.test_target_rules import KERNELS

    weights = d / "weights.bin"
    with open(weights, "wb") as f:  # incompressible, like trained weights; written in 64 MB pieces
        left = int(gb * (1 << 30))
        rng = np.random.default_rng(0)
        while left > 0:
            n = min(left, 64 << 20)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n
    blob = (f'__asm__(".section .lrodata,\\"a\\"\\n.balign 64\\n.globl _binary_constants_bin_start\\n'
            f'_binary_constants_bin_start: .incbin \\"{weights}\\"\\n.globl _binary_constants_bin_end\\n'
            f'_binary_constants_bin_end:\\n.previous");')  # inductor's symbols for its embedded weights
    so = eb.build(d, "big", extra=KERNELS + blob, flags=["-O2", "-DWITH_AVX512", "-mcmodel=large"])
    weights.unlink()
    return so


def decode(args: argparse.Namespace) -> None:
    from toolchain.isa import scan_file
    from toolchain.verify import verify_paths

    d = Path(tempfile.mkdtemp(prefix="bench-decode-", dir=REPO / "build"))
    t = time.perf_counter()
    big = _big_plugin(d, args.gb)
    print(f"built {big.name}: {big.stat().st_size / (1 << 30):.2f} GB in {time.perf_counter() - t:.0f} s")
    lib = REPO / "build" / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"
    for path in (big, lib):
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        times = []
        for _ in range(3):
            t = time.perf_counter()
            s = scan_file(path)
            times.append(time.perf_counter() - t)
        print(f"scan {path.name}: {statistics.median(times) * 1e3:.1f} ms median of 3 ({path.stat().st_size >> 20} MB "
              f"file, {s.text_bytes >> 10} KB of code, {s.decoded_bytes >> 10} KB decoded, level {s.level}, "
              f"{len(s.extensions)} extensions)")
    import mmap

    from toolchain.cuda_bin import plugin_images

    with open(big, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        t = time.perf_counter()
        images, _ = plugin_images(m, big.name)
        print(f"GPU image search (cuda-arch-missing) over {big.name}'s data sections: "
              f"{(time.perf_counter() - t) * 1e3:.0f} ms, {len(images)} images")
    times = []
    for _ in range(3):
        t = time.perf_counter()
        rep = verify_paths([big], host=None, profile="debian12", kind="plugin")
        times.append(time.perf_counter() - t)
    rules = sorted({f.rule for f in rep.findings})
    print(f"verify --profile debian12 {big.name} (every rule, CUDA image search over the 1 GB included): "
          f"{statistics.median(times) * 1e3:.1f} ms median of 3; findings {rules}")
    big.unlink()


def main() -> int:
    ap = parser(__doc__)
    sub = ap.add_subparsers(dest="part", required=True)
    s = sub.add_parser("speed")
    model_options(s, "mlp_bench,attention,convnet_bench", 500, 2)
    s.add_argument("--isas", default="avx512,avx2,x86-64-v2")
    dp = sub.add_parser("decode")
    dp.add_argument("--gb", type=float, default=1.0)
    args = ap.parse_args()
    speed(args) if args.part == "speed" else decode(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
