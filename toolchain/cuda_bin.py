"""The GPU code a CUDA plugin carries: cubins (ELF, e_machine EM_CUDA) and fatbin containers, parsed strictly.

Where they are: fatbins in a `.nv_fatbin` section (what nvcc links in), cubins or fatbins embedded in any
other data section (inductor's `aot_inductor.embed_kernel_binary`), and `.cubin`/`.fatbin` members of a
.pt2 package. What is read of each: the architecture and kind (SASS for one sm_XY, or PTX for compute_XY
that the driver JIT-compiles) and the PTX ISA version, from the headers only; payloads are never
decompressed. Every length is checked against the bytes it claims; a container that lies is reported, not
followed.

Facts used (sources in docs/targets.md): SASS for sm_XY runs on devices of compute capability X.Z with
Z >= Y; PTX for compute_XY is JIT-compiled on any device of capability >= X.Y by a driver that knows its
PTX ISA version; the CUDA version that introduced each PTX ISA and each toolkit's minimum Linux driver.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

EM_CUDA = 190
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND = {1: "ptx", 2: "sass"}
MAX_IMAGES = 4096  # a fatbin claiming more entries than this is not one inductor or nvcc wrote

# PTX ISA version -> the CUDA toolkit that introduced it (NVIDIA PTX ISA manual, "Release Notes" table).
PTX_ISA_CUDA = {(7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4),
                (7, 5): (11, 5), (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8), (8, 0): (12, 0),
                (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5),
                (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9), (9, 0): (13, 0)}
# CUDA toolkit -> the minimum Linux driver that runs its PTX (CUDA Toolkit release notes, table "CUDA Toolkit
# and Corresponding Driver Versions", toolkit GA driver); a major version's .0 entry is also the minimum
# for its runtime library (libcudart.so.N) under minor-version compatibility.
CUDA_DRIVER = {(11, 0): (450, 80), (11, 1): (455, 23), (11, 2): (460, 27), (11, 3): (465, 19), (11, 4): (470, 42),
               (11, 5): (495, 29), (11, 6): (510, 39), (11, 7): (515, 43), (11, 8): (520, 61), (12, 0): (525, 60),
               (12, 1): (530, 30), (12, 2): (535, 54), (12, 3): (545, 23), (12, 4): (550, 54), (12, 5): (555, 42),
               (12, 6): (560, 28), (12, 7): (565, 0), (12, 8): (570, 26), (12, 9): (575, 51), (13, 0): (580, 65)}


class CudaBinaryError(ValueError):
    """A cubin or fatbin whose headers contradict its size."""


class CudaImage(NamedTuple):
    """One GPU image: SASS or PTX, its architecture and PTX ISA version."""

    kind: str  # "sass" | "ptx"
    sm: int  # 80 for sm_80 / compute_80
    ptx_version: tuple[int, int] | None  # PTX ISA of a ptx image (major, minor)
    where: str  # file!member@offset, for messages

    @property
    def arch(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.sm}"

    def runs_on(self, cc: int) -> bool:
        """SASS: same major, minor at most the device's; PTX: any device at least as new."""
        if self.kind == "sass":
            return self.sm // 10 == cc // 10 and self.sm % 10 <= cc % 10
        return self.sm <= cc


def parse_cubin(data, where: str) -> CudaImage:
    """A cubin's architecture from its ELF header: e_flags holds the SM in bits 0-7 (EI_ABIVERSION < 8) or
    bits 8-15 (the ABI nvcc 12.8+ writes, EI_ABIVERSION 8)."""
    if len(data) < 64 or bytes(data[:4]) != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        msg = f"{where}: not a little-endian ELF64 cubin"
        raise CudaBinaryError(msg)
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        msg = f"{where}: e_machine {machine} is not EM_CUDA ({EM_CUDA})"
        raise CudaBinaryError(msg)
    flags = struct.unpack_from("<I", data, 48)[0]
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    if not 10 <= sm <= 250:
        msg = f"{where}: e_flags {flags:#x} names no SM architecture"
        raise CudaBinaryError(msg)
    return CudaImage("sass", sm, None, where)


def parse_fatbin(data, where: str, offset: int = 0) -> tuple[list[CudaImage], int]:
    """The images of the fatbin container at `offset` and the offset just past it.

    Layout (cuobjdump's; LLVM's clang-offload tools read the same): a 16-byte header (magic u32, version
    u16, header size u16, size of the entries u64), then entries: kind u16 (1 PTX, 2 ELF), version u16,
    header size u32, payload size u64, ..., PTX ISA minor u16 at 24, major u16 at 26, SM u32 at 28."""
    if offset + 16 > len(data):
        msg = f"{where}@{offset:#x}: fatbin header past the end ({len(data)} bytes)"
        raise CudaBinaryError(msg)
    magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", data, offset)
    if magic != FATBIN_MAGIC:
        msg = f"{where}@{offset:#x}: magic {magic:#x} is not a fatbin's ({FATBIN_MAGIC:#x})"
        raise CudaBinaryError(msg)
    start = offset + hsize
    end = start + fsize
    if hsize < 16 or end > len(data):
        msg = f"{where}@{offset:#x}: fatbin of {fsize} bytes after a {hsize}-byte header overruns its {len(data)}"
        raise CudaBinaryError(msg)
    images: list[CudaImage] = []
    at = start
    while at < end:
        if at + 32 > end:
            msg = f"{where}@{at:#x}: fatbin entry header cut short"
            raise CudaBinaryError(msg)
        kind, _v, ehsize, psize = struct.unpack_from("<HHIQ", data, at)
        minor, major, sm = struct.unpack_from("<HHI", data, at + 24)
        if ehsize < 32 or at + ehsize + psize > end:
            msg = f"{where}@{at:#x}: fatbin entry ({ehsize}-byte header, {psize} bytes) overruns its container"
            raise CudaBinaryError(msg)
        if kind not in FATBIN_KIND:
            msg = f"{where}@{at:#x}: fatbin entry of unknown kind {kind}"
            raise CudaBinaryError(msg)
        if len(images) >= MAX_IMAGES:
            msg = f"{where}: more than {MAX_IMAGES} fatbin entries"
            raise CudaBinaryError(msg)
        images.append(CudaImage(FATBIN_KIND[kind], sm, (major, minor) if kind == 1 else None,
                                f"{where}@{at:#x}"))
        at += ehsize + psize
    return images, end


def _find_all(data, needle: bytes, start: int, stop: int):
    at = data.find(needle, start, stop)
    while at >= 0:
        yield at
        at = data.find(needle, at + 1, stop)


def scan_region(data, where: str, start: int = 0, stop: int | None = None,
                strict: bool = False) -> tuple[list[CudaImage], list[str]]:
    """Fatbins and cubins inside data[start:stop]. Found by magic: a match that doesn't parse is a problem
    when `strict` (a .nv_fatbin section, a .cubin member), else ordinary data that happens to hold the bytes."""
    stop = len(data) if stop is None else stop
    images: list[CudaImage] = []
    problems: list[str] = []
    covered = start
    containers: list[tuple[int, int]] = []  # the fatbins parsed: the cubins inside them are counted once
    for at in _find_all(data, struct.pack("<I", FATBIN_MAGIC), start, stop):
        if at < covered:
            continue
        try:
            found, covered = parse_fatbin(memoryview(data)[:stop], where, at)
            images += found
            containers.append((at, covered))
        except CudaBinaryError as exc:
            if strict:
                problems.append(str(exc))
    for at in _find_all(data, b"\x7fELF\x02\x01", start, stop):
        if any(a <= at < b for a, b in containers):
            continue
        if at + 20 <= stop and struct.unpack_from("<H", data, at + 18)[0] == EM_CUDA:
            try:
                images.append(parse_cubin(memoryview(data)[at:stop], f"{where}@{at:#x}"))
            except CudaBinaryError as exc:
                problems.append(str(exc))
    return images, problems


WEIGHTS_SYMBOLS = ("_binary_constants_bin_start", "_binary_constants_bin_end")  # inductor's embedded weights


def _weights_range(data, sections) -> tuple[int, int] | None:
    """File offsets of the weights inductor embeds (between its _binary_constants_bin_start/_end symbols):
    the bulk of a large plugin, and never GPU code, so the image search skips it."""
    from toolchain.isa import SHT_DYNSYM, SHT_SYMTAB

    for want in (SHT_SYMTAB, SHT_DYNSYM):
        tab = next((s for s in sections if s.type == want and s.entsize == 24), None)
        if tab is None or tab.link >= len(sections):
            continue
        strs = sections[tab.link]
        found = {name: value for name in WEIGHTS_SYMBOLS
                 if (value := _symbol_value(data, tab, strs, name)) is not None}
        if len(found) == 2:
            start, end = found[WEIGHTS_SYMBOLS[0]], found[WEIGHTS_SYMBOLS[1]]
            sec = next((s for s in sections if s.addr <= start < s.addr + s.size and s.type != 8), None)
            if sec is not None and start <= end <= sec.addr + sec.size:
                return sec.offset + start - sec.addr, sec.offset + end - sec.addr
    return None


def _symbol_value(data, tab, strs, name: str) -> int | None:
    """st_value of the last entry of symbol table `tab` whose name (in string table `strs`) is `name`, found
    by searching the bytes (the name in the string table, then each offset it is at as an entry's st_name)
    rather than reading every entry; None where no entry has that name."""
    want = name.encode() + b"\0"
    count = tab.size // 24
    best = -1
    at = data.find(want, strs.offset, strs.offset + strs.size)
    while at >= 0:
        # a name starts at its own offset or inside a longer one (tail merging): an entry's st_name says which
        key = struct.pack("<I", at - strs.offset)
        pos = data.find(key, tab.offset, tab.offset + count * 24)
        while pos >= 0:
            if (pos - tab.offset) % 24 == 0:
                best = max(best, (pos - tab.offset) // 24)
            pos = data.find(key, pos + 1, tab.offset + count * 24)
        at = data.find(want, at + 1, strs.offset + strs.size)
    if best < 0:
        return None
    return struct.unpack_from("<Q", data, tab.offset + best * 24 + 8)[0]


_FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


def plugin_images(data, label: str) -> tuple[list[CudaImage], list[str]]:
    """Every GPU image an x86-64 plugin .so carries where the plugin can load it from: its allocated (SHF_ALLOC:
    mapped at load) data sections, and the fatbin sections by name. Not its executable sections (code holds
    no images), not its embedded weights (see _weights_range), and not what is never mapped (debug info,
    .comment: most of a torch-built plugin's bytes beside the weights)."""
    from toolchain.isa import SHF_ALLOC, SHF_EXECINSTR, SHT_NOBITS, IsaDecodeError, _sections

    try:
        sections = _sections(data, label)
    except IsaDecodeError as exc:
        return [], [str(exc).split("\n")[0]]
    weights = _weights_range(data, sections)
    images: list[CudaImage] = []
    problems: list[str] = []
    for s in sections:
        if s.type == SHT_NOBITS or s.flags & SHF_EXECINSTR or s.size == 0 or s.type in (2, 3, 11):
            continue
        if not s.flags & SHF_ALLOC and s.name not in _FATBIN_SECTIONS:
            continue
        spans = [(s.offset, s.offset + s.size)]
        if weights is not None and s.offset <= weights[0] < s.offset + s.size:
            spans = [(s.offset, weights[0]), (weights[1], s.offset + s.size)]
        for start, stop in spans:
            if stop <= start:
                continue
            found, bad = scan_region(data, f"{label}:{s.name}", start, stop,
                                     strict=s.name in _FATBIN_SECTIONS)
            images += found
            problems += bad
    return images, problems


def member_images(data, label: str) -> tuple[list[CudaImage], list[str]]:
    """A package member named *.cubin or *.fatbin: one cubin or fatbin container, or a problem."""
    try:
        if bytes(data[:4]) == b"\x7fELF":
            return [parse_cubin(data, label)], []
        images, _ = parse_fatbin(data, label)
        return images, []
    except CudaBinaryError as exc:
        return [], [str(exc)]


def cuda_of_ptx(version: tuple[int, int]) -> tuple[int, int] | None:
    return PTX_ISA_CUDA.get(version)


def driver_for_cuda(cuda: tuple[int, int]) -> tuple[int, int] | None:
    """The minimum Linux driver for a CUDA toolkit version (nearest known not newer when unlisted)."""
    known = [v for v in CUDA_DRIVER if v <= cuda]
    return CUDA_DRIVER[max(known)] if known else None


def usable_on(images: list[CudaImage], cc: int) -> list[CudaImage]:
    return [i for i in images if i.runs_on(cc)]
