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


class _Section(NamedTuple):
    """The fields of a section header the reader uses."""

    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int
