"""`aoti-toolchain verify` imports none of the heavy packages: not torch, numpy, jinja2, ray, lief, nor capstone's
Python package (the CPU-extension scan calls libcapstone through ctypes), so that its start-up stays within its
budget (bench/bench_verify.py --startup-only measures it). Run as the CLI runs, in a fresh interpreter, on a
plugin whose code the scan must decode (AVX2) and against the default host (this project's runtime library)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration import elf_builders as eb
from tests.integration.test_target_rules import KERNELS

NOT_FOR_VERIFY = ("torch", "numpy", "jinja2", "ray", "lief", "capstone")

WRAPPER = """
import sys
from toolchain.cli import main
rc = main(sys.argv[2:])
modules = sorted(sys.modules)
import json
with open(sys.argv[1], "w") as f:
    json.dump({"rc": rc, "modules": modules}, f)
"""


def _modules(args: list[str], tmp_path, host_lib) -> tuple[int, set[str], str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "AOTI_HOST_LIBRARY": str(host_lib)}
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *args], capture_output=True, text=True, env=env)
    assert out.is_file(), proc.stderr
    got = json.loads(out.read_text())
    return got["rc"], {m.split(".")[0] for m in got["modules"]} | set(got["modules"]), proc.stdout


def test_verify_imports_no_heavy_package(tmp_path, host_lib):
    from toolchain.isa import _libcapstone

    plugin = eb.build(tmp_path, "p_avx2", extra=KERNELS, flags=["-O2"])
    for fmt in ("text", "json", "sarif", "junit"):
        rc, mods, stdout = _modules(["verify", str(plugin), "--format", fmt], tmp_path, host_lib)
        assert rc in (0, 1) and stdout, stdout
        assert "toolchain.isa" in mods  # the scan ran: the code was decoded
        heavy = {m for m in NOT_FOR_VERIFY if m in mods}
        if _libcapstone() is None:  # no capstone 5 library: the scan goes through capstone's package
            heavy.discard("capstone")
        assert not heavy, f"verify --format {fmt} imported {sorted(heavy)}"
        # the other commands' modules are not imported to build verify's parser
        assert not {"toolchain.cli.main_export", "toolchain.cli.main_serve", "toolchain.target"} & mods


def test_the_program_exits_with_its_report_whole(tmp_path, host_lib):
    """Run as a program, verify ends with os._exit once its output is flushed (no interpreter teardown): the
    report on a pipe is complete, the exit code is the report's, and -o writes the whole file; a reader that
    closes the pipe early gets Python's usual exit, not a hang."""
    plugin = eb.build(tmp_path, "p_avx2", extra=KERNELS, flags=["-O2"])
    # block-buffered stdout, as for any program writing to a pipe: what is not flushed before the exit is lost
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["AOTI_HOST_LIBRARY"] = str(host_lib)
    for extra, want in (([], 0), (["--profile", "debian12"], 1)):  # debian12: x86-64 baseline, so AVX2 fails
        rc, _mods, _out = _modules(["verify", str(plugin), "--format", "json", *extra], tmp_path, host_lib)
        assert rc == want
        proc = subprocess.run([sys.executable, "-m", "toolchain", "verify", str(plugin), "--format", "json", *extra],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == want, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["files"] and doc["summary"]["verdict"] == ("pass" if want == 0 else "fail")
        report = tmp_path / "report.sarif"
        proc = subprocess.run([sys.executable, "-m", "toolchain", "verify", str(plugin), "--format", "sarif", "-o",
                               str(report), *extra], capture_output=True, text=True, env=env)
        assert proc.returncode == want and json.loads(report.read_text())["runs"], proc.stderr
    head = subprocess.run(f"{sys.executable} -m toolchain verify {plugin} | head -c 10", shell=True,
                          capture_output=True, text=True, env=env, timeout=60)
    assert head.returncode == 0 and len(head.stdout) == 10


def test_the_report_is_the_same_with_and_without_the_parsed_cache(tmp_path, host_lib):
    """verify's output, byte for byte, with the user's parsed cache cold (parsed, then stored), warm (read from
    it) and unusable (XDG_CACHE_HOME a file: parsed every time), for each format and a named profile."""
    plugin = eb.build(tmp_path, "p_avx2", extra=KERNELS, flags=["-O2"])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    xdg = tmp_path / "xdg"
    for args in (["--format", "text"], ["--format", "json", "--profile", "debian12"], ["--format", "sarif"]):
        runs = []
        for home in (xdg / args[1], xdg / args[1], blocker):
            env = {**os.environ, "AOTI_HOST_LIBRARY": str(host_lib), "XDG_CACHE_HOME": str(home)}
            proc = subprocess.run([sys.executable, "-m", "toolchain", "verify", str(plugin), *args],
                                  capture_output=True, env=env)
            runs.append((proc.returncode, proc.stdout, proc.stderr))
        assert runs[0][1], runs[0]
        assert runs[0] == runs[1] == runs[2], args
        assert list((xdg / args[1] / "aoti-toolchain" / "parsed").iterdir())  # the cold run stored its tables
