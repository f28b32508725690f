"""The build matrix: other compilers and C++ standard libraries, and real plugins through every host built.

`nox -s build` builds the cells; these tests run what a built cell produced. The clang + libc++ host is
the cross-standard-library case upstream describes: a host on libc++ loading a plugin built against
libstdc++ (Inductor's plugins always are).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, build_lock, repo_scons
from toolchain.elf.config_records import find_conflicts, read_config_records

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)

LIBCXX_VARIANT = "cpu-clang-libcxx-release"


def _has_libcxx() -> bool:
    if not shutil.which("clang++"):
        return False
    probe = subprocess.run(["clang++", "-stdlib=libc++", "-x", "c++", "-", "-o", os.devnull],
                           input="#include <string>\nint main() { std::string s = \"x\"; return (int)s.size() - 1; }\n",
                           capture_output=True, text=True)
    return probe.returncode == 0


def _built_cpu_variants() -> list[Path]:
    return sorted(p.parent.parent.parent for p in BUILD_DIR.glob("cpu-*/dist/bin/aoti-run"))


def _needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    return [ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]


@pytest.fixture(scope="session")
def libcxx_host() -> Path:
    if not _has_libcxx():
        pytest.skip("clang++ with libc++ is not installed (bash .ci/setup installs clang, libc++-dev, libc++abi-dev)")
    proc = repo_scons("-Q", f"-j{os.cpu_count() or 2}", "cxx=clang++", "stdlib=libc++")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return BUILD_DIR / LIBCXX_VARIANT


def _run_aoti(exe: Path, pt2: Path, inputs, out: Path, env=None) -> subprocess.CompletedProcess:
    args = [str(exe), str(pt2)]
    out.mkdir(parents=True, exist_ok=True)
    for i, x in enumerate(inputs):
        np.save(out / f"in{i}.npy", x.numpy())
        args += ["-i", str(out / f"in{i}.npy")]
    return subprocess.run([*args, "-o", str(out)], capture_output=True, text=True, env=env)


def _eager(module, inputs):
    import torch

    with torch.no_grad():
        res = module(*inputs)
    return [r.numpy() for r in (res if isinstance(res, (tuple, list)) else (res,))]


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["embedded", "blob"])
def test_clang_libcxx_host_runs_a_libstdcxx_plugin(libcxx_host, export_example, tmp_path, weights):
    exe = libcxx_host / "dist" / "bin" / "aoti-run"
    lib = libcxx_host / "dist" / "lib" / "libaoti_host.so"
    for binary in (exe, lib):
        needed = _needed(binary)
        assert "libc++.so.1" in needed and not any("libstdc++" in n for n in needed), needed
        records = read_config_records(binary)
        assert records and find_conflicts(records) == []
        assert {r.defines.get("cxx_stdlib") for r in records} <= {"libc++", None}
    pt2, module, inputs = export_example("mlp", weights)
    so_needed = subprocess.run(["unzip", "-l", str(pt2)], capture_output=True, text=True).stdout
    assert ".wrapper.so" in so_needed
    # Both C++ runtimes end up in the process: libc++ (the host) and libstdc++ (the plugin's scope).
    env = {**os.environ, "AOTI_HOST_LOG": "info", "LD_DEBUG": "libs"}
    proc = _run_aoti(exe, pt2, inputs, tmp_path / "out", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "libstdc++.so.6" in proc.stderr and "libc++.so.1" in proc.stderr
    for k, e in enumerate(_eager(module, inputs)):
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"output_{k}.npy"), e, rtol=1e-5, atol=1e-5)


def test_clang_libcxx_host_preloads_libstdcxx_for_a_plugin_that_does_not_list_it(libcxx_host, fake_plugin, tmp_path):
    """The `_ZSt4cerr` case: a plugin using libstdc++ without DT_NEEDED, in a host whose global scope has only
    libc++. The runtime must preload libstdc++ RTLD_GLOBAL (and say so) before the plugin binds."""
    so = fake_plugin("cxx_without_needed_libcxx", imports=["_ZSt4cerr"])
    assert not any("libstdc++" in n for n in _needed(so))
    exe = libcxx_host / "dist" / "bin" / "aoti-run"
    np.save(tmp_path / "x.npy", np.zeros((1,), np.float32))
    env = {**os.environ, "AOTI_HOST_LOG": "info"}
    proc = subprocess.run([str(exe), str(so), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env)
    assert "preloaded it RTLD_GLOBAL" in proc.stderr, proc.stderr
    assert "undefined symbol: _ZSt4cerr" not in proc.stderr


@pytest.mark.parametrize("variant", [p.name for p in _built_cpu_variants()] or ["cpu-gcc-release"])
def test_native_tests_of_every_built_cpu_variant(host_build, variant):
    """The native tests and the link test of each CPU variant present in build/ (nox -s build makes them)."""
    tests = BUILD_DIR / variant / "tests"
    with build_lock():  # no SCons run of another worker rewrites them meanwhile
        exes = sorted(p for p in tests.glob("test_*") if p.is_file() and os.access(p, os.X_OK))
        assert exes, f"{tests}: no native tests built"
        for exe in exes:
            proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, (exe.name, proc.stdout[-2000:], proc.stderr[-2000:])
        link = subprocess.run([str(tests / "link_test"), str(tests / "link_test_plugin.so")], capture_output=True,
                              text=True)
    assert link.returncode == 0 and "fake plugin bound with RTLD_NOW" in link.stdout, link.stderr


E2E_CASES = [("mlp", "embedded"), ("mlp", "blob"), ("convnet", "embedded"), ("two_outputs", "embedded")]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "weights"), E2E_CASES, ids=[f"{n}-{w}" for n, w in E2E_CASES])
def test_e2e_real_plugins_through_every_built_host(host_build, export_example, tmp_path, name, weights):
    pt2, module, inputs = export_example(name, weights)
    expected = _eager(module, inputs)
    with build_lock():  # no variant half-built by another worker's SCons run (test_sanitize.py's ASan build)
        variants = _built_cpu_variants()
        assert variants
        procs = {v: _run_aoti(v / "dist" / "bin" / "aoti-run", pt2, inputs, tmp_path / v.name) for v in variants}
    for variant in variants:
        out = tmp_path / variant.name
        proc = procs[variant]
        assert proc.returncode == 0, (variant.name, proc.stderr[-2000:])
        for k, e in enumerate(expected):
            np.testing.assert_allclose(np.load(out / f"output_{k}.npy"), e, rtol=1e-5, atol=1e-5,
                                       err_msg=variant.name)
