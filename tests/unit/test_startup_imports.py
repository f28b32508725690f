"""What a command's start-up imports: verify forks its code scans before pathlib (and the urllib.parse and
ipaddress it imports: ~3 ms of every start on Python 3.11) is imported, and the modules on that path read
their pathlib.Path constants lazily (toolchain._startup.lazy_paths). Those modules import Path for type
checking only, so a use of Path at run time without importing it would pass linting and fail only when run:
this test reads every module for such a use."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _runtime_path_uses(source: str) -> list[int]:
    """Lines that use the name Path at run time in a module that does not import it at run time (module level)
    and in a function that does not import it itself."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "pathlib" and any(a.name == "Path" for a in node.names):
            return []  # imported at module level: every use is fine
    annotations = set()
    for node in ast.walk(tree):
        for attr in ("annotation", "returns"):
            ann = getattr(node, attr, None)
            if ann is not None:
                annotations.update(id(n) for n in ast.walk(ann))
    bad: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(n, ast.ImportFrom) and n.module == "pathlib" for n in ast.walk(node)):
                continue
            bad += [n.lineno for n in ast.walk(node)
                    if isinstance(n, ast.Name) and n.id == "Path" and id(n) not in annotations]
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If)):
            bad += [n.lineno for n in ast.walk(node)
                    if isinstance(n, ast.Name) and n.id == "Path" and id(n) not in annotations]
    return sorted(set(bad))


@pytest.mark.parametrize("path", sorted((REPO / "toolchain").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_path_is_imported_where_it_is_used(path):
    assert not _runtime_path_uses(path.read_text(encoding="utf-8")), f"{path}: Path used without importing it"


def test_the_checker_finds_such_a_use():
    src = "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pathlib import Path\n\n\ndef f(p: Path) -> Path:\n" \
          "    return Path(p)\n"
    assert _runtime_path_uses(src) == [7]
    assert not _runtime_path_uses(src.replace("    return Path(p)", "    from pathlib import Path\n\n    return Path(p)"))


def test_the_scans_fork_before_pathlib_is_imported():
    """What toolchain.cli imports before it forks verify's scans (its command line read, the scans module) holds
    no pathlib, and the child's scan imports none either."""
    code = ("import sys\nimport toolchain.cli, toolchain.cli.main_verify, toolchain.verify.scans as s\n"
            "before = 'pathlib' in sys.modules\n"
            "s._child_results(sys.executable, False)\n"
            "print(before, 'pathlib' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
