"""Does a linked host program or runtime library export every shim a plugin may import?

FACTS.md: "the name is in .dynsym" also matches undefined entries, so a shim counts as exported only
when it is DEFINED, default visibility, GLOBAL or WEAK, and not a hidden (non-default) version.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from toolchain.elf.lief_adapter import DynamicSymbol, read_dynamic


@dataclass(frozen=True)
class MissingExport:
    name: str
    reason: str


def _problem(sym: DynamicSymbol | None) -> str | None:
    if sym is None:
        return "not in the dynamic symbol table"
    if not sym.defined:
        return "only an undefined reference in the dynamic symbol table"
    if sym.binding not in ("GLOBAL", "WEAK"):
        return f"binding {sym.binding}"
    if sym.visibility != "DEFAULT":
        return f"visibility {sym.visibility}"
    if sym.version_hidden:
        return f"hidden version {sym.version}"
    return None


def missing_exports(path: Path, names: Iterable[str]) -> list[MissingExport]:
    info = read_dynamic(path)
    by_name: dict[str, DynamicSymbol] = {}
    for sym in info.symbols:
        # Prefer the defined entry when a name appears more than once.
        if sym.name not in by_name or (sym.defined and not by_name[sym.name].defined):
            by_name[sym.name] = sym
    out = []
    for name in names:
        reason = _problem(by_name.get(name))
        if reason is not None:
            out.append(MissingExport(name, reason))
    return out
