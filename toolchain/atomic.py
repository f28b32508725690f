"""Atomic file replacement, the one way the toolchain writes its outputs: a temporary file beside the
target, renamed over it on success and removed on failure, so no reader ever sees half a file and a failed
write leaves nothing behind. The file gets the mode a plain open() would give it (0666 less the umask: 0644
under umask 022), and it and its directory are fsync'ed, so the new content survives a crash once the call
returns. Writers that share one output (processes making a cache entry, timings that must not overlap) take
locked() around it."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it (Linux /proc), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0) | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path` (same directory, so the rename is atomic); when the block
    ends without an exception it replaces `path`, otherwise it is removed. The temporary file starts with
    the umask's default mode (a block may chmod it, or put another file there, whose mode then stays)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync_path(tmp)
        os.replace(tmp, target)
        _fsync_path(target.parent, directory=True)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive flock on the lock file `path` (created, with its directory, if missing; mode as a plain
    open() gives it) for the block: serialises the processes that take it on one shared thing, and the kernel
    drops it if the holder dies. The file is opened with O_NOFOLLOW: a symbolic link planted at `path` fails the
    open (OSError) instead of creating or locking the file it points to."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_if_changed(path: str | os.PathLike[str], text: str) -> bool:
    """Atomically replace `path` with `text` unless it already holds exactly that (its timestamp then stays,
    so build tools see nothing new). True if written."""
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_text(path, text)
    return True


def write_or_check(path: str | os.PathLike[str], text: str, check: bool, regenerate: str) -> bool:
    """A generated file's two modes: with `check`, whether `path` already holds `text` (if not, says so on
    stderr with `regenerate`, the command that rewrites it); else write_if_changed, saying which it did.
    False only for a file found stale."""
    import sys

    if check:
        try:
            current = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        if current != text:
            print(f"{path}: not current; run {regenerate}", file=sys.stderr)
            return False
        return True
    print(f"{path}: {'written' if write_if_changed(path, text) else 'unchanged'}")
    return True
