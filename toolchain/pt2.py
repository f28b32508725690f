"""The one way to read a .pt2 package (a zip archive of stored members), the same rules as the runtime.

The runtime's reader (runtime/src/base/zip.cpp) and this one make the same decision on every archive, so what
`verify` checks is what the runtime loads; tests/integration/test_package_reader.py runs both over a corpus
of crafted archives. An archive is refused when anything about it is ambiguous:

- the members and the central directory must tile the file: the first local header at offset 0, no gap or
  overlap between members, the end record (and its comment) ending exactly at the end of the file;
- local and central headers agree (name, method, flags, CRC-32, sizes; with a data descriptor, the
  descriptor agrees); member names are unique, UTF-8, relative and '/'-separated, without empty, '.' or
  '..' components, NUL bytes or backslashes;
- members are stored (method 0) and not encrypted; one disk; zip64 records sit where they must and agree
  with the 16/32-bit fields they extend, and zip64 extra fields hold exactly the saturated fields;
- a member's CRC-32 is checked against its bytes when it is read.

Pure Python (struct, zlib.crc32, mmap): no zipfile, nothing heavy to import.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from toolchain.errors import InputError

FIX = "re-create the package with aoti-toolchain export or torch._inductor.aoti_compile_and_package"
FIX_COMPRESSED = ("torch stores .pt2 members uncompressed: re-save it with zip -0 or re-export it with "
                  "aoti-toolchain export")
FIX_ENCRYPTED = "re-export the package unencrypted with aoti-toolchain export"
FIX_NOT_ZIP = ("pass the .pt2 written by aoti-toolchain export or torch._inductor.aoti_compile_and_package "
               "(re-export it, or copy it again if this one was damaged)")
FIX_CRC = "the package was damaged or tampered with: re-export it or fetch it again"

_EOCD, _EOCD64, _LOCATOR = 0x06054B50, 0x06064B50, 0x07064B50
_CENTRAL, _LOCAL, _DESCRIPTOR = 0x02014B50, 0x04034B50, 0x08074B50
_EOCD_SIZE, _LOCATOR_SIZE, _EOCD64_SIZE, _CENTRAL_SIZE, _LOCAL_SIZE = 22, 20, 56, 46, 30
_SAT16, _SAT32 = 0xFFFF, 0xFFFFFFFF
_ENCRYPTED_FLAGS = 0x0001 | 0x0040 | 0x2000  # encrypted, strong encryption, masked local headers
_DESCRIPTOR_FLAG = 0x0008

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_u64 = struct.Struct("<Q").unpack_from


class PackageError(InputError):
    """A .pt2 package is malformed or ambiguous (exit 3)."""


@dataclass(frozen=True)
class Member:
    name: str
    data_offset: int  # of the member's bytes in the file
    size: int
    crc32: int  # as declared; Package.read() checks it against the bytes


def _name_defect(raw: bytes) -> str:
    """Why a member name is refused, or '' when it is a plain relative '/'-separated path."""
    if not raw:
        return "an empty member name"
    if b"\0" in raw:
        return "a member name with a NUL byte"
    if b"\\" in raw:
        return "a member name with a backslash"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "a member name that is not UTF-8"
    if raw.startswith(b"/"):
        return "an absolute member name"
    for part in raw.split(b"/"):
        if not part:
            return "a member name with an empty path component"
        if part in (b".", b".."):
            return f"a member name with a '{part.decode()}' component"
    return ""


def _zip64_field(data: Any, start: int, length: int) -> tuple[bool, int, int] | None:
    """(present, offset, size) of the zip64 field (id 1) of an extra area, or None when the area is not a
    well-formed sequence of (id, length, data) records with at most one zip64 field."""
    found: tuple[bool, int, int] = (False, 0, 0)
    i = 0
    while i < length:
        if length - i < 4:
            return None
        xid, size = _u16(data, start + i)[0], _u16(data, start + i + 2)[0]
        if length - i - 4 < size:
            return None
        if xid == 1:
            if found[0]:
                return None
            found = (True, start + i + 4, size)
        i += 4 + size
    return found


def _apply_zip64(data: Any, z64: tuple[bool, int, int], fields: list[int]) -> list[int] | None:
    """`fields` with the saturated ones (0xffffffff) replaced by the zip64 field's values, 8 bytes each in order;
    None when the field holds more, fewer or none where one is needed."""
    want = 8 * sum(f == _SAT32 for f in fields)
    if z64[0] != (want != 0) or (z64[0] and z64[2] != want):
        return None
    at, out = z64[1], []
    for f in fields:
        if f == _SAT32:
            f, at = _u64(data, at)[0], at + 8
        out.append(f)
    return out


class _Directory(NamedTuple):
    """Where the central directory is, from the end record (and the zip64 end record when there is one)."""

    count: int  # entries
    offset: int  # of its first entry: where the members end
    end: int  # one past its last entry: where the end records begin


class _Central(NamedTuple):
    """What a central-directory entry says about its member, zip64 extensions applied."""

    name: str
    raw: bytes  # the name's bytes, as the local header must repeat them
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    local: int  # offset of the local header
    entry_end: int  # one past this central entry


class _Reader:
    """The checks of one archive, in the order parse() runs them; each raises PackageError naming the archive,
    the defect and the fix. runtime/src/base/zip.cpp's Reader has the same steps under the same names."""

    def __init__(self, data: Any, label: str) -> None:
        self.data, self.n, self.label = data, len(data), label

    def bad(self, why: str, fix: str = FIX) -> PackageError:
        return PackageError(f"{self.label}: not a valid .pt2 (zip) package: {why}", fix=fix)

    def not_zip(self) -> PackageError | None:
        """For a file that does not even start like a zip (no "PK"): that, instead of the first record missing."""
        if bytes(self.data[:2]) == b"PK":
            return None
        empty = ": the file is empty" if self.n == 0 else ""
        return PackageError(f"{self.label}: not a .pt2 package (not a zip archive{empty})", fix=FIX_NOT_ZIP)

    def end_record(self) -> int:
        """The end record: its comment must run exactly to the end of the file, at one position only."""
        data, n = self.data, self.n
        if n < _EOCD_SIZE:
            raise self.not_zip() or self.bad("the file is too short to be a zip archive (truncated?)")
        eocd = -1
        lowest = max(0, n - _EOCD_SIZE - 0xFFFF)
        i = n - _EOCD_SIZE
        while True:
            i = data.rfind(b"PK\x05\x06", lowest, i + 4)
            if i < 0:
                break
            if _u16(data, i + 20)[0] == n - i - _EOCD_SIZE:
                if eocd >= 0:
                    raise self.bad("the archive comment holds a second end-of-central-directory record")
                eocd = i
            if i == lowest:
                break
            i -= 1
        if eocd < 0:
            raise self.not_zip() or self.bad(
                "no end-of-central-directory record ending at the end of the file (truncated, or bytes appended)")
        disk, cd_disk, on_disk, count = struct.unpack_from("<HHHH", data, eocd + 4)
        if disk != 0 or cd_disk != 0 or on_disk != count:
            raise self.bad("a multi-disk archive")
        return eocd

    def zip64_end_record(self, eocd: int, count: int, cd_size: int, cd_offset: int) -> tuple[int, int, int, int]:
        """(count, size, offset, end) of the central directory: the zip64 end record's 64-bit values when a
        locator sits right before the end record (they must agree with the saturated fields they replace)."""
        data = self.data
        if eocd < _LOCATOR_SIZE or _u32(data, eocd - _LOCATOR_SIZE)[0] != _LOCATOR:
            return count, cd_size, cd_offset, eocd
        loc = eocd - _LOCATOR_SIZE
        loc_disk, at, disks = struct.unpack_from("<IQI", data, loc + 4)
        if loc_disk != 0 or disks > 1:
            raise self.bad("a multi-disk zip64 archive")
        if loc < _EOCD64_SIZE or at != loc - _EOCD64_SIZE:
            raise self.bad("the zip64 locator does not point at a zip64 end record right before it")
        rsig, rsize, _made, _need, rdisk, rcd_disk, ron_disk, count64, size64, offset64 = struct.unpack_from(
            "<IQHHIIQQQQ", data, at)
        if rsig != _EOCD64 or rsize != _EOCD64_SIZE - 12:
            raise self.bad("a malformed zip64 end record")
        if rdisk != 0 or rcd_disk != 0 or ron_disk != count64:
            raise self.bad("a multi-disk zip64 archive")
        if ((count != _SAT16 and count != count64) or (cd_size != _SAT32 and cd_size != size64)
                or (cd_offset != _SAT32 and cd_offset != offset64)):
            raise self.bad("the end record and the zip64 end record disagree")
        return count64, size64, offset64, at

    def directory(self) -> _Directory:
        eocd = self.end_record()
        count, cd_size, cd_offset = struct.unpack_from("<HII", self.data, eocd + 10)
        count, cd_size, cd_offset, cd_limit = self.zip64_end_record(eocd, count, cd_size, cd_offset)
        if cd_offset + cd_size != cd_limit:
            raise self.bad("the central directory does not end where the end record begins (bytes between or missing)")
        if count > cd_size // _CENTRAL_SIZE:
            raise self.bad(f"the end record claims {count} members in a {cd_size}-byte central directory")
        return _Directory(count, cd_offset, cd_limit)

    def central_entry(self, k: int, p: int, d: _Directory, names: set[str]) -> _Central:
        """Central entry k at offset p: its name (not one of `names`, those before it), a stored and unencrypted
        member on this disk, and its zip64 field holding exactly the saturated fields (usize, csize, offset)."""
        data, which = self.data, f"central directory entry {k}"
        if p + _CENTRAL_SIZE > d.end or _u32(data, p)[0] != _CENTRAL:
            raise self.bad(f"{which} is missing or truncated")
        (flags, method, _time, _date, crc, csize, usize, name_len, extra_len, comment_len,
         start_disk, _int, _ext, local) = struct.unpack_from("<HHHHIIIHHHHHII", data, p + 8)
        entry_end = p + _CENTRAL_SIZE + name_len + extra_len + comment_len
        if entry_end > d.end:
            raise self.bad(f"{which} runs past the central directory")
        raw = bytes(data[p + 46:p + 46 + name_len])
        defect = _name_defect(raw)
        if defect:
            raise self.bad(f"{which} has {defect}")
        name = raw.decode("utf-8")
        member = f"member '{name}'"
        if name in names:
            raise self.bad(f"two members are named '{name}'")
        names.add(name)
        if flags & _ENCRYPTED_FLAGS:
            raise self.bad(f"{member} is encrypted", FIX_ENCRYPTED)
        if method != 0:
            raise self.bad(f"{member} is compressed (method {method})", FIX_COMPRESSED)
        if start_disk != 0:
            raise self.bad(f"{member} starts on another disk (a multi-disk archive)")
        z64 = _zip64_field(data, p + 46 + name_len, extra_len)
        if z64 is None:
            raise self.bad(f"{member} has a malformed central extra field")
        values = _apply_zip64(data, z64, [usize, csize, local])
        if values is None:
            raise self.bad(f"{member}: its central zip64 field does not match the saturated header fields")
        usize, csize, local = values
        if csize != usize:
            raise self.bad(f"{member} is stored but its compressed and uncompressed sizes differ")
        return _Central(name, raw, flags, method, crc, csize, usize, local, entry_end)

    def local_header(self, c: _Central, d: _Directory) -> tuple[int, int]:
        """(offset of the member's data, one past its data and data descriptor): the local header must repeat
        what the central one says."""
        data, member = self.data, f"member '{c.name}'"
        if c.local + _LOCAL_SIZE > d.offset or _u32(data, c.local)[0] != _LOCAL:
            raise self.bad(f"{member}: no local header at offset {c.local}")
        lflags, lmethod, _ltime, _ldate, lcrc, lcsize, lusize, lname_len, lextra_len = struct.unpack_from(
            "<HHHHIIIHH", data, c.local + 6)
        data_offset = c.local + _LOCAL_SIZE + lname_len + lextra_len
        if data_offset > d.offset:
            raise self.bad(f"{member}: its local header runs past the members")
        if lname_len != len(c.raw) or bytes(data[c.local + 30:c.local + 30 + lname_len]) != c.raw:
            raise self.bad(f"{member}: the local header names another member")
        if lflags != c.flags or lmethod != c.method:
            raise self.bad(f"{member}: local and central headers disagree on flags or method")
        lz64 = _zip64_field(data, c.local + 30 + lname_len, lextra_len)
        if lz64 is None:
            raise self.bad(f"{member} has a malformed local extra field")
        values = _apply_zip64(data, lz64, [lusize, lcsize])
        if values is None:
            raise self.bad(f"{member}: its local zip64 field does not match the saturated header fields")
        lusize, lcsize = values
        data_end = data_offset + c.usize
        if data_end > d.offset:
            raise self.bad(f"{member}: its data runs past the members")
        if c.flags & _DESCRIPTOR_FLAG:
            # the local header holds zeros or the same values as the central one
            if not ((lcrc == 0 and lcsize == 0 and lusize == 0)
                    or (lcrc == c.crc and lcsize == c.csize and lusize == c.usize)):
                raise self.bad(f"{member}: local and central headers disagree on CRC-32 or sizes")
            return data_offset, self.check_data_descriptor(c, member, data_end, lz64[0], d.offset)
        if lcrc != c.crc or lcsize != c.csize or lusize != c.usize:
            raise self.bad(f"{member}: local and central headers disagree on CRC-32 or sizes")
        return data_offset, data_end

    def check_data_descriptor(self, c: _Central, member: str, data_end: int, wide: bool, limit: int) -> int:
        """One past the data descriptor: sizes and CRC after the data (optionally after a signature), 8-byte
        sizes when the local header carries a zip64 field (`wide`)."""
        q, width = data_end, 8 if wide else 4
        if q + 4 <= limit and _u32(self.data, q)[0] == _DESCRIPTOR:
            q += 4
        desc_end = q + 4 + 2 * width
        if desc_end > limit:
            raise self.bad(f"{member}: its data descriptor is truncated")
        dcrc, dcsize, dusize = struct.unpack_from("<IQQ" if wide else "<III", self.data, q)
        if dcrc != c.crc or dcsize != c.csize or dusize != c.usize:
            raise self.bad(f"{member}: its data descriptor and central header disagree")
        return desc_end

    def check_tiling(self, spans: list[tuple[int, int, str]], d: _Directory) -> None:
        """The members and the central directory tile the file: no bytes before the first member, between two
        members or before the central directory (prepended data, hidden or overlapping members)."""
        expect = 0
        for local, end, name in sorted(spans, key=lambda s: s[0]):
            if local < expect:
                raise self.bad(f"member '{name}' overlaps the member before it")
            if local > expect:
                where = "data before the first member" if expect == 0 else "between members"
                raise self.bad(f"{local - expect} unlisted bytes at offset {expect} ({where})")
            expect = end
        if expect != d.offset:
            raise self.bad(f"{d.offset - expect} unlisted bytes at offset {expect} (before the central directory)")


def parse(data: Any, label: str) -> dict[str, Member]:
    """The members of the archive held in `data` (bytes or a mapping), in central-directory order; raises
    PackageError naming `label`, the defect and the fix."""
    reader = _Reader(data, label)
    d = reader.directory()
    members: dict[str, Member] = {}
    spans: list[tuple[int, int, str]] = []  # (local header offset, end of member, name)
    names: set[str] = set()
    p = d.offset
    for k in range(d.count):
        c = reader.central_entry(k, p, d, names)
        data_offset, member_end = reader.local_header(c, d)
        members[c.name] = Member(c.name, data_offset, c.usize, c.crc)
        spans.append((c.local, member_end, c.name))
        p = c.entry_end
    if p != d.end:
        raise reader.bad("the central directory has bytes after its last entry")
    reader.check_tiling(spans, d)
    return members


class Package:
    """An open .pt2: `members` (name -> Member, in central-directory order) and `read(name)`. Use it as a
    context manager (or call close()) to release the file's mapping."""

    def __init__(self, path: Path, data: Any, members: dict[str, Member]) -> None:
        self.path = path
        self.members = members
        self._data = data

    def read(self, name: str) -> bytes:
        """The bytes of member `name`, after checking them against the CRC-32 the archive declares."""
        m = self.members.get(name)
        if m is None:
            raise PackageError(f"{self.path}: the package has no member '{name}'",
                               fix="list the package's members with aoti-toolchain inspect")
        out = bytes(self._data[m.data_offset:m.data_offset + m.size])
        actual = zlib.crc32(out)
        if actual != m.crc32:
            raise PackageError(f"{self.path}: member '{name}' is corrupt: the CRC-32 of its bytes is {actual:08x}, "
                               f"the archive declares {m.crc32:08x}", fix=FIX_CRC)
        return out

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()
        self._data = b""

    def __enter__(self) -> Package:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_package(path: str | os.PathLike[str]) -> Package:
    """Open and check the package at `path` (a regular file: FIFOs and devices are refused before any read)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise PackageError(f"{path}: cannot open: {exc.strerror}", fix="pass the path of a .pt2 package") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PackageError(f"{path}: not a regular file", fix="pass the path of a .pt2 package")
        data: Any = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size > 0 else b""
    except OSError as exc:
        raise PackageError(f"{path}: cannot read: {exc.strerror}", fix="pass the path of a .pt2 package") from None
    finally:
        os.close(fd)
    try:
        members = parse(data, str(path))
    except BaseException:
        if isinstance(data, mmap.mmap):
            data.close()
        raise
    return Package(path, data, members)
