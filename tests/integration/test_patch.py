"""aoti-toolchain patch: planned, proven (verify + RTLD_NOW dlopen probe in a subprocess), written once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration import elf_builders as eb
from toolchain.elf.reader import read_elf
from toolchain.verify import verify_paths


def patch(*args):
    return subprocess.run([sys.executable, "-m", "toolchain", "patch", *map(str, args)], capture_output=True, text=True)


def leftovers(d):
    return [p.name for p in d.iterdir() if p.name.startswith(".")]


@pytest.fixture
def d(tmp_path):
    return tmp_path


def test_add_needed_appends_and_twice_changes_nothing(d):
    so = eb.build(d, "p", imports=["puts"], flags=["-Wl,-z,noexecstack"])
    before = read_elf(so).needed
    r = patch(so, "--add-needed", "libm.so.6", "--add-needed", "libz.so.1", "-o", d / "out.so")
    assert r.returncode == 0, r.stderr
    assert read_elf(d / "out.so").needed == (*before, "libm.so.6", "libz.so.1")
    assert read_elf(so).needed == before  # the original is untouched
    r = patch(d / "out.so", "--add-needed", "libm.so.6", "-o", d / "out2.so")
    assert r.returncode == 0 and "nothing to change" in r.stdout
    assert (d / "out2.so").read_bytes() == (d / "out.so").read_bytes()
    assert leftovers(d) == []


def test_clear_execstack_in_place_keeps_the_original(d):
    so = eb.build(d, "exe", flags=["-Wl,-z,execstack"])
    original = so.read_bytes()
    assert read_elf(so).exec_stack
    r = patch(so, "--clear-execstack", "--in-place")
    assert r.returncode == 0, r.stderr
    assert not read_elf(so).exec_stack
    assert (d / "exe.so.orig").read_bytes() == original
    assert "exec-stack" not in {f.rule for f in verify_paths([so]).findings}
    mtime = so.stat().st_mtime_ns
    r = patch(so, "--clear-execstack", "--in-place")
    assert r.returncode == 0 and "nothing to change" in r.stdout and so.stat().st_mtime_ns == mtime


def test_fix_repairs_runpath_and_execstack(d):
    so = eb.build(d, "rp", flags=["-Wl,-z,execstack", "-Wl,-rpath,/opt/build-host/lib", "-Wl,--enable-new-dtags"])
    assert {"unsafe-runpath", "exec-stack"} <= {f.rule for f in verify_paths([so]).findings}
    r = patch(so, "--fix", "-o", d / "fixed.so")
    assert r.returncode == 0, r.stderr
    elf = read_elf(d / "fixed.so")
    assert elf.runpath == ("$ORIGIN",) and not elf.rpath and not elf.exec_stack
    assert verify_paths([d / "fixed.so"]).findings == []


def test_contradictory_operations_are_refused(d):
    so = eb.build(d, "rp2", flags=["-Wl,-z,noexecstack", "-Wl,-rpath,/opt/x", "-Wl,--enable-new-dtags"])
    r = patch(so, "--fix", "--set-runpath", "/opt/y", "-o", d / "o.so")
    assert r.returncode == 2 and "contradictory" in r.stderr and not (d / "o.so").exists()
    r = patch(so, "--clear-execstack", "-o", d / "o.so", "--in-place")
    assert r.returncode == 2 and not (d / "o.so").exists()
    r = patch(so, "--clear-execstack")
    assert r.returncode == 2 and "-o OUT" in r.stderr
    r = patch(so, "--add-needed", "libnot-on-this-system.so.9", "-o", d / "o.so")
    assert r.returncode == 2 and "would not find" in r.stderr
    assert leftovers(d) == []


def test_result_failing_verify_writes_nothing(d):
    so = eb.build(d, "unres", imports=["no_such_symbol_q"], flags=["-Wl,-z,execstack"])
    r = patch(so, "--clear-execstack", "-o", d / "o.so")
    assert r.returncode == 4 and "still fails verify" in r.stderr and "no_such_symbol_q" in r.stderr
    assert not (d / "o.so").exists() and leftovers(d) == []


def test_result_failing_the_dlopen_probe_writes_nothing(d):
    # verify can't see a constructor that kills the process; the RTLD_NOW probe in a subprocess does.
    so = eb.build(d, "boom", flags=["-Wl,-z,execstack"],
                  extra="#include <unistd.h>\n__attribute__((constructor)) static void boom(void) { _exit(7); }\n")
    r = patch(so, "--clear-execstack", "--in-place")
    assert r.returncode == 4 and "does not dlopen" in r.stderr
    assert read_elf(so).exec_stack and not (d / "boom.so.orig").exists() and leftovers(d) == []


def test_unreadable_input(d):
    bad = d / "cut.so"
    bad.write_bytes(eb.build(d, "whole", flags=["-Wl,-z,execstack"]).read_bytes()[:100])
    r = patch(bad, "--clear-execstack", "-o", d / "o.so")
    assert r.returncode == 3 and "beyond the end of the file" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (d / "o.so").exists()
