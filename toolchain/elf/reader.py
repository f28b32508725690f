"""A small, bounds-checked ELF reader for what the loader looks at: headers, program headers, the dynamic
section, the dynamic symbol table and its version tables, and the notes (SHT_NOTE sections, or PT_NOTE
segments when the section headers are gone). The one ELF reader of the toolchain: verify, inspect, the
post-link step and the configuration records all read through it; lief only writes (toolchain/elf/patcher.py).

Why not lief here: `lief.parse` of a 1 GB plugin takes seconds and a gigabyte of memory, and lief can crash
the interpreter on hostile input. This reader maps the file and touches only the few pages it
needs, and every offset is checked against the file size, so malformed input ends in `NotElfError`,
`TruncatedError` or `MalformedError` (all `InputError`s), never in a crash or a hang.
"""

from __future__ import annotations

import mmap
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.elf.base import (
    DF_1_NODELETE,
    DF_TEXTREL,
    DT_FLAGS,
    DT_FLAGS_1,
    DT_NEEDED,
    DT_NULL,
    DT_RPATH,
    DT_RUNPATH,
    DT_SONAME,
    DT_STRSZ,
    DT_STRTAB,
    DT_TEXTREL,
    ET_NAMES,
    MACHINES,
    MAX_DYNAMIC_ENTRIES,
    MAX_NOTES,
    MAX_SYMBOLS,
    PF_R,
    PF_W,
    PF_X,
    PT_DYNAMIC,
    PT_GNU_STACK,
    PT_INTERP,
    PT_LOAD,
    PT_NOTE,
    SHT_DYNSYM,
    SHT_GNU_HASH,
    SHT_NOTE,
    SHT_VERDEF,
    SHT_VERNEED,
    SHT_VERSYM,
    ElfError,
    MalformedError,
    Note,
    NotElfError,
    Section,
    Segment,
    Symbol,
    TruncatedError,
    _View,
    program_headers,
    read_header,
    section_headers,
)
from toolchain.elf.symtab import DynSymTable
from toolchain.errors import InputError

__all__ = [
    "MAX_SYMBOLS", "PF_R", "PF_W", "PF_X", "PT_GNU_STACK", "PT_LOAD", "PT_NOTE", "SHT_DYNSYM", "SHT_GNU_HASH",
    "SHT_VERDEF", "SHT_VERNEED", "SHT_VERSYM", "ElfError", "ElfFile", "MalformedError", "Note", "NotElfError",
    "PARSES", "Segment", "Symbol", "TruncatedError", "open_library", "parse_elf", "read_elf",
]

#: How often each file (by name) was parsed in this process: a linked binary is parsed once per check.
PARSES: Counter[str] = Counter()

@dataclass(frozen=True)
class ElfFile:
    """What the reader keeps of one ELF file: headers, segments, dynamic section, symbols, versions, notes."""

    name: str  # path or "<pt2>!member"
    size: int
    elf_class: int  # 32 | 64
    little_endian: bool
    machine: str
    machine_id: int
    etype: str
    interp: str | None
    segments: tuple[Segment, ...]
    needed: tuple[str, ...]
    soname: str | None
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    flags: int
    flags_1: int
    textrel: bool
    symbols: tuple[Symbol, ...]
    verneed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    verdef: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()

    @property
    def gnu_stack(self) -> Segment | None:
        return next((s for s in self.segments if s.type == PT_GNU_STACK), None)

    @property
    def exec_stack(self) -> bool:
        """The loader gives an object without PT_GNU_STACK an executable stack too."""
        seg = self.gnu_stack
        return seg is None or bool(seg.flags & PF_X)

    @property
    def nodelete(self) -> bool:
        return bool(self.flags_1 & DF_1_NODELETE)

    @property
    def is_program(self) -> bool:
        return self.interp is not None or self.etype == "EXEC"

    def defined(self) -> dict[str, list[Symbol]]:
        out: dict[str, list[Symbol]] = {}
        for s in self.symbols:
            if s.defined and s.binding != "LOCAL":
                out.setdefault(s.name, []).append(s)
        return out


def read_elf(path: Path | str) -> ElfFile:
    """Read an ELF file from disk (mapped, so a 1 GB plugin costs only the pages we touch)."""
    p = str(Path(path))
    try:
        with open(p, "rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                msg = f"{p}: empty file, not an ELF object"
                raise NotElfError(msg, fix="pass a plugin .so, a .pt2, a host program or a shared library")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return parse_elf(mm, str(p))
    except FileNotFoundError:
        msg = f"{p}: no such file"
        raise InputError(msg, fix="check the path") from None
    except IsADirectoryError:
        msg = f"{p}: is a directory"
        raise InputError(msg, fix="pass a file") from None
    except PermissionError as exc:
        msg = f"{p}: cannot read: {exc.strerror}"
        raise InputError(msg, fix="check the file's permissions") from None


def parse_elf(buf, name: str, with_symbols: bool = True, _tables: list | None = None) -> ElfFile:
    """Parse ELF bytes (bytes, bytearray or mmap). with_symbols=False skips the symbol table (libraries are
    then searched by name with `DynSymTable.lookup`; `_tables` receives that table)."""
    PARSES[name] += 1
    n = len(buf)
    h, v = read_header(buf, name)
    is64, little, etype, machine = h.is64, h.little, h.etype, h.machine
    segments = [seg for _at, seg in program_headers(v, h)]
    interp = None
    for s in segments:
        if s.type == PT_INTERP:
            v.need(s.offset, s.filesz, "PT_INTERP")
            interp = bytes(buf[s.offset:s.offset + s.filesz]).split(b"\0", 1)[0].decode("utf-8", "replace")
    sections = section_headers(v, h)
    dyn = _dynamic(v, is64, segments)
    strtab = _strtab(v, segments, sections, dyn)

    def dstr(idx: int, what: str) -> str:
        if strtab is None:
            raise MalformedError(f"{name}: {what} but no dynamic string table", fix="rebuild the file")
        return v.cstr(strtab[0], strtab[1], idx, what)

    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    soname: str | None = None
    flags = flags_1 = 0
    textrel = False
    for tag, val in dyn:
        if tag == DT_NEEDED:
            needed.append(dstr(val, "DT_NEEDED"))
        elif tag == DT_RUNPATH:
            runpath.extend(p for p in dstr(val, "DT_RUNPATH").split(":") if p)
        elif tag == DT_RPATH:
            rpath.extend(p for p in dstr(val, "DT_RPATH").split(":") if p)
        elif tag == DT_SONAME:
            soname = dstr(val, "DT_SONAME")
        elif tag == DT_FLAGS:
            flags = val
        elif tag == DT_FLAGS_1:
            flags_1 = val
        elif tag == DT_TEXTREL:
            textrel = True
    textrel = textrel or bool(flags & DF_TEXTREL)
    table = DynSymTable(v, is64, sections, name)
    if _tables is not None:
        _tables.append(table)
    symbols = table.all() if with_symbols else ()
    verneed = {k: tuple(x) for k, x in table.verneed.items()}
    verdef = tuple(table.verdef)
    return ElfFile(name=name, size=n, elf_class=64 if is64 else 32, little_endian=little,
                   machine=MACHINES.get(machine, f"EM_{machine}"), machine_id=machine,
                   etype=ET_NAMES.get(etype, f"ET_{etype}"), interp=interp, segments=tuple(segments),
                   needed=tuple(needed), soname=soname, runpath=tuple(runpath), rpath=tuple(rpath), flags=flags,
                   flags_1=flags_1, textrel=textrel, symbols=symbols, verneed=verneed, verdef=verdef,
                   notes=_notes(v, segments, sections))


def _dynamic(v: _View, is64: bool, segments: list[Segment]) -> list[tuple[int, int]]:
    seg = next((s for s in segments if s.type == PT_DYNAMIC), None)
    if seg is None:
        return []
    fmt = "qQ" if is64 else "iI"
    ent = struct.calcsize("<" + fmt)
    v.need(seg.offset, min(seg.filesz, ent), "the dynamic section (PT_DYNAMIC)")
    out = []
    count = min(seg.filesz // ent, MAX_DYNAMIC_ENTRIES)
    for i in range(count):
        tag, val = v.unpack(fmt, seg.offset + i * ent, "a dynamic section entry")
        if tag == DT_NULL:
            break
        out.append((tag, val))
    return out


def _vaddr_to_offset(segments: list[Segment], addr: int) -> int | None:
    for s in segments:
        if s.type == PT_LOAD and s.vaddr <= addr < s.vaddr + s.filesz:
            return s.offset + (addr - s.vaddr)
    return None


def _strtab(v: _View, segments, sections, dyn) -> tuple[int, int] | None:
    """The dynamic string table, located as the loader does (DT_STRTAB/DT_STRSZ through PT_LOAD)."""
    tags = dict(dyn)
    if DT_STRTAB in tags and DT_STRSZ in tags:
        off = _vaddr_to_offset(segments, tags[DT_STRTAB])
        if off is None:
            raise MalformedError(f"{v.name}: DT_STRTAB address {tags[DT_STRTAB]:#x} is in no loadable segment",
                                 fix="rebuild the file")
        v.need(off, tags[DT_STRSZ], "the dynamic string table")
        return off, tags[DT_STRSZ]
    dynsym = next((s for s in sections if s.type == SHT_DYNSYM), None)
    if dynsym is not None and 0 <= dynsym.link < len(sections):
        st = sections[dynsym.link]
        v.need(st.offset, st.size, "the dynamic string table")
        return st.offset, st.size
    return None


def _notes(v: _View, segments: list[Segment], sections: list[Section]) -> tuple[Note, ...]:
    """Every note: from the SHT_NOTE sections, or from the PT_NOTE segments of a file whose section headers
    were stripped (sstrip). The same notes are in both when both exist, so only one source is read."""
    regions = [(s.offset, s.size) for s in sections if s.type == SHT_NOTE]
    if not sections:
        regions = [(s.offset, s.filesz) for s in segments if s.type == PT_NOTE]
    out: list[Note] = []
    for off, size in regions:
        out.extend(_note_entries(v, off, size, MAX_NOTES - len(out)))
    return tuple(out)


def _note_entries(v: _View, off: int, size: int, limit: int) -> list[Note]:
    v.need(off, size, "a note section")
    end = off + size
    out: list[Note] = []
    while off + 12 <= end:
        namesz, descsz, ntype = v.unpack("III", off, "a note header")
        name_at = off + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        if desc_at + descsz > end:
            raise MalformedError(f"{v.name}: a note at offset {off} claims {namesz}+{descsz} bytes, past the end "
                                 "of its section", fix="the file is corrupt: rebuild it")
        if len(out) >= limit:
            raise MalformedError(f"{v.name}: more than {MAX_NOTES} notes", fix="the file is corrupt: rebuild it")
        owner = bytes(v.buf[name_at:name_at + namesz]).split(b"\0", 1)[0].decode("utf-8", "replace")
        out.append(Note(owner, ntype, bytes(v.buf[desc_at:desc_at + descsz])))
        off = desc_at + ((descsz + 3) & ~3)
    return out


def parse_note_bytes(data: bytes, name: str = "<notes>", little_endian: bool = True) -> tuple[Note, ...]:
    """The notes in the bytes of one note section or PT_NOTE segment."""
    return tuple(_note_entries(_View(data, name, little_endian), 0, len(data), MAX_NOTES))


def open_library(path: Path | str) -> tuple[ElfFile, DynSymTable]:
    """A library for symbol lookup: headers parsed now, symbols found by name later (the file stays mapped
    while the table is alive)."""
    p = str(Path(path))
    with open(p, "rb") as f:
        if f.seek(0, 2) == 0:
            raise NotElfError(f"{p}: empty file, not an ELF object", fix="reinstall the library")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    tables: list[DynSymTable] = []
    elf = parse_elf(mm, str(p), with_symbols=False, _tables=tables)
    return elf, tables[0]
