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
    auditwheel repair + show, verify, fresh venv with the wheel and torch, the installed CLI and module run."""
    root = tmp_path_factory.mktemp("release")
    out, work = root / "dist", root / "work"
    proc = subprocess.run([sys.executable, "-m", "toolchain.release", "--out", str(out), "--examples", "mlp",
                           "--work", str(work)], capture_output=True, text=True, cwd=REPO_ROOT)
    report_path = out / "release-report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return ReleaseRun(out, work, proc, report)
