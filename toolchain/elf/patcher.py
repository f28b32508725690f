"""Low-level ELF edits for `aoti-toolchain patch` and `export`. lief for what changes the layout (a new DT_NEEDED,
a RUNPATH string); byte edits for the exec-stack flag (no layout change; clearing it is safe: nothing runs code
from the stack) and for GNU_UNIQUE bindings (rebind_unique: st_info only).

Every function reads `src` and writes `dst` (both paths the caller owns); nothing is done in place, except
rebind_unique_in_package, which export calls on the package it is writing.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from pathlib import Path

from toolchain.elf.base import (
    PF_X,
    PT_GNU_STACK,
    ST_INFO_AT,
    ElfError,
    read_header,
    section_headers,
    segment_flags_at,
    symbol_entries,
)
from toolchain.errors import InputError, ToolchainError


class PatchError(InputError):
    pass


def apply_lief(src: Path, dst: Path, add_needed: list[str], runpath: str | None) -> None:
    """Append DT_NEEDED entries after the existing ones (lief prepends: rotate the names) and set DT_RUNPATH."""
    import lief

    binary = lief.ELF.parse(str(src))
    if binary is None:
        msg = f"{src}: lief cannot parse it"
        raise PatchError(msg, fix="verify it first: aoti-toolchain verify FILE")
    for lib in add_needed:
        binary.add_library(lib)
    if add_needed:
        entries = [e for e in binary.dynamic_entries if isinstance(e, lief.ELF.DynamicEntryLibrary)]
        names = [str(e.name) for e in entries]
        k = len(add_needed)
        # add_library put the new names first, in reverse order of the calls.
        new_first, old = names[:k], names[k:]
        wanted = old + list(reversed(new_first))
        for e, n in zip(entries, wanted, strict=True):
            e.name = n
    if runpath is not None:
        for tag in (lief.ELF.DynamicEntry.TAG.RPATH, lief.ELF.DynamicEntry.TAG.RUNPATH):
            while binary.has(tag):
                binary.remove(tag)
        binary.add(lief.ELF.DynamicEntryRunPath(runpath))
    binary.write(str(dst))
    if not dst.is_file():
        msg = f"lief did not write {dst}"
        raise PatchError(msg, fix="report this with the input file")


def clear_execstack(src: Path, dst: Path) -> None:
    """Copy src to dst with PF_X cleared in PT_GNU_STACK."""
    data = bytearray(Path(src).read_bytes())
    if clear_exec_stack_bytes(data, str(src)) is None:
        msg = f"{src}: has no PT_GNU_STACK segment to clear"
        raise PatchError(msg, fix="relink with -Wl,-z,noexecstack")
    Path(dst).write_bytes(data)


def clear_exec_stack_bytes(data: bytearray, name: str) -> tuple[int, int] | None:
    """Clears PF_X in the PT_GNU_STACK of the ELF image `data`, in place: the (offset, length) of the bytes it
    changed ((at, 0) when the flag was already clear), None when the image has no PT_GNU_STACK."""
    h, v = read_header(data, name)
    at = segment_flags_at(v, h, PT_GNU_STACK)
    if at is None:
        return None
    flags = v.unpack("I", at, "PT_GNU_STACK's flags")[0]
    if not flags & PF_X:
        return at, 0
    struct.pack_into(v.e + "I", data, at, flags & ~PF_X)
    return at, 4


def remove_needed(src: Path, dst: Path, lib: str) -> None:
    """Drop DT_NEEDED `lib` and its version requirement together (removing only the entry makes ld.so
    abort the process: a version requirement naming a library that is not needed). Used to reproduce the
    upstream plugin that lacks libstdc++ in DT_NEEDED."""
    import lief

    binary = lief.ELF.parse(str(src))
    if binary is None or not binary.has_library(lib):
        msg = f"{src}: has no DT_NEEDED {lib}"
        raise PatchError(msg, fix="nothing to remove")
    if binary.find_version_requirement(lib) is not None:
        binary.remove_version_requirement(lib)
    binary.remove_library(lib)
    binary.write(str(dst))


# GNU_UNIQUE -> GLOBAL. gcc gives every static data member of a template and every static local of an inline
# function (and its guard variable) binding STB_GNU_UNIQUE, so that one copy exists per process; glibc then
# marks the object that registers such a symbol first NODELETE: dlclose returns 0 and the mapping stays, and
# every plugin loaded later binds to the first plugin's copies. In a torch 2.13 CPU plugin they are 16
# libstdc++ header statics (std::regex tables and guards, to_chars digits, piecewise_construct,
# _Sp_make_shared_tag's fake type_info) and inductor's `inductor_cpu_integer_div_error_flag`, none defined by
# libstdc++.so.6 or the host, all used only inside the plugin behind its C entry points. GLOBAL keeps them
# exported and found by the same lookup: a definition in the global scope (the host, libstdc++.so.6 loaded
# RTLD_GLOBAL) still wins, so nothing that was shared with the runtime stops being shared; only the process-
# wide registration (and with it NODELETE and the sharing between plugins) goes. Kept as they are: symbols a
# library in the plugin's DT_NEEDED closure defines (they must keep binding to that copy wherever it sits in
# the process), locale facet ids (std::locale::id, one index per process), and every symbol of a plugin that
# carries its own C++ runtime (its facet ids must bind to the shared runtime: verify's two-cxx-runtimes).
# A byte edit of st_info in .dynsym and .symtab, nothing else moves (lief's writer rebuilds .dynstr, .strtab
# and both symbol tables for the same change: ~110,000 bytes differ in a 1.4 MB plugin).

STB_GLOBAL, STB_GNU_UNIQUE = 1, 10
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_FACET_ID = re.compile(r"^_ZN.*2idE$")  # std::locale::id static members (Facet::id)


def _unique_entries(data: bytes | bytearray, name: str) -> dict[str, list[int]]:
    """Defined GNU_UNIQUE symbols: name -> file offsets of their st_info bytes in .dynsym and .symtab."""
    try:
        h, v = read_header(data, name)
        sections = section_headers(v, h)
        out: dict[str, list[int]] = {}
        for tab in sections:
            if tab.type not in (_SHT_SYMTAB, _SHT_DYNSYM):
                continue
            entries, strs = symbol_entries(v, h, tab, sections)
            for at, st_name, st_info, shndx, _value, _size in entries:
                if st_info >> 4 == STB_GNU_UNIQUE and shndx != 0:
                    sym = v.cstr(strs.offset, strs.size, st_name, "a symbol name")
                    out.setdefault(sym, []).append(at + ST_INFO_AT[h.is64])
    except ElfError as exc:
        raise PatchError(str(exc).split("\n")[0], fix=exc.fix) from None
    return out


def unique_split(data: bytes | bytearray, name: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The plugin's defined GNU_UNIQUE symbols that are safe to make GLOBAL, and those kept, each with why.
    `name` is the file's path (its $ORIGIN for finding its DT_NEEDED libraries) or a name for messages."""
    from toolchain.elf.reader import parse_elf
    from toolchain.elf.resolve import Resolver
    from toolchain.spec import load_abi

    found = sorted(_unique_entries(data, name))
    if not found:
        return [], []
    elf = parse_elf(data, name)
    defined = elf.defined()
    own = [n for n in load_abi().cxx_runtime_core if n in defined]
    if own:
        reason = f"the plugin carries its own C++ runtime ({own[0]}): its unique symbols must bind to the shared one"
        return [], [(n, reason) for n in found]
    resolver = Resolver()
    libs = resolver.scope(elf, name).objects[1:]
    why: dict[str, str] = {}
    for n in found:
        if _FACET_ID.match(_guarded(n)):
            why[n] = "a locale facet id: one per process"
            continue
        lib = next((lo for lo in libs if resolver.find_defs(lo, n)), None)
        if lib is not None:
            why[n] = f"{os.path.basename(lib.path)} defines it too: it must keep binding to that copy"
    # a static and its guard variable (_ZGV + the static's name without _Z) bind together: one decision for both
    for n in found:
        partner = _guarded(n) if n.startswith("_ZGV") else "_ZGV" + n[2:]
        if n not in why and partner in why:
            why[n] = f"its pair {partner} stays unique"
    return [n for n in found if n not in why], [(n, why[n]) for n in found if n in why]


def _guarded(name: str) -> str:
    """The static a guard variable guards (`_ZGVZ...` -> `_ZZ...`); other names as they are."""
    return "_Z" + name[4:] if name.startswith("_ZGV") else name


def rebind_unique_bytes(data: bytearray, name: str) -> list[str]:
    """Makes the safe GNU_UNIQUE symbols GLOBAL in `data` (in place, st_info only); returns their names."""
    safe, _kept = unique_split(data, name)
    entries = _unique_entries(data, name)
    for n in safe:
        for at in entries[n]:
            data[at] = (STB_GLOBAL << 4) | (data[at] & 0xF)
    return safe


def rebind_unique(src: Path, dst: Path) -> list[str]:
    """Copy src to dst with its safe GNU_UNIQUE symbols made GLOBAL (see above); returns their names."""
    data = bytearray(Path(src).read_bytes())
    names = rebind_unique_bytes(data, str(src))
    Path(dst).write_bytes(data)
    return names


def rebind_unique_in_package(package: Path) -> list[str]:
    """Rebinds the safe GNU_UNIQUE symbols (see above) of every plugin in a `.pt2`, in place, and returns their
    names (edit_plugins_in_package: the package keeps its layout byte for byte)."""
    done: list[str] = []

    def rebind(data: bytearray, label: str) -> list[tuple[int, int]]:
        entries = _unique_entries(data, label)
        names = rebind_unique_bytes(data, label)
        done.extend(names)
        return [(at, 1) for n in names for at in entries[n]]

    edit_plugins_in_package(package, rebind, "rebinding GNU_UNIQUE symbols")
    return done


def edit_plugins_in_package(package: Path, edit: Callable[[bytearray, str], list[tuple[int, int]]], what: str,
                            error: type[ToolchainError] = PatchError) -> list[str]:
    """Byte edits of every plugin of a `.pt2`, in place; the names of the members changed.

    `edit(data, label)` changes a plugin's bytes in place and returns the (offset, length) spans it changed.
    Only those bytes and the member's CRC-32 (local header when set there, data descriptor, central
    directory) are written: the package keeps its layout byte for byte (torch aligns members for mmap).
    Compressed plugins are left as they are (torch stores plugins; verify reports a compressed one)."""
    import zipfile
    import zlib

    from toolchain.spec import load_abi

    plugin_dir = load_abi().package.plugin_dir
    with zipfile.ZipFile(package) as zf:
        infos = [i for i in zf.infolist() if plugin_dir in i.filename and i.filename.endswith(".so")
                 and i.compress_type == zipfile.ZIP_STORED]
        start_dir = zf.start_dir  # type: ignore[attr-defined]
    changed: list[str] = []
    with open(package, "r+b") as f:
        for info in infos:
            f.seek(info.header_offset)
            local = f.read(30)
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise error(f"{package}: {info.filename}: no local header where the central directory says")
            name_len, extra_len = struct.unpack_from("<HH", local, 26)
            data_at = info.header_offset + 30 + name_len + extra_len
            f.seek(data_at)
            data = bytearray(f.read(info.file_size))
            spans = [(at, n) for at, n in edit(data, f"{package}:{info.filename}") if n]
            if not spans:
                continue
            for at, n in spans:
                f.seek(data_at + at)
                f.write(data[at:at + n])
            _write_crc(f, package, info, local, data_at, start_dir, struct.pack("<I", zlib.crc32(data)), error)
            changed.append(info.filename)
    if changed:
        with zipfile.ZipFile(package) as zf:
            bad = zf.testzip()
        if bad is not None:
            raise error(f"{package}: {bad}: CRC-32 wrong after {what}")
    return changed


def _write_crc(f, package: Path, info, local: bytes, data_at: int, start_dir: int, crc: bytes,
               error: type[ToolchainError]) -> None:
    """A stored member's new CRC-32 wherever its zip records one: the local header (when set there), the data
    descriptor, the central directory."""
    if struct.unpack_from("<I", local, 14)[0] == info.CRC:
        f.seek(info.header_offset + 14)
        f.write(crc)
    if info.flag_bits & 0x08:  # data descriptor: [signature] crc sizes
        f.seek(data_at + info.compress_size)
        sig = f.read(4)
        f.seek(data_at + info.compress_size + (4 if sig == b"PK\x07\x08" else 0))
        f.write(crc)
    f.seek(start_dir)
    central = f.read()
    pos, want = 0, info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
    while central[pos:pos + 4] == b"PK\x01\x02":
        n_len, x_len, c_len = struct.unpack_from("<HHH", central, pos + 28)
        if central[pos + 46:pos + 46 + n_len] == want:
            f.seek(start_dir + pos + 16)
            f.write(crc)
            return
        pos += 46 + n_len + x_len + c_len
    raise error(f"{package}: {info.filename}: not found in the central directory")
