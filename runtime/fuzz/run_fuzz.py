"""Build the libFuzzer targets of runtime/fuzz, generate their seeds and run each for a budget.

    python runtime/fuzz/run_fuzz.py [--seconds S] [--runs N] [--targets json,npy,...] [--work DIR]
                                    [--pt2 PKG.pt2] [--so LIB.so] [--json RESULTS.json]
    python runtime/fuzz/run_fuzz.py --probe      exit 0 when clang++ can build a libFuzzer target, else say why
    python runtime/fuzz/run_fuzz.py --bin-dir DIR --seeds DIR --parallel   prebuilt targets and seeds, all at
                                    once (a bigger machine without clang or numpy: copy both there)

`nox -s fuzz_native -- ARGS` runs this; tests/integration/test_fuzz_native.py runs it with a few seconds
per target. Each target's corpus persists in WORK/corpus/<target> (default build/<variant>/fuzz-work), so
successive runs build on what earlier ones found; a finding leaves its input in WORK/crashes/<target>/.
Exit status: 0 when every target ran its budget without a finding, 1 on a finding, 2 when nothing could run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANT = "cpu-clang-release-fuzz"
TARGETS = ("json", "npy", "elf_scan", "zip", "contract")
# What a sanitizer or libFuzzer prints when it stops on a finding (crash, leak, UB, timeout, OOM).
FINDING = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|"
                     r"runtime error: |==\d+== ?ERROR|SUMMARY: \w+Sanitizer|deadly signal")
# Per input: a parse that takes 10 s or allocates 2 GB is a finding too (libFuzzer's defaults are 1200 s).
LIBFUZZER_LIMITS = ["-timeout=10", "-rss_limit_mb=2560", "-malloc_limit_mb=2048"]


def probe() -> str | None:
    """None when clang++ builds and runs a libFuzzer + ASan + UBSan target here, else the reason."""
    cxx = shutil.which("clang++")
    if cxx is None:
        return "clang++ is not installed (Debian: apt-get install clang libclang-rt-dev; bash .ci/setup does)"
    with tempfile.TemporaryDirectory(prefix="aoti-fuzz-probe-") as tmp:
        src, exe = Path(tmp) / "probe.cpp", Path(tmp) / "probe"
        src.write_text('#include <cstddef>\n#include <cstdint>\n'
                       'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n')
        proc = subprocess.run([cxx, "-fsanitize=fuzzer,address,undefined", str(src), "-o", str(exe)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return ("clang++ -fsanitize=fuzzer,address,undefined does not link (the compiler-rt libraries are "
                    f"missing: Debian's libclang-rt-dev): {proc.stderr.strip()[-300:]}")
        proc = subprocess.run([str(exe), "-runs=10"], capture_output=True, text=True)
        if proc.returncode != 0:
            return f"a libFuzzer probe target does not run here: {proc.stderr.strip()[-300:]}"
    return None


def build(scons: str) -> tuple[Path, list[str]]:
    """scons sanitize=fuzzer cxx=clang++: the dir of the fuzz binaries and the targets scons skipped (why)."""
    proc = subprocess.run([scons, "-Q", f"-j{os.cpu_count() or 2}", "sanitize=fuzzer", "cxx=clang++"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"run_fuzz: scons sanitize=fuzzer cxx=clang++ failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("scons: fuzz: skipping")]
    return ROOT / "build" / VARIANT / "fuzz", skipped


def parse_stats(output: str) -> dict[str, int]:
    """The -print_final_stats=1 numbers (executions, exec/s, peak RSS) and the last corpus size."""
    stats = {k: int(v) for k, v in re.findall(r"stat::(\w+):\s*(\d+)", output)}
    out = {"executions": stats.get("number_of_executed_units", 0), "exec_per_s": stats.get("average_exec_per_sec", 0),
           "peak_rss_mb": stats.get("peak_rss_mb", 0)}
    corp = re.findall(r"corp: (\d+)/", output)
    if corp:
        out["corpus_units"] = int(corp[-1])
    cov = re.findall(r"cov: (\d+) ft: (\d+)", output)
    if cov:
        out["coverage"], out["features"] = int(cov[-1][0]), int(cov[-1][1])
    return out


def run_target(binary: Path, work: Path, seeds: Path, seconds: int, runs: int | None, extra: list[str]) -> dict:
    corpus, crashes = work / "corpus" / binary.name, work / "crashes" / binary.name
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    args = [str(binary), str(corpus), str(seeds), f"-artifact_prefix={crashes}/", "-print_final_stats=1",
            f"-max_total_time={seconds}", *LIBFUZZER_LIMITS, *([f"-runs={runs}"] if runs is not None else []), *extra]
    env = dict(os.environ)
    # Stop on the first report; leaks are findings (libFuzzer checks them after each input that allocated).
    env.setdefault("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1:allocator_may_return_null=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=seconds * 3 + 120)
    wall = time.monotonic() - start
    output = proc.stdout + proc.stderr
    findings = [line for line in output.splitlines() if FINDING.search(line)]
    result = {"target": binary.name, "returncode": proc.returncode, "seconds": round(wall, 1),
              **parse_stats(output), "corpus_files": sum(1 for _ in corpus.iterdir()),
              "corpus_bytes": sum(f.stat().st_size for f in corpus.iterdir()),
              "crash_files": sorted(str(p) for p in crashes.iterdir()), "findings": findings[:20]}
    if proc.returncode != 0 or findings:
        result["log_tail"] = output[-6000:]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true", help="only check that libFuzzer targets can be built here")
    ap.add_argument("--seconds", type=int, default=60, help="time budget per target (default 60)")
    ap.add_argument("--runs", type=int, default=None, help="execution budget per target (whichever comes first)")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / VARIANT / "fuzz-work")
    ap.add_argument("--pt2", type=Path, action="append", default=[], help="a real package for the zip seeds")
    ap.add_argument("--so", type=Path, action="append", default=[], help="a real shared object for elf_scan")
    ap.add_argument("--json", type=Path, help="write the per-target results here")
    ap.add_argument("--scons", default=shutil.which("scons") or str(Path(sys.executable).with_name("scons")))
    ap.add_argument("--bin-dir", type=Path, help="run these prebuilt fuzz_* binaries instead of building")
    ap.add_argument("--seeds", type=Path, help="use this seed dir (make_seeds.py's layout) instead of generating")
    ap.add_argument("--parallel", action="store_true", help="run the targets at the same time (one core each)")
    ap.add_argument("--value-profile", action="store_true",
                    help="libFuzzer's -use_value_profile=1: guide by compared values (magic numbers, bounds)")
    args = ap.parse_args(argv)
    extra = ["-use_value_profile=1"] if args.value_profile else []

    wanted = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(wanted) - set(TARGETS))
    if unknown:
        print(f"run_fuzz: unknown target(s) {', '.join(unknown)}; the targets are {', '.join(TARGETS)}")
        return 2
    if args.bin_dir is None:
        reason = probe()
        if args.probe or reason is not None:
            print(f"run_fuzz: {reason}" if reason else "run_fuzz: clang++ builds libFuzzer targets here")
            return 0 if reason is None else 2
        bin_dir, skipped = build(args.scons)
        for line in skipped:
            print(line)
    else:
        bin_dir = args.bin_dir
    seeds = args.seeds
    if seeds is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import make_seeds

        seeds = args.work / "seeds"
        shutil.rmtree(seeds, ignore_errors=True)
        make_seeds.generate(seeds, args.pt2, args.so)
    binaries = [bin_dir / f"fuzz_{t}" for t in wanted]
    results = [{"target": b.name, "skipped": "not built (see the scons line above)"} for b in binaries
               if not b.exists()]
    present = [b for b in binaries if b.exists()]

    def run(b: Path) -> dict:
        r = run_target(b, args.work, seeds / b.name.removeprefix("fuzz_"), args.seconds, args.runs, extra)
        verdict = "FINDING" if (r["returncode"] != 0 or r["findings"]) else "clean"
        print(f"run_fuzz: {r['target']}: {verdict}: {r['executions']} executions in {r['seconds']} s "
              f"({r['exec_per_s']} exec/s), corpus {r['corpus_files']} files / {r['corpus_bytes']} bytes, "
              f"coverage {r.get('coverage', 0)}, peak RSS {r['peak_rss_mb']} MB", flush=True)
        if verdict != "clean":
            print("\n".join(r["findings"]) + "\n" + r.get("log_tail", ""), flush=True)
        return r

    if args.parallel:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, len(present))) as pool:
            results += list(pool.map(run, present))
    else:
        results += [run(b) for b in present]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    ran = [r for r in results if "skipped" not in r]
    if not ran:
        return 2
    return 1 if any(r["returncode"] != 0 or r["findings"] for r in ran) else 0


if __name__ == "__main__":
    sys.exit(main())
