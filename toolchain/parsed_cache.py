"""The user's cache of what the toolchain reads from its own data files (the spec's TOML, the rule, exit-code
and CPU tables, the target profiles), so that a command does not parse and validate the same TOML at every
start: parsing it is most of what `aoti-toolchain verify` of a small plugin spent beyond reading the plugin
(bench/RESULTS.md, "verify start-up").

An entry holds a loader's validated result as plain data (marshal), is written on first use under
$XDG_CACHE_HOME/aoti-toolchain/parsed/ (else ~/.cache/aoti-toolchain/parsed/) and is keyed by a BLAKE2b digest
of the source files' paths and bytes, the loader's own module and the Python version: a changed file or loader
makes the entry stale, and it is rebuilt. Nothing of it is committed or shipped; deleting it is always safe.

Only the command line writes entries (`toolchain.cli.main` calls `enable_writes()`): a program that imports
the library (a server, the Python runtime module) reads what the command line stored and writes nothing to the
user's home, as loading a plugin writes nothing to disk by default.

An entry is used only if this user wrote it: a regular file (not a symlink) owned by the effective user and
writable by no one else, whose header names this key and whose contents match the digest stored with them.
Anything else (corrupt, stale, planted by another user, unreadable) is ignored and the files are parsed as
without a cache. Entries are written only into a directory this user owns that no one else can write (created
0700), below an aoti-toolchain directory that is the same (not a link: the plugin cache's root rules), under a random name opened with O_EXCL|O_NOFOLLOW, then renamed into place, so a reader sees a whole
entry or none. A cache that cannot be written (no HOME, a read-only home, another user's directory) costs a
parse, nothing else.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, TypeVar

try:
    from _blake2 import blake2b  # hashlib.blake2b itself: importing hashlib also loads OpenSSL (~2 ms a start)
except ImportError:  # pragma: no cover -- an interpreter without the module (hashlib then has its own)
    from hashlib import blake2b

T = TypeVar("T")

MAGIC = b"aoti-toolchain parsed 1\n"  # the entry format; a new one makes old entries stale
SUBDIR = "parsed"
_DIGEST = 32
_HEAD = len(MAGIC) + 2 * _DIGEST  # magic, key, digest of the payload
_writes = False


def enable_writes() -> None:
    """Store what is parsed from now on (the command line's start; see the module's docstring)."""
    global _writes
    _writes = True


def cache_dir() -> str | None:
    """$XDG_CACHE_HOME/aoti-toolchain/parsed (the XDG spec ignores a relative one), else under ~/.cache; None
    when neither is an absolute path (no HOME)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        home = os.environ.get("HOME") or ""
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "aoti-toolchain", SUBDIR)


def plain(value: Any) -> Any:
    """`value` as data marshal stores: named tuples as tuples, paths as strings, read-only mappings as dicts."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict | MappingProxyType):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, PurePath):
        return str(value)
    return value


def load(name: str, sources: Sequence[str | os.PathLike[str]], build: Callable[[], T],
         decode: Callable[[Any], T], encode: Callable[[T], Any] = plain) -> T:
    """`build()` (a loader that reads and validates `sources`), or its result for the same bytes of `sources`
    from the cache, remade by `decode` from what `encode` stored. `sources` name every file the result depends
    on, the loader's own module included. An error of `build()` is raised as it is, and nothing is stored."""
    directory = cache_dir()
    if directory is None:
        return build()
    try:
        key, tag = _key(sources)
    except OSError:
        return build()  # a source that cannot be read: the loader says which and why
    leaf = f"{name}-{tag}.{sys.implementation.cache_tag}"
    stored = _read(os.path.join(directory, leaf), key)
    if stored is not None:
        try:
            return decode(stored)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError):
            pass  # written by a loader of another shape: rebuilt below
    value = build()
    if _writes:
        _write(directory, leaf, key, lambda: marshal.dumps(encode(value)))
    return value


def _key(sources: Sequence[str | os.PathLike[str]]) -> tuple[bytes, str]:
    """(the digest of the Python version and each source's path and bytes, a short digest of the paths alone:
    one entry per installation)."""
    key = blake2b(MAGIC, digest_size=_DIGEST)
    key.update(sys.version.encode())
    where = blake2b(digest_size=8)
    for source in sources:
        path = os.fsencode(source)
        with open(path, "rb") as f:
            data = f.read()
        for h in (key, where):
            h.update(len(path).to_bytes(8, "little"))
            h.update(path)
        key.update(len(data).to_bytes(8, "little"))
        key.update(data)
    return key.digest(), where.hexdigest()


def _read(path: str, key: bytes) -> Any:
    """The entry's payload, unmarshalled, or None: missing, not this user's own, stale, corrupt."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _ours(st) or not stat.S_ISREG(st.st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, max(st.st_size, 1 << 16)):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) < _HEAD or not data.startswith(MAGIC) or data[len(MAGIC):len(MAGIC) + _DIGEST] != key:
        return None
    payload = memoryview(data)[_HEAD:]
    if blake2b(payload, digest_size=_DIGEST).digest() != data[_HEAD - _DIGEST:_HEAD]:
        return None
    try:
        return marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None


def _ours(st: os.stat_result) -> bool:
    """Owned by the effective user and writable by no one else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _write(directory: str, leaf: str, key: bytes, payload: Callable[[], bytes]) -> None:
    """Store the entry atomically; any failure leaves the cache as it was (and the result unstored)."""
    dfd = _private_dir(directory)
    if dfd is None:
        return
    try:
        data = payload()
    except ValueError:  # a value marshal cannot store: used, not cached
        os.close(dfd)
        return
    tmp = f".{leaf}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    except OSError:
        os.close(dfd)
        return
    try:
        try:
            view = memoryview(MAGIC + key + blake2b(data, digest_size=_DIGEST).digest() + data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, leaf, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:  # a full disk, a quota: the half-written file goes, the cache stays as it was
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
    finally:
        os.close(dfd)


def _private_dir(directory: str) -> int | None:
    """A descriptor of `directory`, created 0700 (with its aoti-toolchain parent) when missing; None when it or
    its parent is not a real directory of this user's that no one else can write, or cannot be made. The leaf
    is made and opened relative to the checked parent, so no path is looked up twice."""
    parent = os.path.dirname(directory)
    try:
        os.makedirs(os.path.dirname(parent), exist_ok=True)  # ~/.cache itself, as the XDG spec has it made
        try:
            os.mkdir(parent, 0o700)
        except FileExistsError:
            pass
        pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    dfd = None
    try:
        if _ours(os.fstat(pfd)):
            leaf = os.path.basename(directory)
            try:
                os.mkdir(leaf, 0o700, dir_fd=pfd)
            except FileExistsError:
                pass
            dfd = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            if _ours(os.fstat(dfd)):
                return dfd
    except OSError:
        pass
    finally:
        os.close(pfd)
    if dfd is not None:
        os.close(dfd)
    return None
