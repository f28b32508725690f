"""The runtime's parsers under libFuzzer + ASan + UBSan (runtime/fuzz): each target is built with clang
(`scons sanitize=fuzzer cxx=clang++`) and runs for AOTI_FUZZ_SECONDS (default 6) from a generated seed corpus,
which includes every input that once crashed a reader. Any crash, leak, UB report, timeout or out-of-memory
fails; the executions run are printed (`pytest -s`). `nox -s fuzz_native` runs the same targets for longer."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import repo_scons

ROOT = Path(__file__).resolve().parents[2]
RUN_FUZZ = ROOT / "runtime" / "fuzz" / "run_fuzz.py"
# every target the sources define (runtime/fuzz/<name>_target.cpp), so a new one cannot go untested
TARGETS = sorted(p.name.removesuffix("_target.cpp") for p in (ROOT / "runtime" / "fuzz").glob("*_target.cpp"))
SECONDS = int(os.environ.get("AOTI_FUZZ_SECONDS", "6"))

sys.path.insert(0, str(ROOT / "runtime" / "fuzz"))
import make_seeds  # noqa: E402

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)


@pytest.fixture(scope="module")
def libfuzzer() -> None:
    proc = subprocess.run([sys.executable, str(RUN_FUZZ), "--probe"], capture_output=True, text=True)
    if proc.returncode != 0:
        reason = proc.stdout.strip() or proc.stderr.strip()
        print(f"\nskipping the native fuzz targets: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def mlp_package(export_example) -> Path:
    pt2, _module, _inputs = export_example("mlp", "embedded")
    return pt2


@pytest.fixture(scope="module")
def fuzz_results(libfuzzer, host_build, mlp_package, tmp_path_factory) -> dict[str, dict]:
    """One run of every target (build, seeds, SECONDS each), shared by the per-target tests. The zip target is
    seeded with a real export too, the ELF scan with the build's test plugin."""
    work = tmp_path_factory.mktemp("fuzz-work")
    out = work / "results.json"
    # the fuzz variant built under the build lock (no other worker's SCons run or reader of build/ meanwhile);
    # run_fuzz.py's own build of it is then a null build
    built = repo_scons("-Q", f"-j{os.cpu_count() or 2}", "sanitize=fuzzer", "cxx=clang++")
    assert built.returncode == 0, f"scons sanitize=fuzzer failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    so = host_build.tests_dir / "link_test_plugin.so"
    proc = subprocess.run([sys.executable, str(RUN_FUZZ), "--seconds", str(SECONDS), "--work", str(work),
                           "--json", str(out), "--pt2", str(mlp_package), *(["--so", str(so)] if so.exists() else [])],
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout[-8000:])
    assert out.exists(), f"run_fuzz.py wrote no results (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return {r["target"].removeprefix("fuzz_"): r for r in json.loads(out.read_text())}


def test_every_target_ran(fuzz_results):
    assert {"json", "npy", "elf_scan", "zip", "contract"} <= set(TARGETS)
    assert sorted(fuzz_results) == TARGETS, "run_fuzz.py must run every target in runtime/fuzz"


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_clean(fuzz_results, target):
    r = fuzz_results[target]
    # runtime/fuzz/SConscript builds every target: a binary missing after the build is a failure, not a skip
    assert "skipped" not in r, f"fuzz_{target} was not run: {r['skipped']}"
    print(f"\nfuzz_{target}: {r['executions']} executions in {r['seconds']} s ({r['exec_per_s']} exec/s), "
          f"corpus {r['corpus_files']} files")
    assert r["returncode"] == 0 and not r["findings"], (
        f"fuzz_{target} found something; the input is in {r['crash_files']}:\n" + "\n".join(r["findings"]) + "\n"
        + r.get("log_tail", ""))
    assert r["executions"] >= 1000, f"fuzz_{target} ran only {r['executions']} inputs in {r['seconds']} s"


def test_regression_inputs_are_in_the_seeds(tmp_path):
    """Every input that once crashed a reader is replayed by each run of its target."""
    make_seeds.generate(tmp_path, [], [])
    for target, files in make_seeds.regressions().items():
        for name, data in files.items():
            assert (tmp_path / target / name).read_bytes() == data


@pytest.mark.parametrize("name", sorted(make_seeds.regressions()["npy"]))
def test_npy_whose_strides_overflow_is_refused(host_build, mlp_package, tmp_path, name):
    """fuzz_npy found it: a 0 dim kept the element count at 0 while the strides (products of the other dims)
    overflowed int64. aoti-run refuses the input with exit 3, naming the file."""
    bad = tmp_path / name
    bad.write_bytes(make_seeds.regressions()["npy"][name])
    p = subprocess.run([str(host_build.aoti_run), str(mlp_package), "-i", str(bad), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert p.returncode == 3, p.stderr
    assert name in p.stderr and "overflows int64" in p.stderr


def test_numpy_reads_what_the_npy_seeds_hold(tmp_path):
    """The npy seeds are real numpy files (so the fuzzer starts from what users give), not hand-made bytes."""
    files = make_seeds.npy_files()
    for name, data in files.items():
        (tmp_path / f"{name}.npy").write_bytes(data)
        np.load(tmp_path / f"{name}.npy")
    assert len(files) >= 10


def _elf_with_shared_names(name_len: int, symbols: int) -> bytes:
    """An ELF64 image whose .dynsym holds `symbols` undefined symbols that all name one `name_len`-byte
    string: each copied out, the names are symbols * name_len bytes from a file of about name_len + 24 *
    symbols bytes."""
    strtab = b"\0" + b"n" * name_len + b"\0"
    sym = struct.pack("<IBBHQQ", 1, (1 << 4) | 2, 0, 0, 0, 0)  # GLOBAL FUNC, undefined
    dynsym = bytes(24) + sym * symbols
    str_off, sym_off = 64, 64 + len(strtab)
    sh_off = sym_off + len(dynsym)
    shdrs = bytes(64)
    shdrs += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0)  # SHT_STRTAB
    shdrs += struct.pack("<IIQQQQIIQQ", 0, 11, 0, 0, sym_off, len(dynsym), 1, 1, 8, 24)  # SHT_DYNSYM
    ehdr = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sh_off, 0, 64, 0, 0,
                                                           64, 3, 0)
    return ehdr + strtab + dynsym + shdrs


def malformed_program_exit_code() -> int:
    from tests.integration.test_sanitize import malformed_package_exit_code

    return malformed_package_exit_code()


@pytest.mark.parametrize("case", ["no_section_headers", "shared_names"])
def test_elf_scan_refuses_crafted_plugins(host_build, tmp_path, case):
    """The import scan that runs before dlopen: an ELF without section headers (the scan copied 0 bytes into a
    null vector: UB) and one whose symbols all share one long name (copying each made 200 KB of file into
    ~800 MB of names) are refused by aoti-run, naming the file, instead of crashing or exhausting memory."""
    if case == "no_section_headers":
        data, why = make_seeds.regressions()["elf_scan"]["regress_no_section_headers.so"], "section headers missing"
    else:
        data, why = _elf_with_shared_names(100_000, 8_000), "symbol names overlap far more than a linker writes"
    so = tmp_path / f"{case}.so"
    so.write_bytes(data)
    p = subprocess.run([str(host_build.aoti_run), str(so), "-o", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == malformed_program_exit_code(), p.stderr
    assert so.name in p.stderr and why in p.stderr, p.stderr
