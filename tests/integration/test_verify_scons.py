"""The SCons build runs verify on every binary it links (toolchain/verify/scons_hook.py via the post-link
hooks of toolchain/scons/checks.py); an error fails the link."""

from __future__ import annotations

import subprocess

from tests.conftest import scons_command
from tests.integration import elf_builders as eb
from toolchain.verify.scons_hook import post_link_verify


def test_hook_fails_on_an_error_and_passes_clean_binaries(tmp_path, capsys, host_build):
    bad = eb.build(tmp_path, "bad", imports=["no_such_symbol_s"], flags=["-Wl,-z,noexecstack"])
    assert post_link_verify(bad, {}) == 1
    err = capsys.readouterr().err
    assert "[unresolved-symbol]" in err and "no_such_symbol_s" in err and "fix:" in err
    assert post_link_verify(host_build.lib, {"AOTI_VERIFY_PROFILE": "debian12"}) == 0
    assert "profile debian12" in capsys.readouterr().out


def test_scons_link_runs_verify(host_build, tmp_path):
    """The hook as SConstruct connects it, on a program linked in a project of its own (the shared build/
    is never touched: other tests use its binaries)."""
    from tests.integration.test_build_rules import MAIN_C, _project

    (tmp_path / "main.c").write_text(MAIN_C)
    _project(tmp_path, host_build, """
from toolchain.verify.scons_hook import post_link_verify
env.Append(AOTI_POST_LINK_HOOKS=[post_link_verify])
env.AotiHostProgram("prog", ["main.c"], libs=[runtime])
""")
    proc = subprocess.run([*scons_command(), "-Q"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"aoti-verify: {tmp_path / 'prog'}: pass" in proc.stdout, proc.stdout
