"""python -m toolchain.release: the whole pipeline from a clean export of HEAD, and its failure mode."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys

import pytest

import toolchain
from tests.integration import elf_builders as eb
from toolchain.atomic import current_umask

pytestmark = pytest.mark.long  # minutes of work: skipped unless --long (nox -s slow, CI)


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
def test_release_end_to_end(release_run):
    out, r = release_run.out, release_run.proc
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    names = sorted(sums)
    version = toolchain.__version__
    assert f"aoti_toolchain-{version}.tar.gz" in names  # the sdist
    assert f"aoti-host-{version}-cpu-gcc-release.tar.gz" in names  # scons dist
    wheels = [n for n in names if n.endswith(".whl")]
    # only the repaired wheel ships, tagged with what auditwheel proves (never linux_x86_64 or py3-none-any)
    assert len(wheels) == 1 and "-py3-none-manylinux_" in wheels[0], names
    for name, digest in sums.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # the mode a plain open() gives under the umask (0644 under 022), not mkstemp's 0600
    assert stat.S_IMODE((out / "SHA256SUMS").stat().st_mode) == 0o666 & ~current_umask()
    report = release_run.report
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=eb.REPO_ROOT).stdout.strip()
    assert report["verdict"] == "pass" and report["commit"] == head
    verified = {v["what"]: v for v in report["verify"]}
    archive = verified[f"runtime archive aoti-host-{version}-cpu-gcc-release.tar.gz"]["report"]
    assert {"libaoti_host.so", "aoti-run"} <= {f["path"].rsplit("/", 1)[-1] for f in archive["files"]}
    assert verified[f"manifest of aoti-host-{version}-cpu-gcc-release.tar.gz"]["problems"] == []
    # the Triton backend the wheel ships, verified in its own host (Triton's server), none of its imports unresolved
    (wheel,) = wheels
    backend = verified[f"Triton backend in {wheel}"]
    assert backend["report"]["summary"]["errors"] == 0 and backend["report"]["host"].endswith("/bin/tritonserver")
    assert [f["path"].rsplit("/", 1)[-1] for f in backend["report"]["files"]] == ["libtriton_aoti_toolchain.so"]
    plugins = verified["example plugins"]["report"]
    assert any(f["kind"] == "plugin" for f in plugins["files"]) and plugins["summary"]["errors"] == 0
    # the order of a cibuildwheel-style pipeline: build -> repair -> test, and only then the checksums
    order = [s["step"].split(" ")[0:2] for s in report["steps"]]
    assert order.index(["auditwheel", "repair"]) < order.index(["install", "the"]) < order.index(["export", "and"])
