"""A file given as a .pt2 that is no package: one message and one exit code, whichever tool reads it.

A random file (or text, or an empty file) named .pt2 is "not a .pt2 package (not a zip archive)" for `run`,
`verify`, `inspect` and aoti-run, and a package cut short is "not a valid .pt2 (zip) package"; all of them exit
with bad input's code (toolchain/spec/exit_codes.toml), as a malformed .npy does. A plugin .so renamed .pt2 is
still read as the plugin it is."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.crafted_zips import rebuild
from toolchain.errors import exit_code
from toolchain.pt2 import open_package

NOT_ZIP = "not a .pt2 package (not a zip archive"
TRUNCATED = "not a valid .pt2 (zip) package"
TOOLS = ("run", "verify", "inspect", "aoti-run")


@pytest.fixture(scope="module")
def packages(fake_plugin, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad-packages")
    plugin = fake_plugin("bad_packages_plugin").read_bytes()
    good = rebuild([("model/data/aotinductor/model/model.so", plugin), ("model/extra/notes.txt", b"x" * 4096)])
    noise = random.Random(29).randbytes(5000)
    assert noise[:2] != b"PK" and noise[:4] != b"\x7fELF"
    cases = {
        "good.pt2": good,
        "random.pt2": noise,
        "text.pt2": b"this is not a model\n",
        "empty.pt2": b"",
        "UPPER.PT2": noise[:100],
        "truncated-half.pt2": good[: len(good) // 2],
        "truncated-end.pt2": good[:-10],  # into the end-of-central-directory record
        "truncated-start.pt2": good[len(good) // 2:],  # the front is gone: no zip signature left
    }
    for name, data in cases.items():
        (d / name).write_bytes(data)
    with open_package(d / "good.pt2") as pkg:  # the untruncated package is readable: the cut is what is refused
        assert "model/data/aotinductor/model/model.so" in pkg.members
    return {name: d / name for name in cases}


def _tool(tool: str, pkg: Path, out: Path, host_build) -> subprocess.CompletedProcess:
    if tool == "aoti-run":
        cmd = [str(host_build.aoti_run), str(pkg), "-o", str(out)]
    elif tool == "run":
        cmd = [sys.executable, "-m", "toolchain", "run", str(pkg), "-o", str(out), "--library", str(host_build.lib)]
    elif tool == "verify":
        cmd = [sys.executable, "-m", "toolchain", "verify", "--host", str(host_build.lib), str(pkg)]
    else:
        cmd = [sys.executable, "-m", "toolchain", "inspect", str(pkg)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


CASES = [("random.pt2", NOT_ZIP), ("text.pt2", NOT_ZIP), ("empty.pt2", NOT_ZIP + ": the file is empty)"),
         ("UPPER.PT2", NOT_ZIP), ("truncated-start.pt2", NOT_ZIP), ("truncated-half.pt2", TRUNCATED),
         ("truncated-end.pt2", TRUNCATED)]


@pytest.mark.parametrize(("name", "message"), CASES)
def test_every_tool_refuses_a_bad_package_the_same_way(packages, host_build, tmp_path, name, message):
    pkg = packages[name]
    seen = {}
    for tool in TOOLS:
        out = tmp_path / f"out-{tool}"
        proc = _tool(tool, pkg, out, host_build)
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text, f"{tool}: {text}"
        assert message in text and str(pkg) in text, f"{tool}: {text}"
        assert "fix:" in text or "re-export" in text or "re-create" in text, f"{tool} gives no fix: {text}"
        assert not out.exists(), f"{tool} left {out}"
        seen[tool] = proc.returncode
    assert seen == dict.fromkeys(TOOLS, exit_code("bad_input")), seen


def test_a_plugin_renamed_pt2_is_still_the_plugin(packages, host_build, tmp_path):
    """The "not a zip archive" refusal is for files that are neither zip nor ELF: a bare plugin saved as .pt2 is
    read as a plugin by inspect and loaded by aoti-run as before."""
    renamed = tmp_path / "plugin.pt2"
    with open_package(packages["good.pt2"]) as pkg:
        renamed.write_bytes(pkg.read("model/data/aotinductor/model/model.so"))
    for tool in ("inspect", "aoti-run"):
        proc = _tool(tool, renamed, tmp_path / "out", host_build)
        assert NOT_ZIP not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "kind:         plugin" in _tool("inspect", renamed, tmp_path / "o", host_build).stdout
