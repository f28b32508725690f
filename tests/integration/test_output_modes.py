"""Outputs written through toolchain.atomic get the mode a plain open() gives under the umask (0644 under
022), not mkstemp's 0600: the .pt2, compile_commands.json (SHA256SUMS: test_release.py)."""

from __future__ import annotations

import stat

from tests.conftest import REPO_ROOT, build_lock, repo_scons
from toolchain.atomic import current_umask


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_exported_package_is_readable_like_any_new_file(export_example):
    pt2 = export_example("mlp", "embedded")[0]
    assert _mode(pt2) == 0o666 & ~current_umask()


def test_compile_commands_is_readable_like_any_new_file(host_build):
    db = host_build.variant_dir / "compile_commands.json"
    with build_lock():  # the db is gone until the rebuild: no other worker's reader or SCons run meanwhile
        db.unlink()
        proc = repo_scons("-Q", str(db.relative_to(REPO_ROOT)), locked=True)
    assert proc.returncode == 0 and db.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _mode(db) == 0o666 & ~current_umask()
