"""What CPU a plugin's code needs, read from the code itself: the x86-64 extensions its executable sections use.

The executable sections are decoded with capstone (detail off: a linear sweep per function, from the symbol
table); a function whose bytes hold none of the byte sequences every extension's encodings contain
(`_MAY_NEED`) is not decoded at all. Each distinct (mnemonic, encoding, vector width, memory operand or
not) is classified once, by one detailed decode (capstone's groups) plus a table of the AVX-512 subsets
capstone has no group for (and VEX FMA3, which it groups nowhere). Weights and other data sections are never read.

The extensions, their psABI levels and cpuid bits are data: toolchain/spec/cpu_isa.toml (the runtime's
preflight is generated from the same file).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from toolchain.elf.base import ElfError, Section, read_header, section_headers, symbol_entries
from toolchain.errors import InputError
from toolchain.spec.cpu_isa import IsaSpec, load_isa_spec

__all__ = ["IsaScan", "IsaUse", "IsaDecodeError", "IsaSpec", "load_isa_spec", "scan_elf", "scan_file"]
EM_X86_64 = 62
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
SHT_PROGBITS, SHT_SYMTAB, SHT_DYNSYM, SHT_NOBITS = 1, 2, 11, 8
STT_FUNC = 2


# capstone's x86 groups -> extension names (toolchain/spec/cpu_isa.toml); groups of the baseline
# (SSE1/SSE2/CMOV/FPU/MMX) and of control flow are not listed: every x86-64 CPU has them.
_GROUPS = {"SSE3": "sse3", "SSSE3": "ssse3", "SSE41": "sse4_1", "SSE42": "sse4_2", "AVX": "avx", "AVX2": "avx2",
           "FMA": "fma", "F16C": "f16c", "BMI": "bmi1", "BMI2": "bmi2", "AVX512": "avx512f", "BWI": "avx512bw",
           "DQI": "avx512dq", "CDI": "avx512cd", "VLX": "avx512vl", "AES": "aes", "PCLMUL": "pclmulqdq",
           "SHA": "sha_ni", "ADX": "adx"}
# Extensions capstone 5 has no group for, by mnemonic (prefix): EVEX encoding -> the AVX-512 subset,
# VEX -> the AVX form where one exists.
_EVEX_MNEMONICS = (("vpdpbusd", "avx512_vnni"), ("vpdpwssd", "avx512_vnni"), ("vcvtne2ps2bf16", "avx512_bf16"),
                   ("vcvtneps2bf16", "avx512_bf16"), ("vdpbf16ps", "avx512_bf16"), ("vpmadd52", "avx512ifma"),
                   ("vpermb", "avx512vbmi"), ("vpermi2b", "avx512vbmi"), ("vpermt2b", "avx512vbmi"),
                   ("vpmultishiftqb", "avx512vbmi"), ("vpcompressb", "avx512_vbmi2"), ("vpcompressw", "avx512_vbmi2"),
                   ("vpexpandb", "avx512_vbmi2"), ("vpexpandw", "avx512_vbmi2"), ("vpshld", "avx512_vbmi2"),
                   ("vpshrd", "avx512_vbmi2"), ("vpopcntb", "avx512_bitalg"), ("vpopcntw", "avx512_bitalg"),
                   ("vpshufbitqmb", "avx512_bitalg"), ("vpopcntd", "avx512_vpopcntdq"),
                   ("vpopcntq", "avx512_vpopcntdq"), ("vgf2p8", "gfni"), ("vaes", "vaes"),
                   ("vpclmulqdq", "vpclmulqdq"))
_VEX_MNEMONICS = (("vpdpbusd", "avx_vnni"), ("vpdpwssd", "avx_vnni"), ("vgf2p8", "gfni"))
_FP16_SUFFIXES = ("ph", "sh")  # EVEX map 5/6 arithmetic on half floats: avx512_fp16
# fisttp: an x87 store capstone groups as FPU only, which SSE3 introduced (Intel SDM vol. 2A, FISTTP: CPUID.01H:ECX.SSE3)
_PLAIN_MNEMONICS = {"popcnt": "popcnt", "lzcnt": "lzcnt", "tzcnt": "bmi1", "movbe": "movbe",
                    "gf2p8affineqb": "gfni", "gf2p8affineinvqb": "gfni", "gf2p8mulb": "gfni", "fisttp": "sse3"}
_PREFIXES = frozenset(b"\x66\x67\xf2\xf3\x2e\x3e\x26\x64\x65\x36")
# Bytes every instruction of every extension of toolchain/spec/cpu_isa.toml contains, whatever its prefixes:
# EVEX 0x62 and VEX 0xC4/0xC5 (AVX and later, BMI, AMX); the 0F 38 / 0F 3A opcode maps (SSSE3, SSE4, AES,
# PCLMUL, SHA, ADX, MOVBE, GFNI, CRC32); 0F B8/BC/BD (POPCNT, TZCNT, LZCNT: an F3 prefix, but a REX prefix may
# stand between it and 0F, so the prefix is not part of the pattern); SSE3's 0F 7C/7D/D0/F0/12/16 (HADD, HSUB,
# ADDSUB, LDDQU, MOVDDUP, MOVSLDUP, MOVSHDUP) and 0F 01 C8/C9 (MONITOR, MWAIT); and FISTTP's x87 opcodes
# DB/DD/DF with ModRM.reg 1 and a memory operand. A function with none of them is not decoded: the result is
# the same as decoding it (tests/integration/test_target_rules.py decodes everything to prove it).
_MAY_NEED = re.compile(rb"[\x62\xc4\xc5]|\x0f[\x38\x3a\xb8\xbc\xbd\x7c\x7d\xd0\xf0\x12\x16]|\x0f\x01[\xc8\xc9]"
                       rb"|[\xdb\xdd\xdf][\x08-\x0f\x48-\x4f\x88-\x8f]")


@dataclass
class IsaUse:
    """One extension's use: how many instructions, and the first one met (its text, function, address)."""

    count: int = 0
    example: str = ""
    function: str = ""
    address: int = 0


@dataclass
class IsaScan:
    """The extensions a file's code uses, the level they need, and how much code was decoded."""

    extensions: dict[str, IsaUse] = field(default_factory=dict)
    level: str = "x86-64"
    decoded_bytes: int = 0  # bytes run through the decoder
    text_bytes: int = 0  # executable bytes in the file
    undecodable: int = 0  # bytes capstone could not decode (data in code, or an encoding it lacks)

    def highest(self, spec: IsaSpec) -> tuple[str, IsaUse] | None:
        """The extension of the highest level (extensions no level includes rank above all)."""
        if not self.extensions:
            return None
        order = list(spec.extensions)
        name = max(self.extensions, key=lambda e: (spec.extensions[e].level == "",
                                                   spec.rank(spec.extensions[e].level or spec.levels[0]),
                                                   order.index(e)))
        return name, self.extensions[name]

    def to_json(self) -> dict:
        return {"level": self.level, "extensions": sorted(self.extensions),
                "examples": {k: {"instruction": v.example, "function": v.function, "address": hex(v.address),
                                 "count": v.count} for k, v in sorted(self.extensions.items())}}


class IsaDecodeError(InputError):
    pass


def _read(data, label: str):
    """The header and view of a little-endian ELF64 (toolchain.elf's reader), IsaDecodeError otherwise."""
    try:
        h, v = read_header(data, label)
    except ElfError as exc:
        raise IsaDecodeError(str(exc).split("\n")[0], fix=exc.fix) from None
    if not h.is64 or not h.little:
        msg = f"{label}: not a little-endian ELF64 file"
        raise IsaDecodeError(msg, fix="pass an x86-64 plugin .so")
    return h, v


def _sections(data, label: str, read=None) -> list[Section]:
    """The named section headers of a little-endian ELF64 (strict: every section lies inside the file)."""
    h, v = read or _read(data, label)
    try:
        sections = section_headers(v, h)
    except ElfError as exc:
        raise IsaDecodeError(str(exc).split("\n")[0], fix=exc.fix) from None
    for i, sec in enumerate(sections):
        if sec.type != SHT_NOBITS and sec.offset + sec.size > len(data):
            msg = f"{label}: section {i} ({sec.size} bytes at {sec.offset}) extends past the end of the file"
            raise IsaDecodeError(msg, fix="the file is truncated: rebuild it or copy it again")
    return sections


def _functions(read, sections: list[Section]) -> list[tuple[int, int, str]]:
    """(address, size, name) of the sized functions in .symtab (else .dynsym), sorted, duplicates merged."""
    h, v = read
    for want in (SHT_SYMTAB, SHT_DYNSYM):
        tab = next((s for s in sections if s.type == want and s.entsize == 24), None)
        if tab is None or tab.link >= len(sections):
            continue
        seen: dict[int, tuple[int, int, str]] = {}
        try:
            entries, strs = symbol_entries(v, h, tab, sections)
            for _at, st_name, st_info, _shndx, value, size in entries:
                if st_info & 0xF != STT_FUNC or size == 0 or value in seen or st_name >= strs.size:
                    continue
                seen[value] = (value, size, v.cstr(strs.offset, strs.size, st_name, "a function's name"))
        except ElfError as exc:
            raise IsaDecodeError(str(exc).split("\n")[0], fix=exc.fix) from None
        if seen:
            return sorted(seen.values())
    return []


def _regions(sections: list[Section], funcs: list[tuple[int, int, str]]) -> list[tuple[int, int, int, str]]:
    """(file offset, size, address, name) covering every executable byte once: functions where the symbol
    table names them, the rest of each section (PLT, stubs, a stripped file) as `<section>`."""
    out = []
    for s in sections:
        if s.type != SHT_PROGBITS or not s.flags & SHF_EXECINSTR or s.size == 0:
            continue
        at = s.addr
        end = s.addr + s.size
        for addr, size, name in funcs:
            if addr < at or addr >= end:
                continue
            if addr > at:
                out.append((s.offset + at - s.addr, addr - at, at, s.name))
            size = min(size, end - addr)
            out.append((s.offset + addr - s.addr, size, addr, name))
            at = addr + size
        if at < end:
            out.append((s.offset + at - s.addr, end - at, at, s.name))
    return out


@cache
def _libcapstone():
    """libcapstone.so where capstone's package finds it (LIBCAPSTONE_PATH, else the package's lib/), loaded
    as the package loads it, if it is capstone 5; else None."""
    import ctypes
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("capstone")
    except (ImportError, ValueError):
        spec = None
    dirs = [os.environ.get("LIBCAPSTONE_PATH")]  # where capstone's package looks first
    if spec is not None and spec.submodule_search_locations:
        dirs += [os.path.join(d, "lib") for d in spec.submodule_search_locations]
    path = next((os.path.join(d, "libcapstone.so") for d in dirs
                 if d and os.path.isfile(os.path.join(d, "libcapstone.so"))), None)
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_DEEPBIND", 0))
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.cs_version(ctypes.byref(major), ctypes.byref(minor))
    except (OSError, AttributeError):
        return None
    if major.value != 5:
        return None
    size_t, ptr = ctypes.c_size_t, ctypes.c_void_p
    lib.cs_open.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(size_t)]
    lib.cs_option.argtypes = [size_t, ctypes.c_int, size_t]
    lib.cs_disasm.argtypes = [size_t, ctypes.c_char_p, size_t, ctypes.c_uint64, size_t, ctypes.POINTER(ptr)]
    lib.cs_disasm.restype = size_t
    lib.cs_free.argtypes = [ptr, size_t]
    lib.cs_free.restype = None
    lib.cs_group_name.argtypes = [size_t, ctypes.c_uint]
    lib.cs_group_name.restype = ctypes.c_char_p
    lib.cs_close.argtypes = [ctypes.POINTER(size_t)]
    return lib


class _Libcapstone:
    """libcapstone 5 called through ctypes, without importing its Python package (whose import loads every
    architecture's module: ~20 ms of a 1.7 MB plugin's verify). Two handles: one decoding runs of
    instructions (detail off, skipdata on), one decoding a single instruction with detail (its groups).
    `load()` returns None where the library is not the 5.x this layout is written for; the scan then goes
    through capstone's Python package (`_CapstoneModule`), which reads the same library."""

    RECORD = 248  # sizeof(cs_insn) in capstone 5 (x86-64): id, address, size, bytes[24], mnemonic[32], op_str[160], detail
    CHUNK = 4096  # instructions per cs_disasm call: a large function is decoded in pieces, not all in memory

    @classmethod
    def load(cls) -> _Libcapstone | None:
        lib = _libcapstone()
        return None if lib is None else cls(lib)

    def __init__(self, lib) -> None:
        import ctypes

        self._ct = ctypes
        self._lib = lib
        self._lite, self._detail = ctypes.c_size_t(), ctypes.c_size_t()
        self._open: list = []
        for h in (self._lite, self._detail):
            if lib.cs_open(3, 8, ctypes.byref(h)) != 0:  # CS_ARCH_X86, CS_MODE_64
                self.close()
                msg = "capstone: cs_open(x86, 64-bit) failed"
                raise OSError(msg)
            self._open.append(h)
        lib.cs_option(self._lite, 5, 3)  # CS_OPT_SKIPDATA, CS_OPT_ON
        lib.cs_option(self._detail, 2, 3)  # CS_OPT_DETAIL, CS_OPT_ON
        # capstone's group names are its X86_GRP_* constants in lower case, but for X86_GRP_F16C ("fc16")
        names = {lib.cs_group_name(self._lite, g): g for g in range(256)}
        self.group_ids = {g: names.get(("fc16" if g == "F16C" else g.lower()).encode()) for g in _GROUPS}

    def close(self) -> None:
        while self._open:
            self._lib.cs_close(self._ct.byref(self._open.pop()))

    def instructions(self, code: bytes, at: int, address: int, skip: set):
        """(key, address, size, mnemonic, op_str) of the instructions from code[at:] on (`address`: that of
        code[0]), as capstone's disasm_lite gives them (skipped data as `.byte`), but none whose instruction
        id is in `skip` (read as the caller adds to it): their text is never built."""
        ct, lib, rec = self._ct, self._lib, self.RECORD
        words = rec // 4
        view = code if at == 0 else code[at:]
        address += at
        done, total = 0, len(view)
        out = ct.c_void_p()
        while done < total:
            part = view if done == 0 else view[done:]
            n = lib.cs_disasm(self._lite, part, total - done, address + done, self.CHUNK, ct.byref(out))
            if n == 0:
                return
            buf = ct.string_at(out, n * rec)
            lib.cs_free(out, n)
            ids = memoryview(buf).cast("I")[::words].tolist()
            for i, iid in enumerate(ids):
                if iid in skip:
                    continue
                o = i * rec
                a, size = struct.unpack_from("<QH", buf, o + 8)
                m = buf[o + 42:_cstr_end(buf, o + 42, o + 74)].decode("ascii")
                ops = buf[o + 74:_cstr_end(buf, o + 74, o + 234)].decode("ascii")
                yield iid, a, size, m, ops
            if n < self.CHUNK:
                return  # capstone stopped: the end, or bytes it cannot decode even as data
            o = (n - 1) * rec
            a, size = struct.unpack_from("<QH", buf, o + 8)
            done = a + size - address

    def groups(self, raw: bytes, address: int) -> tuple[int, ...]:
        """capstone's groups of the one instruction in `raw` (detail on)."""
        ct, lib = self._ct, self._lib
        out = ct.c_void_p()
        n = lib.cs_disasm(self._detail, raw, len(raw), address, 1, ct.byref(out))
        if n == 0:
            return ()
        try:
            rec = ct.string_at(out, self.RECORD)
            (detail,) = struct.unpack_from("<Q", rec, 240)
            if not detail:
                return ()
            # cs_detail: regs_read[20] u16, count u8, regs_write[20] u16, count u8, groups[8] u8, groups_count u8
            d = ct.string_at(detail, 92)
            return tuple(d[83:83 + min(d[91], 8)])
        finally:
            lib.cs_free(out, n)


def _cstr_end(buf: bytes, start: int, stop: int) -> int:
    """The end of a NUL-terminated field of `buf` (its whole width if capstone filled it)."""
    end = buf.find(b"\0", start, stop)
    return stop if end < 0 else end


class _CapstoneModule:
    """The same two decodes through capstone's Python package, where _Libcapstone cannot be used."""

    def __init__(self) -> None:
        import capstone
        from capstone import x86_const

        self._lite = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self._lite.detail = False
        self._lite.skipdata = True
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self._cs.detail = True
        self.group_ids = {g: getattr(x86_const, f"X86_GRP_{g}") for g in _GROUPS}

    def close(self) -> None:
        pass

    def instructions(self, code: bytes, at: int, address: int, skip: set):
        for a, size, m, ops in self._lite.disasm_lite(code[at:], address + at):
            if m not in skip:
                yield m, a, size, m, ops

    def groups(self, raw: bytes, address: int) -> tuple[int, ...]:
        for insn in self._cs.disasm(raw, address, 1):
            return tuple(insn.groups)
        return ()


def _decoder() -> _Libcapstone | _CapstoneModule:
    try:
        lib = _Libcapstone.load()
    except OSError:
        lib = None
    if lib is not None and None not in lib.group_ids.values():
        return lib
    if lib is not None:
        lib.close()
    return _CapstoneModule()


_BMI_MNEMONICS = ("andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep", "pext", "rorx", "sarx", "shlx",
                  "shrx")
_TILE_PREFIXES = ("tile", "ldtilecfg", "sttilecfg")
_FMA3 = re.compile(r"vf(n?m(add|sub)|maddsub|msubadd)(132|213|231)")  # not FMA4's vfmaddps (AMD, 4 operands)


def _same_for_every_form(mnemonic: str, enc: str, width: str) -> bool:
    """Whether an instruction that uses no extension says so for every instruction of its id: true for a
    legacy encoding (no VEX/EVEX, no vector width) whose name, without the prefixes capstone prints in front
    (rep, lock, notrack, ...), is decided by its groups alone (the groups are the id's); then the scan skips
    that id's other instructions unread."""
    bare = mnemonic.rpartition(" ")[2]
    return (enc == "" and width == "" and bare not in _PLAIN_MNEMONICS and not bare.startswith(_TILE_PREFIXES)
            and (bare == mnemonic or (bare[:1] not in "vkt" and bare not in _BMI_MNEMONICS)))


class _Classifier:
    """Extensions of one instruction, keyed by what decides them: mnemonic, encoding, vector width."""

    def __init__(self, decoder: _Libcapstone | _CapstoneModule) -> None:
        self._decoder = decoder
        self._groups = {gid: _GROUPS[g] for g, gid in decoder.group_ids.items()}
        self._cache: dict[tuple, tuple[str, ...]] = {}
        self.plain: dict[str, tuple[str, ...]] = {}  # mnemonic -> extensions, for mnemonics no VEX encodes

    def classify(self, mnemonic: str, op_str: str, raw: bytes, address: int) -> tuple[tuple[str, ...], bool]:
        """The extensions, and whether every instruction of this one's id has the same (none)."""
        first = mnemonic[0]
        enc = ""
        if first in "vkt" or mnemonic in _BMI_MNEMONICS:
            i = 0
            while i < len(raw) and raw[i] in _PREFIXES:
                i += 1
            enc = {0x62: "evex", 0xC4: "vex", 0xC5: "vex"}.get(raw[i] if i < len(raw) else -1, "")
        else:  # neither VEX nor EVEX can encode it: the mnemonic alone decides (the scan's fast path)
            plain = self.plain[mnemonic] = self._classify(mnemonic, "", raw, address)
            return plain, not plain and _same_for_every_form(mnemonic, "", "")
        width = "zmm" if "zmm" in op_str else "ymm" if "ymm" in op_str else ""
        # A memory operand too: one mnemonic can need another extension by operand kind (vbroadcastss
        # from a register is AVX2, from memory AVX), and capstone's groups tell the forms apart.
        key = (mnemonic, enc, width, "ptr" in op_str)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._classify(mnemonic, enc, raw, address)
        return hit, not hit and _same_for_every_form(mnemonic, enc, width)

    def _classify(self, mnemonic: str, enc: str, raw: bytes, address: int) -> tuple[str, ...]:
        exts: set[str] = set()
        exts.update(self._groups[g] for g in self._decoder.groups(raw, address) if g in self._groups)
        if mnemonic in ("vptestnmd", "vptestnmq"):
            exts.discard("avx512cd")  # capstone 5 groups them CDI; they are AVX512F (Intel SDM vol. 2C, VPTESTNMB/W/D/Q)
        if mnemonic in _PLAIN_MNEMONICS:
            exts.add(_PLAIN_MNEMONICS[mnemonic])
        table = _EVEX_MNEMONICS if enc == "evex" else _VEX_MNEMONICS if enc == "vex" else ()
        exts.update(ext for prefix, ext in table if mnemonic.startswith(prefix))
        if enc == "evex":
            exts.add("avx512f")
            if mnemonic.endswith(_FP16_SUFFIXES) and not mnemonic.startswith(("vcvtps2ph", "vcvtneps2bf16")):
                exts.add("avx512_fp16")
        if enc == "vex" and mnemonic.startswith("v"):
            exts.add("avx")
            if _FMA3.match(mnemonic):  # capstone 5 gives VEX FMA3 no group at all
                exts.add("fma")
        if mnemonic.startswith(_TILE_PREFIXES):
            exts.add("amx_tile")
        return tuple(sorted(exts))


def _note(scan: IsaScan, exts: tuple[str, ...], mnemonic: str, op_str: str, function: str, address: int) -> None:
    for ext in exts:
        use = scan.extensions.get(ext)
        if use is None:
            use = scan.extensions[ext] = IsaUse(example=f"{mnemonic} {op_str}".strip(), function=function,
                                                address=address)
        use.count += 1


def _modrm_tail(code: bytes, at: int) -> int | None:
    """Bytes taken by a ModRM byte at `at` and its SIB and displacement (64-bit addressing)."""
    if at >= len(code):
        return None
    modrm = code[at]
    mod, rm = modrm >> 6, modrm & 7
    n = 1
    if mod != 3 and rm == 4:
        if at + 1 >= len(code):
            return None
        n += 1
        if mod == 0 and code[at + 1] & 7 == 5:
            n += 4
    if mod == 1:
        n += 1
    elif mod == 2 or (mod == 0 and rm == 5):
        n += 4
    return n


# VEX/EVEX opcodes capstone 5 does not decode (newer than its LLVM tables), by (kind, map, opcode, SIMD
# prefix pp): the extension they belong to. Intel SDM vol. 2 opcode maps; Intel AVX-512 BF16/FP16 specs.
_UNKNOWN_OPCODES = {("evex", 2, 0x72, 2): "avx512_bf16", ("evex", 2, 0x72, 3): "avx512_bf16",
                    ("evex", 2, 0x52, 2): "avx512_bf16", ("vex", 2, 0x50, 1): "avx_vnni",
                    ("vex", 2, 0x51, 1): "avx_vnni", ("vex", 2, 0x52, 1): "avx_vnni", ("vex", 2, 0x53, 1): "avx_vnni",
                    ("vex", 2, 0x49, 0): "amx_tile", ("vex", 2, 0x49, 1): "amx_tile", ("vex", 2, 0x4B, 1): "amx_tile",
                    ("vex", 2, 0x4B, 2): "amx_tile", ("vex", 2, 0x4B, 3): "amx_tile", ("vex", 2, 0x5C, 2): "amx_bf16",
                    ("vex", 2, 0x5E, 0): "amx_int8", ("vex", 2, 0x5E, 1): "amx_int8", ("vex", 2, 0x5E, 2): "amx_int8",
                    ("vex", 2, 0x5E, 3): "amx_int8"}


def _unknown_vex(code: bytes, at: int) -> tuple[int, str, str] | None:
    """A VEX/EVEX instruction capstone could not decode at `at`: (length, extension, description), or None
    when the bytes there are no such instruction. Compiled code holds no data in its text, so an EVEX
    prefix there is an AVX-512 instruction (at least avx512f) even when its opcode is unknown here."""
    first = code[at]
    if first == 0x62 and at + 6 <= len(code):
        p0, p1 = code[at + 1], code[at + 2]
        if p1 & 0x04 == 0:  # EVEX P1 bit 2 is always 1
            return None
        kind, mmap, pp, op_at = "evex", p0 & 0x7, p1 & 0x3, at + 4
    elif first == 0xC4 and at + 5 <= len(code):
        kind, mmap, pp, op_at = "vex", code[at + 1] & 0x1F, code[at + 2] & 0x3, at + 3
    elif first == 0xC5 and at + 4 <= len(code):
        kind, mmap, pp, op_at = "vex", 1, code[at + 1] & 0x3, at + 2
    else:
        return None
    if mmap not in (1, 2, 3, 5, 6):
        return None
    opcode = code[op_at]
    tail = _modrm_tail(code, op_at + 1)
    if tail is None:
        return None
    imm = 1 if mmap == 3 or (mmap == 1 and opcode in (0x70, 0x71, 0x72, 0x73, 0xC2, 0xC4, 0xC5, 0xC6)) else 0
    length = op_at + 1 + tail + imm - at
    if at + length > len(code):
        return None
    ext = _UNKNOWN_OPCODES.get((kind, mmap, opcode, pp))
    if ext is None:
        ext = "avx512_fp16" if kind == "evex" and mmap in (5, 6) else "avx512f" if kind == "evex" else "avx"
    raw = code[at:at + length].hex(" ")
    return length, ext, f"({kind} map {mmap} opcode {opcode:#04x}, bytes {raw}: not in capstone's tables)"


def scan_elf(data, label: str = "<plugin>") -> IsaScan:
    """The extensions the executable code of an x86-64 ELF `data` (bytes, mmap or memoryview) uses.

    Raises IsaDecodeError for a file that is not a well-formed little-endian ELF64 x86-64 object."""
    read = _read(data, label)
    sections = _sections(data, label, read)
    machine = read[0].machine
    if machine != EM_X86_64:
        msg = f"{label}: e_machine {machine} is not x86-64 ({EM_X86_64})"
        raise IsaDecodeError(msg, fix="the CPU ISA check reads x86-64 code only")
    spec = load_isa_spec()
    scan = IsaScan()
    decoder = _decoder()
    classifier = _Classifier(decoder)
    plain = classifier.plain
    skip: set = set()  # instruction ids (mnemonics through capstone's package) known to use no extension
    try:
        for off, size, addr, name in _regions(sections, _functions(read, sections)):
            scan.text_bytes += size
            code = bytes(data[off:off + size])
            if _MAY_NEED.search(code) is None:
                continue
            scan.decoded_bytes += size
            at = 0
            while at < size:
                resume = None
                for key, address, isize, mnemonic, op_str in decoder.instructions(code, at, addr, skip):
                    exts = plain.get(mnemonic)
                    if exts is not None:
                        if exts:
                            _note(scan, exts, mnemonic, op_str, name, address)
                        elif _same_for_every_form(mnemonic, "", ""):
                            skip.add(key)
                        continue
                    pos = address - addr
                    if mnemonic == ".byte":
                        unknown = _unknown_vex(code, pos)
                        if unknown is None:
                            scan.undecodable += isize
                            continue
                        length, ext, what = unknown
                        # an EVEX instruction needs avx512f's registers and state whatever its subset
                        _note(scan, (ext, "avx512f") if what.startswith("(evex") and ext != "avx512f" else (ext,),
                              what, "", name, address)
                        resume = pos + length
                        break
                    exts, none_for_id = classifier.classify(mnemonic, op_str, code[pos:pos + isize], address)
                    if exts:
                        _note(scan, exts, mnemonic, op_str, name, address)
                    elif none_for_id:
                        skip.add(key)
                if resume is None:
                    break
                at = resume
    finally:
        decoder.close()
    scan.level = spec.level_of(list(scan.extensions))
    return scan


def scan_file(path: str | Path) -> IsaScan:
    """scan_elf of a file, mapped (only the executable sections and the symbol table are read)."""
    import mmap

    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            msg = f"{path}: empty file"
            raise IsaDecodeError(msg, fix="pass an x86-64 plugin .so")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return scan_elf(m, str(path))
