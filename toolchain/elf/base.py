"""What the ELF reader and the dynamic symbol table share: the constants of elf.h we use, the errors, the
records (segments, symbols, notes) and the bounds-checked view of a file's bytes."""

from __future__ import annotations

import struct
from typing import NamedTuple

from toolchain.errors import InputError

# e_machine values we name (elf.h)
MACHINES = {0: "NONE", 2: "SPARC", 3: "i386", 8: "MIPS", 20: "PPC", 21: "PPC64", 22: "S390", 40: "ARM",
            62: "x86_64", 183: "aarch64", 243: "riscv", 258: "loongarch"}
ET_NAMES = {0: "NONE", 1: "REL", 2: "EXEC", 3: "DYN", 4: "CORE"}
PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_NOTE, PT_GNU_STACK = 1, 2, 3, 4, 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4
SHT_DYNSYM, SHT_VERDEF, SHT_VERNEED, SHT_VERSYM = 11, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
SHT_NOTE, SHT_GNU_HASH = 7, 0x6FFFFFF6
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH = 0, 1, 5, 10, 14, 15
DT_TEXTREL, DT_FLAGS, DT_RUNPATH, DT_FLAGS_1 = 22, 30, 29, 0x6FFFFFFB
DF_TEXTREL, DF_1_NODELETE = 0x4, 0x8
STB_NAMES = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
STT_NAMES = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON", 6: "TLS", 10: "IFUNC"}
STV_NAMES = {0: "DEFAULT", 1: "INTERNAL", 2: "HIDDEN", 3: "PROTECTED"}
MAX_DYNAMIC_ENTRIES = 1 << 16
MAX_SYMBOLS = 1 << 22
MAX_NOTES = 1 << 16


class ElfError(InputError):
    """The file is not a readable ELF object. `rule` is the verifier's rule id for it."""

    rule = "malformed"
    fix_variant: str | None = None  # which of the rule's fixes (toolchain/spec/rules.toml) a finding gives


class NotElfError(ElfError):
    rule = "not-elf"


class TruncatedError(ElfError):
    rule = "truncated"


class MalformedError(ElfError):
    rule = "malformed"


class Segment(NamedTuple):
    """One program header (PT_LOAD, PT_GNU_STACK, ...)."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class Symbol(NamedTuple):
    """One dynamic symbol: name, defined or not, binding, type, visibility and version."""

    name: str
    defined: bool
    binding: str
    type: str
    visibility: str
    version: str | None  # version name (GLIBC_2.34), None when unversioned / base
    hidden: bool  # a non-default version (name@VER rather than name@@VER)
    version_file: str | None  # for an undefined, versioned reference: the library named in verneed


class Note(NamedTuple):
    """One ELF note (a SHT_NOTE section's or PT_NOTE segment's entry)."""

    owner: str
    type: int
    desc: bytes


class _View:
    """Bounds-checked access to the file's bytes."""

    def __init__(self, buf, name: str, little: bool) -> None:
        self.buf, self.name, self.end = buf, name, len(buf)
        self.e = "<" if little else ">"

    def need(self, off: int, size: int, what: str) -> None:
        if off < 0 or size < 0 or off + size > self.end:
            msg = f"{self.name}: {what} at offset {off} (+{size} bytes) lies beyond the end of the file ({self.end} bytes)"
            raise TruncatedError(msg, fix="the file was cut short (an interrupted copy or download): rebuild or copy it again")

    def unpack(self, fmt: str, off: int, what: str) -> tuple:
        st = struct.Struct(self.e + fmt)
        self.need(off, st.size, what)
        return st.unpack_from(self.buf, off)

    def cstr(self, table_off: int, table_size: int, idx: int, what: str) -> str:
        if idx < 0 or idx >= table_size:
            msg = f"{self.name}: {what}: string index {idx} outside its string table ({table_size} bytes)"
            raise MalformedError(msg, fix="the file is corrupt: rebuild it")
        start = table_off + idx
        stop = self.buf.find(b"\0", start, table_off + table_size)
        if stop < 0:
            msg = f"{self.name}: {what}: unterminated string in the string table"
            raise MalformedError(msg, fix="the file is corrupt: rebuild it")
        return bytes(self.buf[start:stop]).decode("utf-8", "replace")


class Section(NamedTuple):
    """One section header (its name read from the section-name table; "" where that table is missing)."""

    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int
    name: str = ""
    flags: int = 0
    addr: int = 0


_Section = Section


class Header(NamedTuple):
    """The ELF header's fields the toolchain reads."""

    is64: bool
    little: bool
    etype: int
    machine: int
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


SHT_NOBITS = 8
_PH_FMT = {True: "IIQQQQQQ", False: "IIIIIIII"}
_SH_FMT = {True: "IIQQQQIIQQ", False: "IIIIIIIIII"}
_SYM_FMT = {True: "IBBHQQ", False: "IIIBBH"}  # Elf64_Sym / Elf32_Sym


def read_header(buf, name: str) -> tuple[Header, _View]:
    """The ELF header of `buf` (bytes, bytearray, mmap) and a bounds-checked view of the file; NotElfError or
    TruncatedError for what is no ELF file. Reads 64 bytes at most: the cheap first step of every reader."""
    n = len(buf)
    if n < 4 or bytes(buf[:4]) != b"\x7fELF":
        if n < 4 and bytes(buf[:n]) == b"\x7fELF"[:n] and n > 0:
            raise TruncatedError(f"{name}: {n} bytes, cut inside the ELF magic", fix="copy or rebuild the file")
        raise NotElfError(f"{name}: not an ELF file (no \\x7fELF magic)",
                          fix="pass a plugin .so, a .pt2, a host program or a shared library")
    if n < 16:
        raise TruncatedError(f"{name}: {n} bytes, cut inside the ELF identification", fix="copy or rebuild the file")
    ei_class, ei_data = buf[4], buf[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise NotElfError(f"{name}: ELF identification has class {ei_class} / data {ei_data}, neither valid",
                          fix="the header is corrupt: rebuild the file")
    is64, little = ei_class == 2, ei_data == 1
    v = _View(buf, name, little)
    (etype, machine, _ver, _entry, phoff, shoff, _fl, _ehsize, phentsize, phnum, shentsize, shnum,
     shstrndx) = v.unpack("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH", 16, "the ELF header")
    return Header(is64, little, etype, machine, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx), v


def program_headers(v: _View, h: Header) -> list[tuple[int, Segment]]:
    """(file offset of the entry, segment) of each program header."""
    fmt = _PH_FMT[h.is64]
    size = struct.calcsize("<" + fmt)
    if h.phnum and h.phentsize < size:
        raise MalformedError(f"{v.name}: program header entry size {h.phentsize} < {size}", fix="rebuild the file")
    out = []
    for i in range(h.phnum):
        at = h.phoff + i * h.phentsize
        f = v.unpack(fmt, at, f"program header {i}")
        if h.is64:
            ptype, pflags, poff, pvaddr, _pa, pfilesz, pmemsz, _al = f
        else:
            ptype, poff, pvaddr, _pa, pfilesz, pmemsz, pflags, _al = f
        out.append((at, Segment(ptype, pflags, poff, pvaddr, pfilesz, pmemsz)))
    return out


def segment_flags_at(v: _View, h: Header, ptype: int) -> int | None:
    """File offset of p_flags in the first program header of type `ptype` (for byte edits), None without one."""
    for at, seg in program_headers(v, h):
        if seg.type == ptype:
            return at + (4 if h.is64 else 24)
    return None


def section_headers(v: _View, h: Header) -> list[Section]:
    """Every section header, named from the section-name table (names "" when that table is missing or bad)."""
    if h.shoff == 0 or h.shnum == 0:
        return []
    fmt = _SH_FMT[h.is64]
    if h.shentsize < struct.calcsize("<" + fmt):
        raise MalformedError(f"{v.name}: section header entry size {h.shentsize} is too small", fix="rebuild the file")
    raw = [v.unpack(fmt, h.shoff + i * h.shentsize, f"section header {i}") for i in range(h.shnum)]
    names = raw[h.shstrndx] if 0 < h.shstrndx < len(raw) else None
    out = []
    for sh_name, stype, flags, addr, off, size, link, info, _al, entsize in raw:
        name = ""
        if names is not None and sh_name < names[5] and names[4] + names[5] <= v.end:
            end = v.buf.find(b"\0", names[4] + sh_name, names[4] + names[5])
            name = bytes(v.buf[names[4] + sh_name:end]).decode("ascii", "replace") if end >= 0 else ""
        out.append(Section(stype, off, size, link, info, entsize, name, flags, addr))
    return out


#: Where st_info sits in a symbol table entry (Elf64_Sym / Elf32_Sym), for byte edits of a binding.
ST_INFO_AT = {True: 4, False: 12}


def symbol_entries(v: _View, h: Header, tab: Section, sections: list[Section]):
    """(offset of the entry, st_name, st_info, st_shndx, st_value, st_size) of each entry of a symbol table
    section (SHT_SYMTAB or SHT_DYNSYM), and its string table (for `v.cstr`: names are read only when wanted)."""
    fmt = _SYM_FMT[h.is64]
    ent = struct.calcsize("<" + fmt)
    if tab.link >= len(sections):
        raise MalformedError(f"{v.name}: a symbol table links to section {tab.link}, which is not there",
                             fix="the file is damaged: rebuild it")
    strs = sections[tab.link]
    count = min(tab.size // ent, MAX_SYMBOLS)
    v.need(tab.offset, count * ent, "a symbol table")
    v.need(strs.offset, strs.size, "a string table")
    rows = struct.iter_unpack(v.e + fmt, bytes(v.buf[tab.offset:tab.offset + count * ent]))
    if h.is64:
        entries = ((tab.offset + i * ent, nm, info, shndx, value, size)
                   for i, (nm, info, _o, shndx, value, size) in enumerate(rows))
    else:
        entries = ((tab.offset + i * ent, nm, info, shndx, value, size)
                   for i, (nm, value, size, info, _o, shndx) in enumerate(rows))
    return entries, strs
