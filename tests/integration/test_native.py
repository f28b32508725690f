"""The native C++ tests, built by SCons as host programs, run one by one."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import BUILD_DIR, VARIANT

NATIVE = sorted(p.name for p in (BUILD_DIR / VARIANT / "tests").glob("test_*") if p.is_file()) or [
    "test_tensor", "test_npy", "test_fallbacks"]


@pytest.mark.parametrize("name", NATIVE)
def test_native(host_build, name):
    exe = host_build.tests_dir / name
    assert exe.exists(), f"{exe} was not built"
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
