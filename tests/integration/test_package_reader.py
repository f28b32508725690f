"""One way to read a package: the runtime's reader (runtime/src/base/zip.cpp, driven through the pt2_probe test
program) and toolchain/pt2.py (what verify uses) make the same accept/refuse decision on every crafted
archive and hand out the same member bytes; hostile archives end in a clean refusal, never a signal."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.crafted_zips import corpus
from toolchain.errors import exit_code
from toolchain.pt2 import PackageError, open_package

CORPUS = corpus()
CRASH_CLASSES = ["zip64_locator_near_2_64", "zip64_local_offset_near_2_64"]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("crafted-zips")
    for name, case in CORPUS.items():
        (root / f"{name}.pt2").write_bytes(case.data)
    return root


def cpp_read(probe: Path, package: Path, out: Path, memory: bool = False) -> tuple[bool, str, list[tuple[str, bytes]]]:
    """(accepted, message, [(name, bytes)]) from the C++ reader; fails the test on a crash or a usage error."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    proc = subprocess.run([str(probe), *(["--memory"] if memory else []), str(package), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 3), f"pt2_probe died or failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    if proc.returncode == 3:
        return False, proc.stderr.strip(), []
    stems = sorted(p.stem for p in out.glob("*.name"))
    return True, "", [((out / f"{s}.name").read_bytes().decode(), (out / f"{s}.data").read_bytes()) for s in stems]


def py_read(package: Path) -> tuple[bool, str, list[tuple[str, bytes]]]:
    try:
        with open_package(package) as pkg:
            return True, "", [(name, pkg.read(name)) for name in pkg.members]
    except PackageError as exc:
        return False, str(exc), []


@pytest.fixture(scope="module")
def probe(host_build) -> Path:
    exe = host_build.tests_dir / "pt2_probe"
    assert exe.exists(), f"{exe} was not built"
    return exe


def test_corpus_covers_both_decisions():
    accepted = [n for n, c in CORPUS.items() if c.accepted]
    refused = [n for n, c in CORPUS.items() if not c.accepted]
    assert len(CORPUS) >= 40 and len(accepted) >= 10 and len(refused) >= 40, (len(accepted), len(refused))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_readers_agree(probe, corpus_dir, tmp_path, name):
    package = corpus_dir / f"{name}.pt2"
    expected = CORPUS[name].accepted
    py_ok, py_msg, py_members = py_read(package)
    for memory in (False, True):
        cpp_ok, cpp_msg, cpp_members = cpp_read(probe, package, tmp_path / "out", memory=memory)
        assert (cpp_ok, py_ok) == (expected, expected), f"C++: {cpp_msg}\nPython: {py_msg}"
        assert cpp_members == py_members
    if not expected:
        # Both name the file and the defect, and say what to do.
        assert str(package) in cpp_msg and str(package) in py_msg
        assert "fix:" in py_msg and ("re-" in cpp_msg)


def test_valid_archives_read_as_zipfile_reads_them(corpus_dir):
    """What both readers accept, Python's zipfile reads with the same names and bytes (the rules are
    stricter than zip, never different)."""
    for name, case in CORPUS.items():
        if not case.accepted:
            continue
        _ok, _msg, members = py_read(corpus_dir / f"{name}.pt2")
        with zipfile.ZipFile(corpus_dir / f"{name}.pt2") as zf:
            assert [(n, zf.read(n)) for n in zf.namelist()] == members, name


@pytest.mark.parametrize("weights", ["embedded", "blob"])
def test_real_export_read_alike(probe, export_example, tmp_path, weights):
    """A package from `aoti-toolchain export` (torch's writer: data descriptors, 64-byte aligned data, zip64
    end records; then members appended by Python's zipfile) is accepted by both readers, byte for byte."""
    pt2, _module, _inputs = export_example("mlp", weights)
    cpp_ok, cpp_msg, cpp_members = cpp_read(probe, pt2, tmp_path / "out")
    py_ok, py_msg, py_members = py_read(pt2)
    assert cpp_ok and py_ok, (cpp_msg, py_msg)
    assert cpp_members == py_members
    names = [n for n, _ in py_members]
    assert any(n.endswith(".so") for n in names)
    assert any(n.endswith("extra/aoti_toolchain_contract.json") for n in names)
    with zipfile.ZipFile(pt2) as zf:
        assert [(n, zf.read(n)) for n in zf.namelist()] == py_members


@pytest.mark.parametrize("name", CRASH_CLASSES)
def test_crash_class_aoti_run(host_build, corpus_dir, tmp_path, name):
    """Offsets near 2^64 once wrapped the bounds checks and crashed aoti-run with SIGSEGV."""
    package = corpus_dir / f"{name}.pt2"
    proc = subprocess.run([str(host_build.aoti_run), str(package), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    # An archive the runtime's reader refuses is bad input, as verify and inspect report it (exit_codes.toml).
    assert proc.returncode == exit_code("bad_input"), f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert str(package) in proc.stderr and "not a valid .pt2" in proc.stderr


@pytest.mark.parametrize("name", CRASH_CLASSES)
def test_crash_class_python_runtime(host_build, corpus_dir, name):
    package = corpus_dir / f"{name}.pt2"
    code = ("import sys\nfrom toolchain import runtime\nfrom toolchain.errors import ToolchainError\n"
            "try:\n    runtime.load(sys.argv[1], library_path=__import__('pathlib').Path(sys.argv[2]))\n"
            "except ToolchainError as exc:\n    print(type(exc).__name__, exc)\n    sys.exit(exc.exit_code)\n"
            "print('loaded')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(package), str(host_build.lib)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == exit_code("bad_input"), \
        f"rc {proc.returncode} (a negative code is a signal): {proc.stderr[-2000:]}"
    assert proc.stdout.split()[0] == "InputError" and "not a valid .pt2" in proc.stdout and str(package) in proc.stdout


def test_verify_refuses_what_the_runtime_refuses(corpus_dir):
    """verify's package reading (elf_members) reports a 'malformed' finding exactly for the archives the
    readers refuse (among those with a .so member, read as a package)."""
    from toolchain.elf.reader import MalformedError
    from toolchain.verify import elf_members

    checked = 0
    for name, case in CORPUS.items():
        path = corpus_dir / f"{name}.pt2"
        if not case.data.startswith(b"PK\x03\x04") or b".so" not in case.data:
            continue
        members = elf_members(path)
        malformed = len(members) == 1 and isinstance(members[0][1], MalformedError) and members[0][0] == str(path)
        assert malformed == (not case.accepted), (name, members)
        checked += 1
    assert checked >= 20


def test_hostile_archives_under_sanitizers(host_build, corpus_dir, tmp_path):
    """The reader built with AddressSanitizer and UBSan reads the whole corpus without a report."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = REPO_ROOT / "runtime"
    exe = tmp_path / "pt2_probe_asan"
    build = subprocess.run(
        [cxx, "-std=c++17", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         "-Wall", "-Wextra", "-Werror", f"-I{src / 'include'}", f"-I{src / 'src'}", f"-I{host_build.gen_dir / 'include'}", "-include", str(src / "include/aoti_host/config.h"),
         "-DCUDA_AVAILABLE=0", str(src / "tests/tools/pt2_probe.cpp"), str(src / "src/base/zip.cpp"),
         str(src / "src/base/crc32.cpp"), str(src / "src/base/mapped_file.cpp"), "-o", str(exe)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    for name, case in CORPUS.items():
        for memory in (False, True):
            ok, msg, _ = cpp_read(exe, corpus_dir / f"{name}.pt2", tmp_path / "out", memory=memory)
            assert ok == case.accepted, (name, msg)
            assert "Sanitizer" not in msg and "runtime error" not in msg, msg
