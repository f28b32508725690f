"""python -m toolchain.release: the whole pipeline from a clean export of HEAD, and its failure mode."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys

import pytest

from tests.integration import elf_builders as eb
from toolchain.atomic import current_umask


def release(*args):
    return subprocess.run([sys.executable, "-m", "toolchain.release", *map(str, args)], capture_output=True,
                          text=True, cwd=eb.REPO_ROOT)


def test_release_fails_on_a_plugin_error_and_writes_no_sums(tmp_path):
    bad = eb.build(tmp_path, "bad", imports=["no_such_symbol_r"], flags=["-Wl,-z,noexecstack"])
    out = tmp_path / "dist"
    out.mkdir()
    (out / "SHA256SUMS").write_text("stale\n")
    r = release("--out", out, "--plugin", bad, "--examples", "", "--work", tmp_path / "work")
    assert r.returncode == 1, r.stdout + r.stderr
    assert not (out / "SHA256SUMS").exists()  # a stale one must not vouch for a failed run
    report = json.loads((out / "release-report.json").read_text())
    assert report["verdict"] == "fail" and "given plugins" in report["failed"]
    findings = report["verify"][0]["report"]["findings"]
    assert any(f["rule"] == "unresolved-symbol" and f["symbol"] == "no_such_symbol_r" for f in findings)


@pytest.mark.slow
def test_release_end_to_end(tmp_path):
    out = tmp_path / "dist"
    r = release("--out", out, "--examples", "mlp", "--work", tmp_path / "work")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    names = sorted(sums)
    assert any(n.endswith(".whl") for n in names) and any(n.startswith("aoti_toolchain-") and n.endswith(".tar.gz")
                                                          for n in names)
    assert any(n.startswith("aoti-host-runtime-") for n in names)
    for name, digest in sums.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # the mode a plain open() gives under the umask (0644 under 022), not mkstemp's 0600
    assert stat.S_IMODE((out / "SHA256SUMS").stat().st_mode) == 0o666 & ~current_umask()
    report = json.loads((out / "release-report.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=eb.REPO_ROOT).stdout.strip()
    assert report["verdict"] == "pass" and report["commit"] == head
    verified = {v["what"]: v["report"] for v in report["verify"]}
    runtime_files = {f["path"].rsplit("/", 1)[-1] for f in verified["runtime"]["files"]}
    assert {"libaoti_host.so", "aoti-run"} <= runtime_files
    assert any(f["kind"] == "plugin" for f in verified["example plugins"]["files"])
    assert verified["example plugins"]["summary"]["errors"] == 0
