"""The SCons build: link rules, the post-link check, generated files, null builds, options."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, build_lock, scons_command


def scons(*args, cwd=REPO_ROOT, check=False):
    with build_lock() if cwd == REPO_ROOT else contextlib.nullcontext():  # the checkout's build/: one at a time
        proc = subprocess.run([*scons_command(), *map(str, args)], cwd=cwd, capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_link_test_passes(host_build):
    """The generated link test: dlsym of every spec shim, then a fake plugin bound with RTLD_NOW."""
    proc = subprocess.run([str(host_build.tests_dir / "link_test"), str(host_build.tests_dir / "link_test_plugin.so")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "fake plugin bound with RTLD_NOW" in proc.stdout


def test_without_whole_archive_the_check_and_the_link_test_fail(host_build, tmp_path):
    shims = host_build.variant_dir / "obj" / "lib" / "libaoti_host_shims.a"
    gen = host_build.gen_dir
    shutil.copy(gen / "src" / "link_test.c", tmp_path / "link_test.c")
    # 1. The post-link check catches it in an SCons build that links the shims as a plain library.
    (tmp_path / "SConstruct").write_text(f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
env = Environment(tools=["default", "aoti_host"], toolpath=[{str(REPO_ROOT / "toolchain" / "scons")!r}],
                  CPPPATH=[{str(REPO_ROOT / "runtime" / "include")!r}, {str(gen / "include")!r}])
prog = env.Program("link_test_nowhole", ["link_test.c"],
                   LIBS=[File({str(shims)!r}), "dl", "stdc++", "m"],
                   LINKFLAGS=["-pthread", "-Wl,--dynamic-list={gen / "link" / "host.dynlist"}"])
env.AotiCheckExports(prog)
""")
    # 1a. The link rule refuses it while reading the build files, with its id and fix.
    proc = scons("-Q", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "[rule shim-archive-not-whole-archived]" in out and "fix: " in out, out
    assert not (tmp_path / "link_test_nowhole").exists()
    # 1b. Waived, the link happens and the post-link check fails it.
    sconstruct = tmp_path / "SConstruct"
    sconstruct.write_text(sconstruct.read_text().replace(
        'LINKFLAGS=', 'AOTI_WAIVE_RULES=["shim-archive-not-whole-archived"], LINKFLAGS='))
    proc = scons("-Q", cwd=tmp_path)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "[shim-not-exported]" in out
    assert "does not export shim aoti_torch_empty_strided (not in its dynamic symbol table)" in out
    assert "--whole-archive" in out
    assert not (tmp_path / "link_test_nowhole").exists(), "a binary that failed the check must not stay"
    # 2. The same program linked by hand (no check) fails the link test at run time.
    exe = tmp_path / "link_test_by_hand"
    subprocess.run(["gcc", "-I", str(gen / "include"), "-I", str(REPO_ROOT / "runtime" / "include"),
                    str(gen / "src" / "link_test.c"), str(shims), "-ldl", "-lstdc++", "-lm", "-pthread",
                    f"-Wl,--dynamic-list={gen / 'link' / 'host.dynlist'}", "-o", str(exe)], check=True)
    run = subprocess.run([str(exe), str(host_build.tests_dir / "link_test_plugin.so")], capture_output=True, text=True)
    assert run.returncode == 1
    assert "shim not exported by this program: aoti_torch_clone" in run.stderr
    assert "does not load" in run.stderr


def test_null_build_does_nothing(host_build):
    """Behaviour only: nothing is out of date after a build. Its speed (<= 2 s for the CPU and CUDA variants
    together) is measured by bench/bench_build.py, not asserted here (a loaded CI machine is not a clock)."""
    scons("-Q", check=True)
    q = scons("-q")
    assert q.returncode == 0, "scons -q says something is out of date after a full build"
    dry = scons("-n", "-Q")
    # FACTS.md: `scons -n -Q` still prints "scons: `X' is up to date." lines; no command may appear.
    commands = [ln for ln in dry.stdout.splitlines() if ln and not re.match(r"scons: `.*' is up to date\.", ln)]
    assert commands == [], commands


def test_help_documents_options():
    out = scons("-h").stdout
    for opt in ("cuda:", "cuda_arch:", "nvcc:", "cxx:", "stdlib:", "mode:", "export:", "build_dir:", "cache_dir:",
                "spec_dir:", "deps_prefix:"):
        assert opt in out, opt
    assert "auto" in out and "debug" in out
    # the project's options come first: SCons's own (e.g. --debug=TYPE) are behind `scons -H`
    assert "--debug=TYPE" not in out and "scons -H" in out
    assert out.index("aoti-toolchain:") < out.index("cuda:")


def test_unknown_option_is_refused_with_a_suggestion(tmp_path):
    proc = scons("-Q", "mdoe=debug", f"build_dir={tmp_path}")
    assert proc.returncode == 2
    assert "unknown option mdoe=debug" in proc.stdout and "did you mean mode" in proc.stdout


@pytest.mark.parametrize("driver, fix", [("gcc", "g++"), ("clang", "clang++")])
def test_c_driver_as_cxx_is_refused_before_any_compile(tmp_path, driver, fix):
    """cxx=clang compiles C++ but links without the C++ runtime; say so instead of failing at link time."""
    if not shutil.which(driver):
        pytest.skip(f"{driver} not installed")
    proc = scons("-Q", f"cxx={driver}", f"build_dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cxx={driver} is a C compiler driver; pass cxx={fix}" in proc.stdout + proc.stderr
    assert not any(tmp_path.iterdir())


def test_deps_prefix_reaches_compiles_and_links(tmp_path):
    """deps_prefix=DIR (libraries unpacked outside the system paths, e.g. from .debs on a machine without
    apt): DIR/include on every compile, DIR/lib on every link, the runtime's consumers included."""
    prefix = tmp_path / "prefix"
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    proc = scons("-n", "-Q", f"deps_prefix={prefix}", f"build_dir={tmp_path / 'build'}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    compiles = [ln for ln in proc.stdout.splitlines() if " -c " in ln and ln.split()[-1].endswith(".cpp")]
    links = [ln for ln in proc.stdout.splitlines() if " -o " in ln and " -c " not in ln and "-lopenblas" in ln]
    assert compiles and all(f"-I{prefix}/include" in ln for ln in compiles)
    assert any("libaoti_host.so" in ln for ln in links) and any("aoti-run" in ln for ln in links)
    assert all(f"-L{prefix}/lib" in ln for ln in links)


def test_deps_prefix_that_is_not_a_directory_is_refused(tmp_path):
    proc = scons("-Q", f"deps_prefix={tmp_path / 'nope'}", f"build_dir={tmp_path / 'build'}")
    assert proc.returncode == 2
    assert "deps_prefix:" in proc.stdout and "is not a directory" in proc.stdout
    assert not (tmp_path / "build").exists()


def _compiled_objects(output: str) -> set[str]:
    return {Path(m).name for m in re.findall(r"-o (\S+\.os) -c", output)}


@pytest.mark.slow
@pytest.mark.long  # two scratch builds of the runtime: minutes
def test_spec_edit_rebuilds_exactly_the_dependents(tmp_path):
    spec = tmp_path / "spec"
    shutil.copytree(REPO_ROOT / "toolchain" / "spec", spec, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    build = tmp_path / "build"
    args = ["-Q", f"-j{os.cpu_count() or 2}", f"spec_dir={spec}", f"build_dir={build}"]
    scons(*args, check=True)
    assert scons("-q", *args[2:]).returncode == 0

    # An optional entry point becomes required: only entry_points.h changes.
    text = (spec / "entry_points.toml").read_text()
    block = re.search(r'name = "AOTInductorGetLastError"\n(?:.*\n)*?required = false', text)
    assert block, "spec layout changed; update this test"
    edited = text[: block.start()] + block.group(0).replace("required = false", "required = true") + text[block.end():]
    (spec / "entry_points.toml").write_text(edited)
    out = scons(*args, check=True).stdout
    assert "aoti-codegen: wrote entry_points.h" in out
    rebuilt = _compiled_objects(out)
    assert {"plugin.os", "method.os", "program.os", "c_api.os"} <= rebuilt, rebuilt
    assert not rebuilt & {"tensor.os", "shims_core.os", "shims_cpu.os", "log.os", "zip.os", "npy.os"}, rebuilt

    # A spec edit that changes no generated file (a comment): codegen runs, writes nothing, nothing rebuilds.
    (spec / "shims.toml").write_text((spec / "shims.toml").read_text() + "\n# a comment\n")
    out = scons(*args, check=True).stdout
    assert "aoti-codegen:" in out and "wrote" not in out, out
    assert _compiled_objects(out) == set()
    assert " -o " not in out.replace("aoti-codegen", ""), out

    # Nothing changed: nothing runs.
    assert scons("-q", *args[2:]).returncode == 0
