"""The SCons post-link step runs the checks engine of verify (toolchain.verify.check_elf) once on every
binary it links (toolchain/scons/checks.py); an error fails the link."""

from __future__ import annotations

import subprocess

from tests.conftest import scons_command
from tests.integration import elf_builders as eb
from toolchain.elf import reader
from toolchain.scons.checks import check_linked, post_link_check


def test_post_link_check_fails_on_an_error_and_passes_clean_binaries(tmp_path, capsys, host_build):
    bad = eb.build(tmp_path, "bad", imports=["no_such_symbol_s"], flags=["-Wl,-z,noexecstack"])
    assert post_link_check(bad, {}, kind="auto") == 1
    err = capsys.readouterr().err
    assert "[unresolved-symbol]" in err and "no_such_symbol_s" in err and "fix:" in err
    assert post_link_check(host_build.lib, {"AOTI_VERIFY_PROFILE": "debian12"}) == 0
    assert "profile debian12" in capsys.readouterr().out


def test_each_linked_binary_is_parsed_once(host_build):
    """The post-link step reads the binary once: the engine, the shim exports, the configuration records and
    the duplicate-shim scope all use that one parse (libraries it needs are read by the resolver)."""
    reader.PARSES.clear()
    res, elf = check_linked(host_build.lib, {"AOTI_VERIFY_PROFILE": "host"})
    assert elf is not None and not [f for f in res.findings if f.severity == "error"], res.findings
    assert reader.PARSES[str(host_build.lib)] == 1, dict(reader.PARSES)


def test_build_tree_runpath_is_a_warning_in_the_build_only(tmp_path, capsys):
    lib = eb.build(tmp_path, "rp", flags=["-Wl,-z,noexecstack", f"-Wl,-rpath,{tmp_path}", "-Wl,--enable-new-dtags"])
    assert post_link_check(lib, {}, kind="library") == 1
    assert post_link_check(lib, {"AOTI_CUDA_USAGE": {"RPATH": [str(tmp_path)]}}, kind="library") == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "allowed in the build tree" in err


def test_scons_link_runs_verify(host_build, tmp_path):
    """The post-link check as the SCons tool runs it, on a program linked in a project of its own (the shared
    build/ is never touched: other tests use its binaries)."""
    from tests.integration.test_build_rules import MAIN_C, _project

    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, """
env.AotiHostProgram("prog", ["main.c"], libs=[runtime])
""")
    proc = subprocess.run([*scons_command(), "-Q"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"aoti-check: {tmp_path / 'prog'}: pass" in proc.stdout, proc.stdout
