"""The release pipeline, run once per session for every test that inspects what it made (test_release.py,
test_wheel.py): a scratch SCons build, the wheel, its repair and a fresh venv with torch are minutes of work
on this machine, so they happen once."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import file_lock, shared_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ReleaseRun:
    out: Path
    work: Path
    proc: subprocess.CompletedProcess
    report: dict

    @property
    def venv(self) -> Path:
        return Path(self.report["venv"])


@pytest.fixture(scope="session")
def release_run(tmp_path_factory) -> ReleaseRun:
    """`python -m toolchain.release --examples mlp` of HEAD: sdist, wheel (from the sdist), runtime archive,
    auditwheel repair + show, verify, fresh venv with the wheel and torch, the installed CLI and module run.
    Once per test run: the first xdist worker that needs it runs it (its exit status and output kept beside
    it), the other reuses that."""
    root = shared_dir(tmp_path_factory, "release")
    out, work, record = root / "dist", root / "work", root / "proc.json"
    with file_lock(root / ".lock"):
        if not record.is_file():
            proc = subprocess.run([sys.executable, "-m", "toolchain.release", "--out", str(out), "--examples",
                                   "mlp", "--work", str(work)], capture_output=True, text=True, cwd=REPO_ROOT)
            record.write_text(json.dumps({"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout,
                                          "stderr": proc.stderr}))
    kept = json.loads(record.read_text())
    proc = subprocess.CompletedProcess(kept["args"], kept["returncode"], kept["stdout"], kept["stderr"])
    report_path = out / "release-report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return ReleaseRun(out, work, proc, report)
