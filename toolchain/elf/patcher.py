"""Low-level ELF edits for `aoti-toolchain patch`. lief for what changes the layout (a new DT_NEEDED, a
RUNPATH string); a byte edit for the exec-stack flag (no layout change; clearing it is safe: nothing runs code from the stack).

Every function reads `src` and writes `dst` (both paths the caller owns); nothing is done in place.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from toolchain.elf.reader import PF_X, PT_GNU_STACK, read_elf
from toolchain.errors import InputError


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
    elf = read_elf(src)
    if elf.gnu_stack is None:
        msg = f"{src}: has no PT_GNU_STACK segment to clear"
        raise PatchError(msg, fix="relink with -Wl,-z,noexecstack")
    if src != dst:
        shutil.copyfile(src, dst)
    e = "<" if elf.little_endian else ">"
    with open(dst, "r+b") as f:
        head = f.read(64)
        if elf.elf_class == 64:
            phoff = struct.unpack_from(e + "Q", head, 32)[0]
            phentsize, phnum = struct.unpack_from(e + "HH", head, 54)
            flags_at = 4
        else:
            phoff = struct.unpack_from(e + "I", head, 28)[0]
            phentsize, phnum = struct.unpack_from(e + "HH", head, 42)
            flags_at = 24
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ptype = struct.unpack(e + "I", f.read(4))[0]
            if ptype == PT_GNU_STACK:
                f.seek(phoff + i * phentsize + flags_at)
                flags = struct.unpack(e + "I", f.read(4))[0]
                f.seek(phoff + i * phentsize + flags_at)
                f.write(struct.pack(e + "I", flags & ~PF_X))


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
