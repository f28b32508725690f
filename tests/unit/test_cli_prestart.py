"""verify reads its usual command lines without argparse (toolchain.cli.main_verify.quick_args) and starts its
code scans before anything else is imported: that reading must be argparse's wherever it gives one, the scans it
starts are the ones verify takes only for the same files and kind, and the helpers that spare the start-up its
imports (pathlib's labels, glob, importlib.util.find_spec) give what the modules they replace give."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.cli.main_verify import OPTIONS, quick_args
from toolchain.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def _verify_parser():
    from toolchain.cli.parser import build_parser

    return build_parser("verify")._subparsers._group_actions[0].choices["verify"]


def test_the_option_table_is_the_parsers():
    """argparse's verify parser is built from OPTIONS: the same options, defaults and choices."""
    got = {}
    for action in _verify_parser()._actions:
        if action.option_strings and action.dest != "help":
            got[tuple(action.option_strings)] = (action.dest, action.default,
                                                 "flag" if action.nargs == 0 else action.choices)
    assert got == {flags: (dest, default, choices) for flags, dest, default, choices, _ in OPTIONS}


LINES = [
    ["a.so"], ["a.so", "b.pt2"], ["./a.so", "--strict"], ["--strict", "a.so"], ["a.so", "--host", "h.so"],
    ["a.so", "--host=h.so"], ["--ho", "h.so", "a.so"], ["--kind", "host", "a.so"], ["--kind=plugin", "a.so"],
    ["--ki", "library", "a.so"], ["a.so", "-o", "r.json"], ["a.so", "-or.json"], ["a.so", "-o=r.json"],
    ["a.so", "-o==r"], ["a.so", "-or=x"], ["--output", "r", "a.so", "--format", "json"], ["--form=sarif", "a.so"],
    ["--profile", "debian12", "a.so", "--kind", "auto"], ["-"], ["", "a.so"], ["--host", "a.so", "b.so"],
    ["a.so", "--strict", "--strict"], ["a.so", "--format", "json", "--format", "junit"], ["a.so", "--host=a b"],
    ["a b.so", "--profile=x y"], ["--st", "a.so"], ["--f", "text", "a.so"],
    # what the reading leaves to argparse, valid or not
    ["a.so", "--h"], ["a.so", "--help"], ["-h"], ["a.so", "--strict=yes"], ["a.so", "--host"], ["a.so", "-x"],
    ["a.so", "--nope", "b"], ["--kind"], [], ["--strict"], ["a.so", "--strict", "b.so"], ["--kind", "none", "a.so"],
    ["a.so", "--host", "-x.so"], ["-o"], ["a.so", "--pro"], ["--", "-weird.so"], ["a.so", "--", "b.so"],
    ["a.so", "--format", "xml"], ["a.so", "-o", "-"], ["--host x", "a.so"], ["-1", "a.so"], ["a.so", "---x"],
    ["a.so", "--ho st"], ["a.so", "-hx"],
]


@pytest.mark.parametrize("argv", LINES, ids=lambda a: " ".join(a) or "(none)")
def test_quick_args_are_argparses(argv, capsys):
    """Wherever quick_args gives a reading it is argparse's, every field; the common lines get one."""
    quick = quick_args(argv)
    try:
        args = _verify_parser().parse_args(argv)
    except (UsageError, SystemExit):
        args = None
    capsys.readouterr()
    if quick is not None:
        assert args is not None, "quick_args read a line argparse refuses"
        assert vars(quick) == {**vars(args), "command": "verify"}
    if LINES.index(argv) < LINES.index(["a.so", "--h"]):
        assert quick is not None


PRESTART = r"""
import os, sys, json
from toolchain.verify import scans
so, other = sys.argv[1], sys.argv[2]
out = {}
scans.prestart([so], "auto")
early = scans._prestarted[2]
out["started"] = early is not None and len(early._running) == 1
out["same_taken"] = scans.start([so], "auto") is early
early.close()
scans.prestart([so], "auto")
early = scans._prestarted[2]
pid = early._running[0].pid
other_scans = scans.start([other], "auto")  # other files: the early ones are stopped
out["other_is_new"] = other_scans is not early and scans._prestarted is None
try:
    os.kill(pid, 0)
    out["early_stopped"] = False
except ProcessLookupError:
    out["early_stopped"] = True
other_scans.close()
scans.prestart([so], "auto")
scans.prestart([so], "host")  # a kind the CPU rule does not read: nothing starts, the earlier ones stop
out["host_kind"] = scans._prestarted[2] is None
scans.prestart([so], "auto")
scans.drop_prestarted()
try:
    os.waitpid(-1, os.WNOHANG)
    out["left"] = True
except ChildProcessError:
    out["left"] = False
print(json.dumps(out))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="background scans need a second CPU (this machine has one)")
def test_prestarted_scans_are_taken_only_for_the_same_files(tmp_path):
    import json

    so = tmp_path / "a.so"
    so.write_bytes(Path(sys.executable).resolve().read_bytes()[:4096])  # ELF magic: a job is started for it
    other = tmp_path / "b.so"
    other.write_bytes(so.read_bytes())
    proc = subprocess.run([sys.executable, "-c", PRESTART, str(so), str(other)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"started": True, "same_taken": True, "other_is_new": True,
                                       "early_stopped": True, "host_kind": True, "left": False}


@pytest.mark.parametrize("path", ["", ".", "./", "a", "./a.so", "a//b/./c/", "/", "//", "///", "//a//b", "///a",
                                  "/./a/../b", "..", "a/..", ".a", "...", "a/./", "./../x"])
def test_path_labels_are_pathlibs(path):
    from toolchain._startup import path_str

    assert path_str(path) == str(Path(path))


def test_glob_is_globs(tmp_path):
    from toolchain.elf.resolve import _glob

    d = tmp_path / "d"
    (d / "e.conf").mkdir(parents=True)
    for n in ("a.conf", ".h.conf", "b.txt", "c.conf", "[x].conf"):
        (d / n).write_text("")
    (d / "link.conf").symlink_to(tmp_path / "missing")
    patterns = ["d/*.conf", "d/.*.conf", "d/[ab]*", "*/a.conf", "d/a.conf", "d/none", "none/*.conf", "d/", "d/?.conf",
                "x/", "d/[[]x].conf", "d/link.conf", "d/*"]
    for p in [str(tmp_path / p) for p in patterns] + ["/etc/ld.so.conf.d/*.conf"]:
        assert sorted(_glob(p)) == sorted(glob.glob(p)), p


@pytest.mark.parametrize("name", ["json", "capstone", "toolchain", "no_such_module_here", "sys", "_string"])
def test_find_spec_is_importlibs(name):
    from toolchain._startup import find_spec

    got, want = find_spec(name), importlib.util.find_spec(name)
    assert (got is None) == (want is None)
    if want is not None:
        assert (got.name, got.origin, got.submodule_search_locations) == \
            (want.name, want.origin, want.submodule_search_locations)
    with pytest.raises(ValueError):
        find_spec("toolchain.cli")
