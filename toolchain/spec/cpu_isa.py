"""toolchain/spec/cpu_isa.toml read and checked: x86-64 psABI levels and the extensions of each (toolchain/isa.py
decodes plugins against it; codegen renders it into the runtime's aoti_host/cpu_isa.h)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import NamedTuple

from toolchain import parsed_cache
from toolchain.errors import SpecError

SPEC = Path(__file__).resolve().parent / "cpu_isa.toml"
REGISTERS = ("eax", "ebx", "ecx", "edx")
#: The --cpu-isa that builds for the export machine itself (-march=native), beside the levels' choices.
NATIVE = "native"


class Extension(NamedTuple):
    """One x86-64 extension: its psABI level, where cpuid reports it, the XCR0 state it needs."""

    name: str
    level: str  # "" when no psABI level includes it
    leaf: int
    subleaf: int
    reg: str
    bit: int
    xcr0: int


class IsaSpec(NamedTuple):
    """The psABI levels, the --cpu-isa choices and the extensions of toolchain/spec/cpu_isa.toml."""

    levels: tuple[str, ...]  # ascending
    exports: dict[str, str]  # --cpu-isa choice -> level
    vec_bits: dict[str, int]  # level -> inductor's vector width
    extensions: dict[str, Extension]
    default_export: str  # export's --cpu-isa when none is given

    @property
    def export_choices(self) -> tuple[str, ...]:
        """export's --cpu-isa choices, widest first: "native" (the export machine's own), then each level's."""
        by_rank = sorted(self.exports, key=lambda c: self.rank(self.exports[c]), reverse=True)
        return (NATIVE, *by_rank)

    def march(self, choice: str) -> str:
        """The -march a --cpu-isa choice compiles with (its psABI level; "native" for native)."""
        return NATIVE if choice == NATIVE else self.exports[choice]

    def rank(self, level: str) -> int:
        return self.levels.index(level)

    def level_of(self, extensions: set[str] | list[str]) -> str:
        """The lowest level that includes every psABI extension of `extensions` (others are not counted)."""
        ranks = [self.rank(self.extensions[e].level) for e in extensions if self.extensions[e].level]
        return self.levels[max(ranks, default=0)]

    def beyond(self, extensions: set[str] | list[str], level: str, allowed: frozenset[str] = frozenset()) -> list[str]:
        """Those of `extensions` a CPU of `level` need not have (sorted by level, then name)."""
        r = self.rank(level)
        out = [e for e in extensions if e not in allowed
               and (not self.extensions[e].level or self.rank(self.extensions[e].level) > r)]
        order = list(self.extensions)
        return sorted(out, key=lambda e: (self.extensions[e].level == "", self.extensions[e].level, order.index(e)))


@cache
def load_isa_spec(path: str | os.PathLike[str] = SPEC) -> IsaSpec:
    """The CPU table of `path`; the packaged one through the user's parsed cache."""
    if path == SPEC:
        return parsed_cache.load("cpu_isa", (SPEC, __file__), lambda: _load(SPEC), _isa_from)
    return _load(path)


def _isa_from(stored: tuple) -> IsaSpec:
    """An IsaSpec from the parsed cache's plain copy of one."""
    levels, exports, vec_bits, extensions, default_export = stored
    return IsaSpec(levels, exports, vec_bits, {name: Extension._make(e) for name, e in extensions.items()},
                   default_export)


def _load(path: str | os.PathLike[str]) -> IsaSpec:
    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    levels = tuple(lv["name"] for lv in data["level"])
    exts = {}
    for e in data["extension"]:
        if e["level"] and e["level"] not in levels:
            msg = f"{path}: extension {e['name']}: unknown level {e['level']!r}"
            raise SpecError(msg, fix=f"use one of {', '.join(levels)} or \"\"")
        if e["reg"] not in REGISTERS or not 0 <= int(e["bit"]) < 32 or e["name"] in exts:
            msg = f"{path}: extension {e['name']}: reg must be one of {', '.join(REGISTERS)}, bit 0-31, names unique"
            raise SpecError(msg, fix="correct the entry")
        exts[e["name"]] = Extension(e["name"], e["level"], int(e["leaf"]), int(e["subleaf"]), e["reg"],
                                    int(e["bit"]), int(e["xcr0"]))
    exports = {lv["export"]: lv["name"] for lv in data["level"] if lv["export"]}
    if NATIVE in exports or data.get("default_export") not in exports:
        msg = f"{path}: default_export {data.get('default_export')!r} is not a level's export, or a level exports {NATIVE!r}"
        raise SpecError(msg, fix=f"set default_export to one of {', '.join(exports)}; {NATIVE!r} is export's own choice")
    return IsaSpec(levels=levels, exports=exports, vec_bits={lv["name"]: int(lv["vec_bits"]) for lv in data["level"]},
                   extensions=exts, default_export=data["default_export"])
