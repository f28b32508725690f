"""`aoti-toolchain verify` imports only what it needs: not torch, numpy, jinja2, ray, lief, tomllib, dataclasses, nor
capstone's Python package (the CPU-extension scan calls libcapstone through ctypes), so that its start-up
stays near readelf's plus Python's own (bench/bench_verify.py --startup-only measures it). Run as the CLI
runs, in a fresh interpreter, on a plugin whose code the scan must decode (AVX2) and against the default
host (this project's runtime library)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration import elf_builders as eb
from tests.integration.test_target_rules import KERNELS

# dataclasses (and the inspect it imports): the classes of verify's modules are toolchain.record's
NOT_FOR_VERIFY = ("torch", "numpy", "jinja2", "ray", "lief", "tomllib", "capstone", "dataclasses", "inspect")

WRAPPER = """
import json, sys
from toolchain.cli import main
rc = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"rc": rc, "modules": sorted(sys.modules)}, f)
"""


def _modules(args: list[str], tmp_path, host_lib) -> tuple[int, set[str], str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "AOTI_HOST_LIBRARY": str(host_lib)}
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *args], capture_output=True, text=True, env=env)
    assert out.is_file(), proc.stderr
    got = json.loads(out.read_text())
    return got["rc"], {m.split(".")[0] for m in got["modules"]} | set(got["modules"]), proc.stdout


def test_verify_imports_only_what_it_needs(tmp_path, host_lib):
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


def test_scan_ahead_gives_the_same_report(tmp_path, host_lib, monkeypatch):
    """With a host, the plugin's CPU-extension decode runs in a thread while the host is checked
    (target_checks.ScanAhead): the report is the one the decode in line gives, and the thread's scan is used."""
    import toolchain.verify as verify
    from toolchain.verify import target_checks

    plugin = eb.build(tmp_path, "p_avx2", extra=KERNELS, flags=["-O2"])
    used = []
    real = target_checks.ScanAhead.result

    def result(self, path, ident):
        got = real(self, path, ident)
        used.append(got)
        return got

    monkeypatch.setattr(target_checks.ScanAhead, "result", result)
    for profile in ("debian12", "host"):
        ahead = verify.verify_paths([plugin], host=host_lib, profile=profile)
        with monkeypatch.context() as m:
            m.setattr(verify, "_cpus", lambda: 1)  # no thread: decoded in line
            inline = verify.verify_paths([plugin], host=host_lib, profile=profile)
        assert ahead.files == inline.files and ahead.exit_code == inline.exit_code
        if profile == "debian12":  # x86-64: the AVX2 kernel is beyond it
            assert [f.rule for f in ahead.findings if f.rule == "cpu-isa-too-new"] == ["cpu-isa-too-new"]
    from toolchain.isa import IsaScan

    assert len(used) == 2 and all(isinstance(u, IsaScan) for u in used)


def test_scan_ahead_used_only_for_the_file_it_read(tmp_path, host_lib):
    """A result is given back only for the file the thread read (device, inode, size, mtime); a library that
    exports no AOTInductor symbol is not decoded at all."""
    from toolchain.verify.target_checks import ScanAhead, _identity

    plugin = eb.build(tmp_path, "p_avx2", extra=KERNELS, flags=["-O2"])
    ahead = ScanAhead([plugin, host_lib, tmp_path / "missing.so"])
    ahead.close()
    st = os.stat(plugin)
    assert ahead.result(plugin, _identity(st)) is not None
    assert ahead.result(host_lib, _identity(os.stat(host_lib))) is None
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert ahead.result(plugin, _identity(os.stat(plugin))) is None
