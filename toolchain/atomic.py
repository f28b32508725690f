"""Atomic file replacement, the one way the toolchain writes its outputs: a temporary file beside the
target, renamed over it on success and removed on failure, so no reader ever sees half a file and a failed
write leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path` (same directory, so the rename is atomic); when the block
    ends without an exception it replaces `path`, otherwise it is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
