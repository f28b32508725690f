"""Benchmark: per-call time of the corpus-like models per `--cpu-isa`, ours against torch's runner on the same
package, and the cost of verify's decode (cpu-isa-too-new, cuda-*) on a 1 GB plugin.

    .venv/bin/python bench/bench_isa.py speed [--examples mlp_bench,attention,convnet_bench]
                                              [--isas avx512,avx2,x86-64-v2] [--calls 500] [--rounds 2]
    .venv/bin/python bench/bench_isa.py decode [--gb 1]
    .venv/bin/python bench/bench_isa.py preflight [--runs 15]

speed: each model is exported once per ISA (`export(cpu_isa=...)`); aoti-run --repeat and torch's
aoti_load_package runner (bench/_common.py's TORCH_RUNNER, libtorch_cpu re-opened RTLD_GLOBAL) run that very
file, interleaved round by round, OMP_NUM_THREADS=1; the figure is the median of the rounds' medians.
decode: a plugin of --gb GB (gcc-built: AVX2 and AVX-512 kernels, plus GB of weights in .lrodata, as
inductor embeds them) and the runtime library (its text has no prefilter-free region): scan time, bytes
decoded against bytes of code, and the whole `verify` of the plugin.
preflight: the runtime's decode of a package without a target record (the 1.7 MB attention plugin of
bench_verify.py, its record removed: what torch writes), as aoti-run logs it (AOTI_HOST_LOG=debug): the
decode with an empty verdict cache (a fresh XDG_CACHE_HOME) and the cached verdict (SHA-256 + entry read) of
--runs runs each; then one linear sweep of the same code in C with Zydis (minimal mode) and with capstone's C
API (cs_disasm_iter, detail off) for the decoder choice (CPU time, best of 5; each where its headers are:
libzydis-dev, the capstone wheel's include/).
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


_SWEEP_C = r"""
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#ifdef ZYDIS
#include <Zydis/Zydis.h>
#else
#include <capstone.h>
#endif
static double cpu_ms(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char** argv) {
  int fd = open(argv[1], O_RDONLY); struct stat st; fstat(fd, &st);
  const unsigned char* d = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const Elf64_Ehdr* e = (const void*)d; const Elf64_Shdr* sh = (const void*)(d + e->e_shoff);
  double best = 1e9; size_t n = 0, bytes = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = cpu_ms(); n = 0; bytes = 0;
#ifdef ZYDIS
    ZydisDecoder dec; ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ZydisDecoderEnableMode(&dec, ZYDIS_DECODER_MODE_MINIMAL, ZYAN_TRUE);
#else
    csh h; cs_open(CS_ARCH_X86, CS_MODE_64, &h); cs_option(h, CS_OPT_SKIPDATA, CS_OPT_ON); cs_insn* ins = cs_malloc(h);
#endif
    for (int i = 0; i < e->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_PROGBITS || !(sh[i].sh_flags & SHF_EXECINSTR)) continue;
      const uint8_t* c = d + sh[i].sh_offset; size_t size = sh[i].sh_size; uint64_t a = sh[i].sh_addr; bytes += size;
#ifdef ZYDIS
      ZydisDecodedInstruction in;
      for (size_t off = 0; off < size;) {
        if (ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, NULL, c + off, size - off, &in))) { off += in.length; ++n; } else { ++off; }
      }
      (void)a;
#else
      while (cs_disasm_iter(h, &c, &size, &a, ins)) ++n;
#endif
    }
#ifndef ZYDIS
    cs_free(ins, 1); cs_close(&h);
#endif
    double dt = cpu_ms() - t0; if (dt < best) best = dt;
  }
  printf("%zu instructions, %zu bytes of code, %.2f ms CPU (best of 5)\n", n, bytes, best);
  return 0;
}
"""


def _sweeps(so: Path, d: Path) -> None:
    """The same linear sweep in C with each decoder (where its headers are), on the plugin's code."""
    import importlib.util

    src = d / "sweep.c"
    src.write_text(_SWEEP_C)
    spec = importlib.util.find_spec("capstone")
    cs = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    builds = {}
    if Path("/usr/include/Zydis/Zydis.h").is_file():
        builds["Zydis (libzydis-dev)"] = (["-DZYDIS", "-lZydis"], {})
    if cs is not None and (cs / "include" / "capstone" / "capstone.h").is_file():
        (d / "lib").mkdir(exist_ok=True)
        link = d / "lib" / "libcapstone.so.5"
        if not link.exists():
            link.symlink_to(cs / "lib" / "libcapstone.so")  # the wheel's file; its soname is libcapstone.so.5
        builds["capstone 5 (the pip wheel)"] = ([f"-I{cs / 'include' / 'capstone'}", str(cs / "lib" / "libcapstone.so")],
                                                {"LD_LIBRARY_PATH": str(d / "lib")})
    for name, (flags, env) in builds.items():
        exe = d / ("sweep-" + name.split()[0].lower())
        subprocess.run(["gcc", "-O2", str(src), "-o", str(exe), *flags], check=True)
        out = subprocess.run([str(exe), str(so)], capture_output=True, text=True, check=True,
                             env={**os.environ, **env}).stdout.strip()
        print(f"C sweep with {name}: {out}")


def preflight(args: argparse.Namespace) -> None:
    import re
    import zipfile

    from bench_verify import small_plugin

    so = small_plugin()
    d = Path(tempfile.mkdtemp(prefix="bench-preflight-", dir=REPO / "build"))
    pt2 = d / "attention-torch.pt2"
    with zipfile.ZipFile(pt2, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("attention/data/aotinductor/model/attention.wrapper.so", so.read_bytes())
    run = REPO / "build" / "cpu-gcc-release" / "dist" / "bin" / "aoti-run"
    decoded, decoded_cpu, cached, lines = [], [], [], []
    for i in range(args.runs * 2):
        cache = d / (f"cache-{i}" if i % 2 == 0 else "cache-warm")
        env = {**os.environ, "AOTI_HOST_LOG": "debug", "XDG_CACHE_HOME": str(cache)}
        env.pop("AOTI_HOST_CACHE_DIR", None)
        err = subprocess.run([str(run), str(pt2), "-o", str(d / "out")], capture_output=True, text=True,
                             env=env).stderr
        if m := re.search(r"ISA decoded from the code: (\S+), (\d+) of (\d+) code bytes decoded in ([0-9.]+) ms "
                          r"\(([0-9.]+) ms of CPU", err):
            decoded.append(float(m[4]))
            decoded_cpu.append(float(m[5]))
            lines.append(m[0])
        elif m := re.search(r"ISA verdict from the cache entry .*\(([0-9.]+) ms with the SHA-256\)", err):
            cached.append(float(m[1]))
        else:
            raise SystemExit(f"no ISA line in aoti-run's log:\n{err}")
    load = os.getloadavg()[0]
    print(f"{so.name} ({so.stat().st_size / 1e6:.2f} MB): {lines[0]}")
    print(f"decode (empty cache): median {statistics.median(decoded):.2f} ms wall "
          f"({statistics.median(decoded_cpu):.2f} ms of CPU), min {min(decoded):.2f} ms wall of {len(decoded)} runs; "
          f"cached verdict (SHA-256 + entry): median {statistics.median(cached):.2f} ms, min {min(cached):.2f} ms of "
          f"{len(cached)}; load average {load:.1f}")
    _sweeps(so, d)


def main() -> int:
    ap = parser(__doc__)
    sub = ap.add_subparsers(dest="part", required=True)
    s = sub.add_parser("speed")
    model_options(s, "mlp_bench,attention,convnet_bench", 500, 2)
    s.add_argument("--isas", default="avx512,avx2,x86-64-v2")
    dp = sub.add_parser("decode")
    dp.add_argument("--gb", type=float, default=1.0)
    pf = sub.add_parser("preflight")
    pf.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    {"speed": speed, "decode": decode, "preflight": preflight}[args.part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
