"""The native C++ tests, built by SCons as host programs, run one by one.

The list comes from the sources (runtime/tests/test_*.cpp, which runtime/SConscript builds one program
each from), never from what happens to be in build/ when pytest collects: a test whose program was not
built fails instead of silently dropping out."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT

NATIVE = sorted(p.stem for p in (REPO_ROOT / "runtime" / "tests").glob("test_*.cpp"))


def test_the_native_test_list_is_not_empty():
    assert {"test_tensor", "test_npy", "test_fallbacks", "test_packed_gemm", "test_constants"} <= set(NATIVE), NATIVE


def _run(host_build, name: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    exe = host_build.tests_dir / name
    assert exe.is_file(), f"{exe} was not built (runtime/tests/{name}.cpp exists; runtime/SConscript builds each)"
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("name", NATIVE)
def test_native(host_build, name):
    proc = _run(host_build, name)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _has_avx512f() -> bool:
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " avx512f" in line for line in f)


@pytest.mark.parametrize("fast", ["default", "off"])
def test_packed_gemm_kernel_choice(host_build, fast):
    """The AVX-512 GEMM kernel is chosen at run time: the native test asserts its call counter (> 0 where
    the CPU has avx512f, 0 under AOTI_HOST_FAST_GEMM=0 or without it); here both settings run and the
    printed choice is checked against /proc/cpuinfo, so a runtime that never takes the kernel fails on an
    AVX-512 machine."""
    env = {k: v for k, v in os.environ.items() if k != "AOTI_HOST_FAST_GEMM"}
    if fast == "off":
        env["AOTI_HOST_FAST_GEMM"] = "0"
    proc = _run(host_build, "test_packed_gemm", env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expect = "yes" if fast == "default" and _has_avx512f() else "no"
    assert f"expected the AVX-512 kernel: {expect}" in proc.stdout, proc.stdout[-3000:]
    calls = int(proc.stdout.split("packed GEMM: ")[1].split()[0])
    assert (calls > 0) if expect == "yes" else (calls == 0), proc.stdout[-3000:]
