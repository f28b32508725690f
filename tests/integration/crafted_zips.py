"""Crafted zip archives for the package readers (runtime/src/base/zip.cpp and toolchain/pt2.py), generated in
memory so that nothing binary is committed.

`build(members, ...)` writes a well-formed archive of stored members the way torch (data descriptors,
64-byte aligned data behind an 'FB' padding field, zip64 end records) or a plain writer does, and returns
its bytes with the offsets of every record, so that a crafted case patches exactly one field.
`corpus()` is the set the differential test runs: name -> Case(bytes, accepted), every refusal class of
the readers plus valid archives. `rebuild()` re-writes a package's members, optionally with a forged
CRC-32 for some of them (a poisoning attempt that is well-formed except for the CRC).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

SAT32 = 0xFFFFFFFF
SAT16 = 0xFFFF
NEAR_2_64 = 2**64 - 16  # offsets that wrapped naive "offset + size > file size" checks


@dataclass
class M:
    """One member: `descriptor` writes torch's layout (flag 0x808, zeros in the local header, a data
    descriptor after the data, `desc_sig` with its signature); `align` pads the local extra field so the
    data starts on that boundary (torch uses 64); `z64` saturates the sizes and offset into zip64 fields."""

    name: str | bytes
    data: bytes
    descriptor: bool = False
    desc_sig: bool = True
    align: int = 0
    z64: bool = False

    @property
    def raw_name(self) -> bytes:
        return self.name.encode() if isinstance(self.name, str) else self.name


@dataclass
class Layout:
    data: bytearray
    local: list[int] = field(default_factory=list)      # offset of each local header
    data_at: list[int] = field(default_factory=list)    # offset of each member's bytes
    central: list[int] = field(default_factory=list)    # offset of each central entry
    cd_offset: int = 0
    eocd64: int = -1
    locator: int = -1
    eocd: int = 0

    def bytes(self) -> bytes:
        return bytes(self.data)

    def put(self, fmt: str, offset: int, *values: int) -> Layout:
        struct.pack_into("<" + fmt, self.data, offset, *values)
        return self


def build(members: list[M], *, comment: bytes = b"", zip64: str | None = None) -> Layout:
    """zip64: None (no zip64 end records), "exact" (records, 16/32-bit fields hold the values, as torch
    writes), or "saturated" (records, 16/32-bit fields all 0xFFFF/0xFFFFFFFF)."""
    out = bytearray()
    lay = Layout(out)
    central = []
    for m in members:
        name, crc, size = m.raw_name, zlib.crc32(m.data), len(m.data)
        flags = 0x0808 if m.descriptor else 0x0800
        local = len(out)
        lay.local.append(local)
        lcrc, lsize = (0, 0) if m.descriptor else (crc, size)
        lextra = b""
        if m.z64:
            lextra = struct.pack("<HHQQ", 1, 16, lsize, lsize)
            lsize = SAT32
        if m.align:
            start = local + 30 + len(name) + len(lextra) + 4
            pad = -start % m.align
            lextra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, 0, 0, 0x21, lcrc, lsize, lsize, len(name),
                           len(lextra)) + name + lextra
        lay.data_at.append(len(out))
        out += m.data
        if m.descriptor:
            if m.desc_sig:
                out += struct.pack("<I", 0x08074B50)
            out += struct.pack("<IQQ", crc, size, size) if m.z64 else struct.pack("<III", crc, size, size)
        if m.z64:
            cextra, csize, coff = struct.pack("<HHQQQ", 1, 24, size, size, local), SAT32, SAT32
        else:
            cextra, csize, coff = b"", size, local
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, flags, 0, 0, 0x21, crc, csize, csize,
                                   len(name), len(cextra), 0, 0, 0, 0o644 << 16, coff) + name + cextra)
    lay.cd_offset = len(out)
    for c in central:
        lay.central.append(len(out))
        out += c
    cd_size = len(out) - lay.cd_offset
    count = len(members)
    if zip64:
        lay.eocd64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, count, count, cd_size, lay.cd_offset)
        lay.locator = len(out)
        out += struct.pack("<IIQI", 0x07064B50, 0, lay.eocd64, 1)
    cd_off_field = lay.cd_offset
    if zip64 == "saturated":
        count, cd_size, cd_off_field = SAT16, SAT32, SAT32
    lay.eocd = len(out)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_off_field, len(comment)) + comment
    return lay


def rebuild(members: list[tuple[str, bytes]], *, forged_crc: dict[str, int] | None = None,
            torch_style: bool = True) -> bytes:
    """A package of `members` (name, bytes); members named in `forged_crc` declare that CRC-32 instead of
    their own (in the local header, the central header and the descriptor alike: only the bytes disagree)."""
    ms = [M(n, d, descriptor=torch_style, align=64 if torch_style else 0) for n, d in members]
    lay = build(ms, zip64="exact" if torch_style else None)
    for i, m in enumerate(ms):
        crc = (forged_crc or {}).get(str(m.name))
        if crc is None:
            continue
        lay.put("I", lay.central[i] + 16, crc)
        if m.descriptor:
            lay.put("I", lay.data_at[i] + len(m.data) + 4, crc)
        else:
            lay.put("I", lay.local[i] + 14, crc)
    return lay.bytes()


@dataclass(frozen=True)
class Case:
    data: bytes
    accepted: bool  # what both readers must decide


PKG = "model"
PACKAGE_SHAPED = [
    (f"{PKG}/data/aotinductor/model/cabc123.cpp", b"// generated wrapper\n" * 40),
    (f"{PKG}/data/aotinductor/model/cabc123.so", b"\x7fELF" + bytes(range(256)) * 8),
    (f"{PKG}/data/aotinductor/model/cabc123_metadata.json", b'{"AOTI_DEVICE_KEY": "cpu"}'),
    (f"{PKG}/data/aotinductor/model/cabc123.wrapper_weights.blob", bytes(4096)),
    (f"{PKG}/archive_format", b"pt2"),
    (f"{PKG}/archive_version", b"0"),
    (f"{PKG}/.data/version", b"1\n"),
    (f"{PKG}/byteorder", b"little"),
    (f"{PKG}/extra/aoti_toolchain_contract.json", b'{"inputs": [], "outputs": []}'),
]


def _two(**kw: object) -> list[M]:
    return [M("pkg/a.txt", b"first member " * 5, **kw), M("pkg/b.bin", bytes(range(200)), **kw)]  # type: ignore[arg-type]


def _python_zipfile(append_to: bytes | None = None) -> bytes:
    buf = io.BytesIO(append_to or b"")
    with zipfile.ZipFile(buf, "a" if append_to else "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{PKG}/extra/aoti_toolchain_contract.json", b'{"inputs": []}')
        zf.writestr(f"{PKG}/extra/aoti_toolchain_constants.json", b"[]")
    return buf.getvalue()


def _deflated() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/data/aotinductor/model/x.so", b"\x7fELF" + bytes(1000))
    return buf.getvalue()


def _hidden_member() -> bytes:
    """Member A's bytes hold a whole local header + data of member B, and B's central entry points there:
    the same bytes are part of two members (the real B after A is left unlisted)."""
    inner = build([M("pkg/b.so", b"payload B")])
    lay = build([M("pkg/a.bin", inner.bytes()[:inner.cd_offset]), M("pkg/b.so", b"payload B")])
    lay.put("I", lay.central[1] + 42, lay.data_at[0])
    return lay.bytes()


def corpus() -> dict[str, Case]:
    torch_like = [M(n, d, descriptor=True, align=64) for n, d in PACKAGE_SHAPED]
    valid: dict[str, bytes] = {
        "valid_one_member": build([M("pkg/data/aotinductor/model/x.so", b"\x7fELF" + bytes(300))]).bytes(),
        "valid_two_members": build(_two()).bytes(),
        "valid_empty_archive": build([]).bytes(),
        "valid_empty_member": build([M("pkg/empty", b""), M("pkg/one", b"1")]).bytes(),
        "valid_comment": build(_two(), comment=b"a comment, not an end record").bytes(),
        "valid_package_shaped": build([M(n, d) for n, d in PACKAGE_SHAPED]).bytes(),
        "valid_torch_style": build(torch_like, zip64="exact").bytes(),
        "valid_torch_style_no_zip64": build(torch_like).bytes(),
        "valid_descriptor_without_signature": build(_two(descriptor=True, desc_sig=False)).bytes(),
        "valid_zip64_saturated_end": build(_two(), zip64="saturated").bytes(),
        "valid_zip64_member_fields": build(_two(z64=True), zip64="exact").bytes(),
        "valid_zip64_member_descriptor": build(_two(z64=True, descriptor=True), zip64="saturated").bytes(),
        "valid_utf8_name": build([M("pkg/modèle/ünïcode.json", b"{}")]).bytes(),
        "valid_python_zipfile": _python_zipfile(),
        "valid_python_append_to_torch_style": _python_zipfile(build(torch_like[:-1], zip64="exact").bytes()),
    }
    refused: dict[str, bytes] = {}

    base = build(_two())
    good = base.bytes()
    refused["truncated_empty_file"] = b""
    refused["truncated_to_21_bytes"] = good[:21]
    refused["truncated_half"] = good[:len(good) // 2]
    refused["truncated_last_byte"] = good[:-1]
    refused["truncated_members_only"] = good[:base.cd_offset]
    refused["prepended_junk_offsets_relative"] = b"#!/bin/sh\nexit 0\n" + good
    shifted = b"X" * 100 + good
    lay = Layout(bytearray(shifted))
    for c in base.central:
        lay.put("I", 100 + c + 42, struct.unpack_from("<I", good, c + 42)[0] + 100)
    lay.put("I", 100 + base.eocd + 16, base.cd_offset + 100)
    refused["prepended_junk_offsets_absolute"] = lay.bytes()
    # A whole other package in front: Python's zipfile reads the second archive (it corrects for the
    # prefix), a reader that trusted the offsets read the first one.
    other = build([M("pkg/data/aotinductor/model/x.so", b"\x7fELF other plugin")]).bytes()
    refused["prepended_other_package"] = other + build([M("pkg/data/aotinductor/model/x.so", b"\x7fELF real")]).bytes()
    refused["appended_junk"] = good + b"\0" * 7
    refused["appended_second_archive"] = good + other
    refused["comment_length_short"] = build(_two(), comment=b"abcdef").put("H", base.eocd + 20, 3).bytes()
    refused["comment_holds_end_record"] = build(_two(), comment=good[base.eocd:]).bytes()
    refused["gap_between_members"] = _gap(_two(), after=0)
    refused["gap_before_central_directory"] = _gap(_two(), after=1)
    refused["central_directory_trailing_bytes"] = _cd_trailing()
    refused["overlapping_member"] = _hidden_member()
    refused["duplicate_member"] = build([M("pkg/a.so", b"one"), M("pkg/a.so", b"two")]).bytes()
    lay = build(_two())
    lay.put("I", lay.central[1] + 42, 0)
    refused["two_entries_one_local_header"] = lay.bytes()
    lay = build(_two())
    lay.data[lay.local[0] + 30] ^= 0x20  # 'p' -> 'P' in the local name only
    refused["local_name_differs"] = lay.bytes()
    refused["local_method_differs"] = build(_two()).put("H", base.local[0] + 8, 8).bytes()
    refused["local_flags_differ"] = build(_two()).put("H", base.local[1] + 6, 0x0802).bytes()
    refused["local_crc_differs"] = build(_two()).put("I", base.local[0] + 14, 0x12345678).bytes()
    refused["local_size_differs"] = build(_two()).put("I", base.local[1] + 22, 199).bytes()
    refused["stored_sizes_differ"] = build(_two()).put("I", base.central[0] + 20, 64).put(
        "I", base.local[0] + 18, 64).bytes()
    lay = build(_two(descriptor=True))
    lay.put("I", lay.data_at[0] + len(_two()[0].data) + 8, 1)  # descriptor's compressed size
    refused["descriptor_differs"] = lay.bytes()
    lay = build(_two())
    for off in (lay.central[1] + 16, lay.local[1] + 14):
        lay.put("I", off, 0xDEADBEEF)
    refused["forged_crc"] = lay.bytes()
    refused["forged_crc_torch_style"] = rebuild(PACKAGE_SHAPED, forged_crc={PACKAGE_SHAPED[1][0]: 0x0BADC0DE})
    refused["compressed_member"] = _deflated()
    refused["encrypted_flag"] = build(_two()).put("H", base.central[0] + 8, 0x0801).put(
        "H", base.local[0] + 6, 0x0801).bytes()
    refused["multi_disk_end_record"] = build(_two()).put("H", base.eocd + 4, 1).bytes()
    refused["member_on_other_disk"] = build(_two()).put("H", base.central[1] + 34, 1).bytes()
    for label, name in [("backslash", "pkg\\data\\x.so"), ("dotdot", "pkg/../../etc/x.so"),
                        ("absolute", "/etc/x.so"), ("empty_component", "pkg//x.so"),
                        ("trailing_slash", "pkg/data/"), ("dot_component", "pkg/./x.so")]:
        refused[f"name_{label}"] = build([M(name, b"x")]).bytes()
    refused["name_nul"] = build([M(b"pkg/x.so\0.txt", b"x")]).bytes()
    refused["name_empty"] = build([M(b"", b"x")]).bytes()
    refused["name_not_utf8"] = build([M(b"pkg/\xff\xfe.so", b"x")]).bytes()
    refused["name_overlong_utf8"] = build([M(b"pkg/\xc0\xaf.so", b"x")]).bytes()
    refused["name_surrogate_utf8"] = build([M(b"pkg/\xed\xa0\x80.so", b"x")]).bytes()
    refused["count_0xffff_tiny_cd"] = build(_two()).put("HH", base.eocd + 8, SAT16, SAT16).bytes()
    refused["count_exceeds_cd"] = build(_two()).put("HH", base.eocd + 8, 3, 3).bytes()
    z = build(_two(), zip64="exact")
    refused["zip64_count_2_32_tiny_cd"] = build(_two(), zip64="saturated").put(
        "QQ", z.eocd64 + 24, 2**32, 2**32).bytes()
    refused["zip64_locator_near_2_64"] = build(_two(), zip64="exact").put("Q", z.locator + 8, NEAR_2_64).bytes()
    refused["zip64_locator_not_adjacent"] = build(_two(), zip64="exact").put("Q", z.locator + 8, z.eocd64 - 8).bytes()
    refused["zip64_end_record_bad_signature"] = build(_two(), zip64="exact").put("I", z.eocd64, 0x06064B51).bytes()
    refused["zip64_end_record_bad_size"] = build(_two(), zip64="exact").put("Q", z.eocd64 + 4, 52).bytes()
    refused["zip64_disagrees_on_count"] = build(_two(), zip64="exact").put("QQ", z.eocd64 + 24, 1, 1).bytes()
    refused["zip64_disagrees_on_cd_offset"] = build(_two(), zip64="exact").put("I", z.eocd + 16, 0).bytes()
    refused["zip64_multi_disk_locator"] = build(_two(), zip64="exact").put("I", z.locator + 16, 2).bytes()
    z = build(_two(z64=True), zip64="exact")
    # The second crash class: a central entry whose local-header offset (in its zip64 field) is near 2^64.
    refused["zip64_local_offset_near_2_64"] = build(_two(z64=True), zip64="exact").put(
        "Q", z.central[1] + 46 + len(b"pkg/b.bin") + 4 + 16, NEAR_2_64).bytes()
    refused["zip64_size_near_2_64"] = build(_two(z64=True), zip64="exact").put(
        "QQ", z.central[0] + 46 + len(b"pkg/a.txt") + 4, NEAR_2_64, NEAR_2_64).bytes()
    refused["zip64_extra_without_saturated_field"] = _zip64_unneeded()
    refused["zip64_saturated_field_without_extra"] = build(_two()).put("I", base.central[0] + 42, SAT32).bytes()
    refused["zip64_extra_wrong_length"] = build(_two(z64=True)).put(
        "H", z.central[0] + 46 + len(b"pkg/a.txt") + 2, 16).bytes()
    refused["zip64_local_extra_missing"] = build(_two()).put("II", base.local[0] + 18, SAT32, SAT32).bytes()
    refused["malformed_extra_field"] = _bad_extra()
    refused["data_runs_past_members"] = build(_two()).put("I", base.central[1] + 20, 10**6).put(
        "I", base.central[1] + 24, 10**6).bytes()
    refused["local_offset_in_central_directory"] = build(_two()).put("I", base.central[1] + 42, base.cd_offset).bytes()

    cases = {k: Case(v, True) for k, v in valid.items()}
    cases.update({k: Case(v, False) for k, v in refused.items()})
    return cases


def _gap(members: list[M], after: int) -> bytes:
    """Junk inserted after member `after` (its end), every later offset corrected: only the gap is wrong."""
    lay = build(members)
    cut = lay.local[after + 1] if after + 1 < len(members) else lay.cd_offset
    junk = b"JUNK" * 4
    data = bytearray(lay.data[:cut] + junk + lay.data[cut:])
    shifted = Layout(data)
    for i, c in enumerate(lay.central):
        if lay.local[i] >= cut:
            shifted.put("I", c + len(junk) + 42, lay.local[i] + len(junk))
    shifted.put("I", lay.eocd + len(junk) + 16, lay.cd_offset + len(junk))
    return shifted.bytes()


def _cd_trailing() -> bytes:
    lay = build(_two())
    junk = b"\0" * 46
    data = bytearray(lay.data[:lay.eocd] + junk + lay.data[lay.eocd:])
    out = Layout(data)
    cd_size = struct.unpack_from("<I", data, lay.eocd + len(junk) + 12)[0]
    out.put("I", lay.eocd + len(junk) + 12, cd_size + len(junk))
    return out.bytes()


def _zip64_unneeded() -> bytes:
    """A central zip64 field although no header field is saturated."""
    name = b"pkg/a.so"
    data = b"abc"
    crc = zlib.crc32(data)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x800, 0, 0, 0x21, crc, 3, 3, len(name), 0) + name + data
    extra = struct.pack("<HHQ", 1, 8, 3)
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0x800, 0, 0, 0x21, crc, 3, 3, len(name),
                          len(extra), 0, 0, 0, 0, 0) + name + extra
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local), 0)
    return local + central + eocd


def _bad_extra() -> bytes:
    """A local extra area whose one record claims more bytes than the area holds."""
    lay = build([M("pkg/a.so", b"abc", align=64)])
    name_len = len(b"pkg/a.so")
    lay.put("H", lay.local[0] + 30 + name_len + 2, 1000)
    return lay.bytes()
