"""Progress of the long steps (building, tracing, compiling, packaging, verifying) on stderr.

Each step prints what it is doing when it starts and its elapsed time when it ends, so a 20-second export is
never silent; `-q` (set_quiet) turns every line off. Lines go to stderr so stdout stays the command's result."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def note(message: str) -> None:
    """One line for the user (a note or a warning), silenced by -q like the step lines."""
    if not _quiet:
        print(f"aoti-toolchain: {message}", file=sys.stderr, flush=True)


@contextmanager
def step(what: str) -> Iterator[None]:
    """`what...` when the step starts, `what: done in 1.2 s` (or `failed after`) when it ends."""
    start = time.monotonic()
    note(f"{what} ...")
    ok = False
    try:
        yield
        ok = True
    finally:
        note(f"{what}: {'done in' if ok else 'failed after'} {time.monotonic() - start:.1f} s")
