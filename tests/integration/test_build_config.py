"""One configuration per binary: per-object config records, the post-link mixed-config check."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, VARIANT, scons_command
from toolchain.elf.config_records import (
    NOTE_TYPE,
    ConfigRecord,
    find_conflicts,
    format_conflicts,
    parse_notes,
    read_config_records,
)

INCLUDE = REPO_ROOT / "runtime" / "include"
GEN_INCLUDE = BUILD_DIR / VARIANT / "gen" / "include"  # status.h and the other headers made from the spec


@pytest.fixture(autouse=True)
def _generated_headers(host_build):
    """The C API header includes generated ones: the build that makes them comes first."""


def _compile(src: Path, *flags: str) -> Path:
    obj = src.with_suffix(".o")
    compiler = "g++" if src.suffix == ".cpp" else "gcc"
    subprocess.run([compiler, "-c", "-fPIC", f"-I{INCLUDE}", f"-I{GEN_INCLUDE}", *flags, str(src), "-o", str(obj)],
                   check=True, cwd=src.parent)
    return obj


def _sconstruct(tmp_path: Path, body: str) -> None:
    (tmp_path / "SConstruct").write_text(f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
env = Environment(tools=["default", "aoti_host"], toolpath=[{str(REPO_ROOT / "toolchain" / "scons")!r}],
                  STATIC_AND_SHARED_OBJECTS_ARE_THE_SAME=1)
{body}
""")


def _scons(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*scons_command(), "-Q"], cwd=cwd, capture_output=True, text=True)


def _two_objects(tmp_path: Path, a_flags: list[str], b_flags: list[str]) -> tuple[Path, Path]:
    # A C file that includes the C API (as a host would) and a C++ file that includes the tensor header.
    (tmp_path / "host_part.c").write_text('#include "aoti_host/c_api.h"\nint host_part(void) { return 1; }\n')
    (tmp_path / "tensor_part.cpp").write_text('#include "aoti_host/tensor.h"\nint tensor_part() { return 2; }\n')
    return _compile(tmp_path / "host_part.c", *a_flags), _compile(tmp_path / "tensor_part.cpp", *b_flags)


def test_objects_with_different_cuda_available_fail_the_check_naming_both(tmp_path):
    a, b = _two_objects(tmp_path, ["-DCUDA_AVAILABLE=0"], ["-DCUDA_AVAILABLE=1"])
    _sconstruct(tmp_path, f"env.AotiCheckConfig(env.SharedLibrary('mixed', [File({str(a)!r}), File({str(b)!r})]))")
    proc = _scons(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "[mixed-config]" in out and "CUDA_AVAILABLE (0 vs 1)" in out, out
    assert re.search(r"0: \S*host_part\.c; 1: \S*tensor_part\.cpp", out), out
    assert "fix:" in out
    assert not (tmp_path / "libmixed.so").exists(), "a binary that failed the check must not stay"

    # The same binary linked by hand: the reader (what `aoti-toolchain verify` uses) sees the same conflict.
    so = tmp_path / "by_hand.so"
    subprocess.run(["g++", "-shared", "-Wl,--gc-sections", str(a), str(b), "-o", str(so)], check=True)
    records = read_config_records(so)
    assert {Path(r.object_name).name: r.defines["CUDA_AVAILABLE"] for r in records} == {"host_part.c": "0",
                                                                            "tensor_part.cpp": "1"}
    conflicts = find_conflicts(records)
    assert [c.key for c in conflicts] == ["CUDA_AVAILABLE"]
    assert [Path(r.object_name).name for r in conflicts[0].by_value["1"]] == ["tensor_part.cpp"]
    # strip keeps the records (allocated note section).
    subprocess.run(["strip", str(so)], check=True)
    assert len(read_config_records(so)) == 2


def test_a_translation_unit_without_cuda_available_is_the_upstream_bug(tmp_path):
    """The upstream review: a test target compiled without CUDA_AVAILABLE next to the CUDA runtime."""
    a, b = _two_objects(tmp_path, ["-DCUDA_AVAILABLE=1"], [])
    _sconstruct(tmp_path, f"env.AotiCheckConfig(env.SharedLibrary('mixed', [File({str(a)!r}), File({str(b)!r})]))")
    proc = _scons(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "CUDA_AVAILABLE (1 vs unset)" in out and re.search(r"unset: \S*tensor_part\.cpp", out), out


def test_consistent_objects_pass_and_an_object_without_record_is_warned_about(tmp_path):
    a, b = _two_objects(tmp_path, ["-DCUDA_AVAILABLE=0"], ["-DCUDA_AVAILABLE=0"])
    (tmp_path / "plain.c").write_text("int plain(void) { return 3; }\n")
    c = _compile(tmp_path / "plain.c")
    _sconstruct(tmp_path, f"env.AotiCheckConfig(env.SharedLibrary('ok', [File(p) for p in {[str(a), str(b), str(c)]!r}]))")
    proc = _scons(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert (tmp_path / "libok.so").exists()
    assert "plain.o has no configuration record [rule object-without-config-record]" in out, out
    warnings = [ln for ln in out.splitlines() if "warning" in ln]
    assert len(warnings) == 1, warnings


def test_every_object_of_the_built_runtime_carries_the_variant_record(host_build):
    src = REPO_ROOT / "runtime" / "src"
    srcs = sorted(s for s in src.rglob("*.cpp") if "cuda" not in s.relative_to(src).parts)  # every layer, CPU
    for binary in (host_build.lib, host_build.aoti_run):
        records = read_config_records(binary)
        assert records, binary
        assert find_conflicts(records) == [], binary
        assert {r.defines["CUDA_AVAILABLE"] for r in records} == {"0"}
        names = {Path(r.object_name).name for r in records}
        assert "tensor.cpp" in names and "shims_core.cpp" in names, names
    lib_names = {Path(r.object_name).name for r in read_config_records(host_build.lib)}
    # Every runtime source is in the shared library (shims and runtime archives are whole-archived).
    assert {s.name for s in srcs} <= lib_names, {s.name for s in srcs} - lib_names


def test_parse_notes_skips_foreign_notes_and_formats_each_object():
    def note(name: bytes, ntype: int, desc: bytes) -> bytes:
        pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
        return len(name).to_bytes(4, "little") + len(desc).to_bytes(4, "little") + ntype.to_bytes(4, "little") \
            + pad(name) + pad(desc)

    data = note(b"GNU\0", 3, b"\x01" * 20) + note(b"AOTI\0", NOTE_TYPE, b"source=x.cu\nCUDA_AVAILABLE=1\n\0") \
        + note(b"AOTI\0", NOTE_TYPE, b"source=y.c\nCUDA_AVAILABLE=0\n\0")
    records = parse_notes(data)
    assert records == [ConfigRecord("x.cu", {"CUDA_AVAILABLE": "1"}), ConfigRecord("y.c", {"CUDA_AVAILABLE": "0"})]
    # A key only some records have conflicts with nothing (a C object has no C++ standard library).
    both = [*records, ConfigRecord("z.cpp", {"CUDA_AVAILABLE": "1", "cxx_stdlib": "libc++"})]
    conflicts = find_conflicts(both)
    assert [c.key for c in conflicts] == ["CUDA_AVAILABLE"]
    text = format_conflicts("bin", conflicts, both)
    assert "x.cu: CUDA_AVAILABLE=1" in text and "y.c: CUDA_AVAILABLE=0" in text and "z.cpp:" in text
