"""aoti-toolchain inspect on a real torch plugin (.pt2), the built host program, and broken input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration import elf_builders as eb
from toolchain.spec import load_spec


def inspect(*args):
    return subprocess.run([sys.executable, "-m", "toolchain", "inspect", *map(str, args)], capture_output=True,
                          text=True)


@pytest.mark.slow
def test_inspect_real_plugin_package(export_example):
    pt2, _m, _i = export_example("mlp", "embedded")
    r = inspect(pt2, "--json")
    assert r.returncode == 0, r.stderr
    (info,) = json.loads(r.stdout)["files"]
    assert info["kind"] == "plugin" and info["machine"] == "x86_64" and str(pt2) in info["file"]
    assert "AOTInductorModelContainerRun" in info["entry_points"]["exported"]
    assert info["entry_points"]["missing_required"] == [] and info["entry_points"]["entries_api"]
    assert "aoti_torch_dtype_float32" in info["shims"]["imported"] and info["shims"]["defined"] == []
    assert info["cxx_runtime"]["libstdcxx_in_needed"] and info["cxx_runtime"]["imported_symbols"] > 10
    assert "libstdc++.so.6" in info["needed"] and info["runpath"] == []
    glibcxx = info["highest_versions"]["GLIBCXX"]
    assert glibcxx["version"].startswith("GLIBCXX_3.4.") and glibcxx["symbol"].startswith("_Z")
    assert info["highest_versions"]["GLIBC"]["symbol"]
    # inductor leaves every .so with an executable stack (FACTS.md); export clears the flag
    assert info["stack"] == {"gnu_stack": "RW", "executable": False}
    text = inspect(pt2).stdout
    assert "kind:         plugin" in text and "stack:        RW;" in text and "needs GLIBCXX" in text


def test_inspect_host_program(host_build):
    r = inspect(host_build.aoti_run, "--json")
    (info,) = json.loads(r.stdout)["files"]
    assert info["kind"] == "host program" and info["interpreter"].endswith("ld-linux-x86-64.so.2")
    spec = load_spec()
    assert set(info["shims"]["defined"]) >= {s.name for s in spec.shims_in("core", "cpu")}
    assert info["stack"]["executable"] is False


def test_inspect_cxx_plugin_without_libstdcxx(tmp_path):
    so = eb.build(tmp_path, "cxx", cxx=True, driver="gcc", flags=["-Wl,-z,noexecstack"],
                  extra='#include <iostream>\nextern "C" int say(void) { std::cerr << 1; return 0; }\n')
    (info,) = json.loads(inspect(so, "--json").stdout)["files"]
    assert info["cxx_runtime"]["libstdcxx_in_needed"] is False
    assert info["cxx_runtime"]["imported_symbols"] > 0 and "_ZSt4cerr" in info["cxx_runtime"]["examples"], info
    assert "NOT in DT_NEEDED" in inspect(so).stdout


def test_inspect_unreadable(tmp_path):
    f = tmp_path / "x.so"
    f.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 20)
    r = inspect(f)
    assert r.returncode == 3 and "truncated" in r.stdout and "Traceback" not in r.stderr
