"""Usage requirements, the named link rules (one test each that triggers it), and the export choice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, build_lock, scons_command

TOOLPATH = str(REPO_ROOT / "toolchain" / "scons")


def _scons(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*scons_command(), "-Q", *args], cwd=cwd, capture_output=True, text=True)


def _project(tmp_path: Path, host_build, body: str) -> None:
    """A project of its own that uses the built runtime of the default variant through our tool."""
    obj = host_build.variant_dir / "obj" / "lib"
    (tmp_path / "SConstruct").write_text(f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
env = Environment(tools=["default", "aoti_host"], toolpath=[{TOOLPATH!r}], AOTI_GEN_DIR={str(host_build.gen_dir)!r},
                  LIBS=["dl"], LINKFLAGS=["-pthread"])
usage = [dict(CPPPATH=[{str(REPO_ROOT / "runtime" / "include")!r}, {str(host_build.gen_dir / "include")!r}],
              CPPDEFINES=[("CUDA_AVAILABLE", "0")], LIBS=["stdc++", "m", "openblas", "sleef", "gomp"])]
shims = File({str(obj / "libaoti_host_shims.a")!r})
shims.attributes.aoti_role = "shims"; shims.attributes.aoti_usage = usage
runtime = File({str(obj / "libaoti_host_runtime.a")!r})
runtime.attributes.aoti_role = "runtime"; runtime.attributes.aoti_usage = usage
env["AOTI_SHIM_ARCHIVE"] = [shims]
{body}
""")


MAIN_C = """
#include "aoti_host/c_api.h"
#include <stdio.h>
#if !defined(CUDA_AVAILABLE) || CUDA_AVAILABLE != 0
#error "CUDA_AVAILABLE did not come from the runtime's usage requirements"
#endif
int main(void) { printf("ok\\n"); return 0; }
"""


def test_a_program_receives_defines_and_includes_from_the_runtime(host_build, tmp_path):
    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, "env.AotiHostProgram('prog', ['main.c'], libs=[runtime])")
    proc = _scons(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    compile_line = next(ln for ln in proc.stdout.splitlines() if "main.c" in ln and " -c " in ln)
    assert "-DCUDA_AVAILABLE=0" in compile_line and "runtime/include" in compile_line
    assert subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True).stdout == "ok\n"


def test_library_usage_requirements_are_transitive(host_build, tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "foo.h").write_text("int foo(void);\n")
    (tmp_path / "foo.c").write_text('#include "foo.h"\n#if FOO_API != 3\n#error no FOO_API\n#endif\n'
                                    "int foo(void) { return FOO_API; }\n")
    (tmp_path / "bar.c").write_text('#include "foo.h"\nint bar(void) { return foo() + FOO_API; }\n')
    (tmp_path / "main.c").write_text('#include "foo.h"\n#include "aoti_host/c_api.h"\nint bar(void);\n'
                                     "int main(void) { return bar() == 2 * FOO_API ? 0 : 1; }\n")
    _project(tmp_path, host_build, """
foo = env.AotiLibrary("foo", ["foo.c"], public=dict(CPPPATH=[Dir("inc")], CPPDEFINES=[("FOO_API", 3)]), deps=[runtime])
bar = env.AotiLibrary("bar", ["bar.c"], deps=[foo])
env.AotiHostProgram("prog", ["main.c"], libs=[bar, foo, runtime])
""")
    proc = _scons(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert subprocess.run([str(tmp_path / "prog")]).returncode == 0


def test_rule_runtime_without_host_builder(host_build, tmp_path):
    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, "env.Program('prog', ['main.c'], CPPDEFINES=[('CUDA_AVAILABLE', 0)], "
                                   "CPPPATH=usage[0]['CPPPATH'], LIBS=[runtime, 'dl'])")
    proc = _scons(tmp_path)
    assert proc.returncode == 2
    assert "[rule runtime-without-host-builder]" in proc.stderr and "fix: link programs" in proc.stderr
    assert "libaoti_host_runtime.a" in proc.stderr
    assert not (tmp_path / "prog").exists()


def test_rule_shim_archive_not_whole_archived(host_build, tmp_path):
    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, "env.AotiHostProgram('prog', ['main.c'], libs=[shims, runtime])")
    proc = _scons(tmp_path)
    assert proc.returncode == 2
    assert "[rule shim-archive-not-whole-archived]" in proc.stderr and "--whole-archive" in proc.stderr


def test_rule_conflicting_define(host_build, tmp_path):
    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build,
             "env.Append(CPPDEFINES=[('CUDA_AVAILABLE', 1)])\nenv.AotiHostProgram('prog', ['main.c'], libs=[runtime])")
    proc = _scons(tmp_path)
    assert proc.returncode == 2
    assert "CUDA_AVAILABLE=1 here, CUDA_AVAILABLE=0 from a dependency [rule conflicting-define]" in proc.stderr


def test_rule_duplicate_shim_definition(host_build, tmp_path):
    (tmp_path / "main.c").write_text(MAIN_C)
    (tmp_path / "mine.c").write_text('#include "aoti_host/shims.h"\n'
                                     "int32_t aoti_torch_device_type_cpu(void) { return 0; }\n")
    _project(tmp_path, host_build, """
mine = env.AotiLibrary("mine", ["mine.c"], deps=[runtime])
env.AotiHostProgram("prog", ["main.c"], libs=[mine, runtime])
""")
    proc = _scons(tmp_path)
    assert proc.returncode != 0
    assert "[rule duplicate-shim-definition]" in proc.stderr, proc.stdout + proc.stderr
    assert "aoti_torch_device_type_cpu: libmine.a, libaoti_host_shims.a" in proc.stderr
    assert not (tmp_path / "prog").exists()


def test_compile_commands_lists_every_translation_unit(host_build):
    with build_lock():  # test_output_modes.py rebuilds it
        db = json.loads((host_build.variant_dir / "compile_commands.json").read_text())
    files = {Path(e["file"]).name for e in db}
    assert {"tensor.cpp", "plugin.cpp", "aoti_run.cpp", "link_test.c"} <= files, files
    entry = next(e for e in db if e["file"].endswith("runtime/src/shims/tensor.cpp"))
    assert "-DCUDA_AVAILABLE=0" in entry["command"] and entry["directory"] == str(REPO_ROOT)


@pytest.mark.slow
def test_plugin_loads_from_hosts_exporting_either_way_and_not_from_neither(host_build, export_example, tmp_path):
    """export=shims (dynamic list, default) and export=all (--export-dynamic) both let a real plugin bind its
    shims; a host linked with neither fails with the loader's message."""
    pt2, _, inputs = export_example("mlp")
    import numpy as np

    np.save(tmp_path / "x.npy", inputs[0].numpy())
    obj = host_build.variant_dir / "obj"
    hosts = {"shims": host_build.aoti_run}
    for mode in ("all", "neither"):
        sub = tmp_path / mode
        sub.mkdir()
        if mode == "all":
            _project(sub, host_build, f"env['AOTI_EXPORT'] = 'all'\n"
                     f"env.AotiHostProgram('aoti-run', [File({str(obj / 'tools' / 'aoti_run.o')!r}), "
                     f"File({str(obj / 'lib' / 'libaoti_run_npy.a')!r})], "
                     "libs=[runtime], LIBS=['dl', 'stdc++', 'm'])")
            proc = _scons(sub)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "--export-dynamic" in proc.stdout and "--dynamic-list" not in proc.stdout
        else:
            # By hand (the builders refuse it): shims whole-archived but exported neither way.
            subprocess.run(["g++", "-o", str(sub / "aoti-run"), str(obj / "tools" / "aoti_run.o"),
                            str(obj / "lib" / "libaoti_run_npy.a"),  # the tool's .npy reader and writer
                            str(obj / "lib" / "libaoti_host_runtime.a"), "-Wl,--whole-archive",
                            str(obj / "lib" / "libaoti_host_shims.a"), "-Wl,--no-whole-archive", "-ldl",
                            "-lopenblas", "-lsleef", "-fopenmp", "-pthread"], check=True)
        hosts[mode] = sub / "aoti-run"
    def other_exports(exe: Path) -> set[str]:
        nm = subprocess.run(["nm", "-D", "--defined-only", str(exe)], capture_output=True, text=True).stdout
        names = {ln.split()[-1] for ln in nm.splitlines() if ln.strip()}
        return {n for n in names if not n.startswith(("aoti_torch_", "aoti_host_"))}

    # shims (default): the dynamic list exports the shims and the C API (ld adds only the odd weak template
    # instance a linked shared library also defines); export=all exports every global symbol of the program.
    assert "_IO_stdin_used" not in other_exports(hosts["shims"])
    assert "_IO_stdin_used" in other_exports(hosts["all"])
    assert len(other_exports(hosts["shims"])) < len(other_exports(hosts["all"]))
    for mode, exe in hosts.items():
        proc = subprocess.run([str(exe), str(pt2), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / f"out-{mode}")],
                              capture_output=True, text=True)
        if mode == "neither":
            assert proc.returncode == 4, proc.stderr
            # The runtime's loader names what the global scope lacks before dlopen would fail.
            assert "shim(s) this host does not provide" in proc.stderr, proc.stderr
            assert "aoti_torch_empty_strided" in proc.stderr and "--whole-archive" in proc.stderr
        else:
            assert proc.returncode == 0, (mode, proc.stderr)
            assert (tmp_path / f"out-{mode}" / "output_0.npy").exists()


def test_post_link_hook_runs_and_fails_the_build(host_build, tmp_path):
    """The hook the integrator connects `aoti-toolchain verify` to: env["AOTI_POST_LINK_HOOKS"]."""
    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, """
def refuse(path, env):
    print(f"hook saw {path.name}")
    return 3
env["AOTI_POST_LINK_HOOKS"] = [refuse]
env.AotiHostProgram("prog", ["main.c"], libs=[runtime])
""")
    proc = _scons(tmp_path)
    assert proc.returncode != 0 and "hook saw prog" in proc.stdout, proc.stdout + proc.stderr
    assert not (tmp_path / "prog").exists()
