"""The atomic writer: the mode a plain open() gives under the umask, fsync of file and directory, nothing
half-written; write_if_changed leaves an unchanged file alone; locked() excludes another process and refuses a
symbolic link."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from toolchain import atomic


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda m: os.umask(m)
    os.umask(saved)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_mode_is_what_open_would_give(tmp_path, umask, mask, mode):
    umask(mask)
    assert atomic.current_umask() == mask
    out = tmp_path / "sub" / "out.txt"
    atomic.write_text(out, "x\n")
    plain = tmp_path / "plain.txt"
    plain.write_text("x\n")
    assert stat.S_IMODE(out.stat().st_mode) == mode == stat.S_IMODE(plain.stat().st_mode)


def test_a_block_may_set_its_own_mode(tmp_path, umask):
    umask(0o022)
    out = tmp_path / "tool"
    with atomic.replacing(out) as tmp:
        tmp.write_bytes(b"#!/bin/sh\n")
        os.chmod(tmp, 0o755)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_file_and_directory_are_fsynced(tmp_path, monkeypatch):
    synced: list[tuple[int, int]] = []
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_ino, st.st_mode))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    out = tmp_path / "out.txt"
    atomic.write_text(out, "content\n")
    inodes = {ino for ino, _ in synced}
    assert out.stat().st_ino in inodes and tmp_path.stat().st_ino in inodes
    assert any(stat.S_ISDIR(mode) for _, mode in synced)


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), atomic.replacing(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_write_if_changed(tmp_path):
    out = tmp_path / "gen.h"
    assert atomic.write_if_changed(out, "a\n") is True
    before = out.stat()
    os.utime(out, ns=(before.st_atime_ns, before.st_mtime_ns - 10_000_000_000))
    old_mtime = out.stat().st_mtime_ns
    assert atomic.write_if_changed(out, "a\n") is False
    assert out.stat().st_mtime_ns == old_mtime and out.stat().st_ino == before.st_ino
    assert atomic.write_if_changed(out, "b\n") is True
    assert out.read_text() == "b\n" and out.stat().st_mtime_ns != old_mtime
    # A file that is not UTF-8 text is replaced, not read as text.
    out.write_bytes(b"\xff\xfe")
    assert atomic.write_if_changed(out, "c\n") is True and out.read_text() == "c\n"


# Tries the lock on argv[1] without waiting in another process: prints "taken" or "busy".
TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("taken")
except BlockingIOError:
    print("busy")
"""


def try_lock(path) -> str:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_locked_excludes_another_process_until_the_block_ends(tmp_path):
    lock = tmp_path / "sub" / "x.lock"
    with atomic.locked(lock):
        assert lock.is_file()
        assert try_lock(lock) == "busy"
    assert try_lock(lock) == "taken"


def test_locked_refuses_a_symbolic_link(tmp_path):
    target = tmp_path / "elsewhere"
    (tmp_path / "x.lock").symlink_to(target)
    with pytest.raises(OSError), atomic.locked(tmp_path / "x.lock"):
        pass
    assert not target.exists()
