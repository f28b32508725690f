"""The one place that imports lief; everything else works on these plain records.

lief is imported lazily (0.7-0.8 s), so SCons and the CLI start fast when they don't need it.
FACTS.md: lief's `imported_symbols` misses STT_NOTYPE undefined symbols (every `aoti_torch_*` a plugin
imports), so we walk the dynamic symbol table ourselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolchain.errors import InputError


class ElfReadError(InputError):
    pass


@dataclass(frozen=True)
class DynamicSymbol:
    name: str
    defined: bool
    binding: str  # GLOBAL | WEAK | LOCAL | GNU_UNIQUE
    visibility: str  # DEFAULT | HIDDEN | PROTECTED | INTERNAL
    type: str  # FUNC | OBJECT | NOTYPE | ...
    version: str | None  # "GLIBC_2.34", or None for unversioned / default
    version_hidden: bool


@dataclass(frozen=True)
class DynamicInfo:
    path: Path
    machine: str
    is_pie_or_shared: bool
    needed: tuple[str, ...]
    symbols: tuple[DynamicSymbol, ...]


def _enum_name(value: object) -> str:
    name = getattr(value, "name", None) or str(value)
    return name.rsplit(".", 1)[-1]


def version_definitions(path: Path) -> list[str]:
    """The symbol versions a library defines (GLIBC_2.34, GLIBCXX_3.4.30, ...), read with lief."""
    import lief

    binary = lief.ELF.parse(str(path))
    if binary is None:
        msg = f"{path}: not an ELF file lief can read"
        raise ElfReadError(msg, fix="pass a shared library")
    out = []
    for d in binary.symbols_version_definition:
        for aux in d.auxiliary_symbols:
            out.append(_text(aux.name))
    return out


def _text(value: str | bytes) -> str:
    """lief gives bytes for names that are not valid UTF-8; keep them round-trippable."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def read_dynamic(path: Path) -> DynamicInfo:
    """Dynamic symbols and DT_NEEDED of an ELF file."""
    import lief

    if not path.is_file():
        msg = f"{path}: no such file"
        raise ElfReadError(msg)
    binary = lief.ELF.parse(str(path))
    if binary is None:
        msg = f"{path}: not an ELF file lief can read"
        raise ElfReadError(msg, fix="pass a plugin .so, a host program or a shared library")
    symbols = []
    for sym in binary.dynamic_symbols:
        if not sym.name:
            continue
        version = None
        hidden = False
        sv = sym.symbol_version if sym.has_version else None
        aux_version = sv.symbol_version_auxiliary if sv is not None and sv.has_auxiliary_version else None
        if sv is not None and aux_version is not None:
            version = _text(aux_version.name)
            hidden = bool(sv.value & 0x8000)
        symbols.append(
            DynamicSymbol(
                name=_text(sym.name),
                defined=sym.shndx != 0,
                binding=_enum_name(sym.binding),
                visibility=_enum_name(sym.visibility),
                type=_enum_name(sym.type),
                version=version,
                version_hidden=hidden,
            )
        )
    return DynamicInfo(
        path=path,
        machine=_enum_name(binary.header.machine_type),
        is_pie_or_shared=_enum_name(binary.header.file_type) == "DYN",
        needed=tuple(_text(lib) for lib in binary.libraries),
        symbols=tuple(symbols),
    )
