"""aoti-run built with AddressSanitizer + UndefinedBehaviorSanitizer (`scons sanitize=address`) on hostile
packages: every one is refused with the exit code of a malformed package and a message naming the file, with
no sanitizer report (memory error, leak or undefined behaviour), and a valid package still runs and gives
torch's result.

Leak checking is on with no suppressions: the runtime, the dlopened torch plugin, OpenBLAS and libgomp leave
no report on these runs (measured with gcc 12's libasan); a report that appears is a finding to fix or, for
a library outside the project, to suppress with a commented LSAN_OPTIONS=suppressions= file."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, repo_scons

sys.path.insert(0, str(REPO_ROOT / "runtime" / "fuzz"))
import make_seeds  # noqa: E402

from tests.integration import crafted_zips  # noqa: E402

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)

ASAN_VARIANT = "cpu-gcc-release-asan"
SANITIZER_EXIT = 86  # a sanitizer report exits with this, distinct from every exit code aoti-run uses
REPORT_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "SUMMARY: ")


def _sanitizer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"detect_leaks=1:exitcode={SANITIZER_EXIT}:abort_on_error=0:strict_string_checks=1"
    env["UBSAN_OPTIONS"] = f"halt_on_error=1:print_stacktrace=1:exitcode={SANITIZER_EXIT}"
    return env


@pytest.fixture(scope="module")
def asan_run() -> Path:
    """build/cpu-gcc-release-asan/dist/bin/aoti-run, brought up to date."""
    if not shutil.which("g++"):
        pytest.skip("g++ is not installed")
    probe = subprocess.run(["g++", "-fsanitize=address,undefined", "-x", "c++", "-", "-o", os.devnull],
                           input="int main() { return 0; }\n", capture_output=True, text=True)
    if probe.returncode != 0:
        reason = f"g++ -fsanitize=address,undefined does not link here (libasan/libubsan missing): {probe.stderr[-300:]}"
        print(f"\nskipping the ASan tests: {reason}")
        pytest.skip(reason)
    proc = repo_scons("-Q", f"-j{os.cpu_count() or 2}", "sanitize=address")
    assert proc.returncode == 0, f"scons sanitize=address failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    exe = BUILD_DIR / ASAN_VARIANT / "dist" / "bin" / "aoti-run"
    assert exe.exists()
    return exe


def malformed_package_exit_code(status: str = "AOTI_HOST_INVALID_PROGRAM") -> int:
    """The exit code aoti-run gives a package the runtime refuses with `status`: AOTI_HOST_INVALID_ARGUMENT for a
    file that is no readable archive (not a zip, truncated, malformed records), AOTI_HOST_INVALID_PROGRAM for an
    archive whose members it refuses (a CRC-32 that does not match); from the exit-code table where the project
    has one, else 3 and 4 ("bad input", "the plugin does not load")."""
    table = REPO_ROOT / "toolchain" / "spec" / "exit_codes.toml"
    if table.exists():
        import tomllib

        for entry in tomllib.loads(table.read_text())["code"]:
            if status in entry.get("statuses", []):
                return int(entry["code"])
    return 3 if status == "AOTI_HOST_INVALID_ARGUMENT" else 4


def _run(exe: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=_sanitizer_env(),
                          timeout=300)


def _assert_no_report(p: subprocess.CompletedProcess) -> None:
    found = [m for m in REPORT_MARKERS if m in p.stderr]
    assert p.returncode != SANITIZER_EXIT and not found, f"sanitizer report (exit {p.returncode}):\n{p.stderr[-6000:]}"


def _rewrite(src: Path, dst: Path, transform) -> Path:
    dst.write_bytes(transform(bytearray(src.read_bytes())))
    return dst


def _member_offset(pkg: Path, suffix: str) -> tuple[int, int]:
    """(offset of the member's data, its size) in the package."""
    with zipfile.ZipFile(pkg) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    raw = pkg.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def hostile_packages(valid: Path, out: Path) -> dict[str, Path]:
    """Crafted packages: the crash classes of the old reader, defects of a real package, and every refused
    archive of the package readers' differential corpus."""
    crafted: dict[str, Path] = {}
    for name, data in make_seeds.regressions()["zip"].items():
        crafted[name] = out / name
        crafted[name].write_bytes(data)
    so_off, so_size = _member_offset(valid, ".so")

    def forge_crc(b: bytearray) -> bytearray:
        b[so_off + so_size // 2] ^= 0xFF  # the plugin's bytes change, the declared CRC-32 does not
        return b

    def prepend(b: bytearray) -> bytearray:
        return bytearray(b"#!/bin/sh\nexit 0\n") + b

    def count_2_32(b: bytearray) -> bytearray:
        eocd = bytes(b).rfind(b"PK\x05\x06")
        struct.pack_into("<HH", b, eocd + 8, 0xFFFF, 0xFFFF)
        return b

    for name, fn in (("forged_crc.pt2", forge_crc), ("prepended.pt2", prepend), ("bad_count.pt2", count_2_32),
                     ("truncated.pt2", lambda b: b[: len(b) // 2]), ("empty.pt2", lambda b: bytearray())):
        crafted[name] = _rewrite(valid, out / name, fn)
    # The differential test's corpus: every class the package readers refuse, as a whole archive.
    for name, case in crafted_zips.corpus().items():
        if not case.accepted:
            crafted[f"{name}.pt2"] = out / f"{name}.pt2"
            crafted[f"{name}.pt2"].write_bytes(case.data)
    return crafted


@pytest.fixture(scope="module")
def mlp(export_example):
    return export_example("mlp", "embedded")


def test_asan_aoti_run_refuses_every_hostile_package(asan_run, mlp, tmp_path):
    pt2, _module, inputs = mlp
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    archive, member = (malformed_package_exit_code(s) for s in ("AOTI_HOST_INVALID_ARGUMENT", "AOTI_HOST_INVALID_PROGRAM"))
    failures = []
    cases = hostile_packages(pt2, tmp_path)
    for name, pkg in cases.items():
        want = member if "forged_crc" in name else archive  # a forged CRC-32 is found reading the member
        p = _run(asan_run, pkg, "-i", x, "-o", tmp_path / "out")
        _assert_no_report(p)
        if p.returncode != want or pkg.name not in p.stderr:
            failures.append(f"{name}: exit {p.returncode} (expected {want}): {p.stderr.strip()[-400:]}")
    print(f"\n{len(cases)} hostile packages through the ASan aoti-run: each refused with exit {archive} (a damaged "
          f"archive) or {member} (a forged CRC-32), no report")
    assert not failures, "not refused with the expected exit naming the package:\n" + "\n".join(failures)


def test_asan_aoti_run_runs_a_valid_package(asan_run, mlp, tmp_path, torch):
    pt2, module, inputs = mlp
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    p = _run(asan_run, pt2, "-i", x, "-o", tmp_path / "out")
    _assert_no_report(p)
    assert p.returncode == 0, p.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    with torch.no_grad():
        want = module(*inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_asan_aoti_run_reports_a_real_memory_error(asan_run, tmp_path):
    """The check above can fail: the same build and options turn a heap overflow into a report and exit 86.
    A preloaded library overflows a heap buffer when aoti-run starts."""
    src = tmp_path / "overflow.c"
    src.write_text("#include <stdlib.h>\n#include <string.h>\n"
                   "__attribute__((constructor)) static void overflow(void) {\n"
                   "  char* volatile p = malloc(8); memset(p, 1, 9); free(p); }\n")
    lib = tmp_path / "liboverflow.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-fsanitize=address", "-o", str(lib), str(src)], check=True)
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = _sanitizer_env()
    env["LD_PRELOAD"] = f"{libasan}:{lib}"  # ASan's runtime must come first in the process
    p = subprocess.run([str(asan_run), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == SANITIZER_EXIT and "heap-buffer-overflow" in p.stderr, p.stderr[-3000:]


def _scons(*args: str) -> subprocess.CompletedProcess:
    return repo_scons(*args, timeout=300)


def test_sanitize_is_part_of_the_variant_and_reaches_every_compile_and_link(tmp_path):
    proc = _scons("-n", "-Q", "sanitize=address", f"build_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    compiles = [ln for ln in lines if " -c " in ln and ln.split()[-1].endswith(".cpp")]
    links = [ln for ln in lines if ln.startswith("g++ -o ") and " -c " not in ln]
    assert compiles and links
    for ln in compiles + links:
        assert "-fsanitize=address" in ln and "-fsanitize=undefined" in ln and "-fno-sanitize-recover=undefined" in ln, ln
        assert f"{tmp_path}/{ASAN_VARIANT}/" in ln or f"{tmp_path.name}/{ASAN_VARIANT}/" in ln, ln


def test_sanitize_fuzzer_needs_clang_and_says_so(tmp_path):
    proc = _scons("-Q", "sanitize=fuzzer", "cxx=g++", f"build_dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sanitize=fuzzer needs libFuzzer, which only clang has" in proc.stdout and "cxx=clang++" in proc.stdout
    assert not any(tmp_path.iterdir())


def test_help_documents_sanitize():
    out = _scons("-h").stdout
    assert "sanitize:" in out and "fuzzer" in out and "address" in out
