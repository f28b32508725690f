"""The import floors of toolchain/ (the import-linter contracts in pyproject.toml) hold: `lint-imports` runs in
the default pytest run, which CI runs, and not only in `nox -s lint`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lint_imports_keeps_every_contract(tmp_path):
    tool = Path(sys.executable).parent / "lint-imports"
    assert tool.is_file(), f"{tool} is missing: install the dev extra (pip install -e '.[dev]': import-linter)"
    # this checkout's toolchain/, whatever an editable install elsewhere points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([str(tool), str(ROOT / "pyproject.toml"), "--no-logo", "--cache-dir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"lint-imports exited {proc.returncode}:\n{out[-6000:]}"
    assert "0 broken" in out, out[-6000:]
