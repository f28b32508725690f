"""Per-object configuration records: read them from any ELF file and find the objects that disagree.

`runtime/include/aoti_host/config.h` puts one SHT_NOTE record (owner "AOTI", type 0x414f0001) into each
object that includes an aoti_host header or is compiled by our SCons builders. The descriptor is text:
``source=<file>\\nKEY=value\\n...``. Notes are concatenated by the linker, survive --gc-sections and
strip, so a linked program or library still holds one record per object that went in.

API (used by the SCons post-link check and by `aoti-toolchain verify`):
- ``read_config_records(path) -> list[ConfigRecord]``
- ``find_conflicts(records) -> list[ConfigConflict]``: one per key that has more than one value.
- ``format_conflicts(path, conflicts, records) -> str``: the message, each object with its defines.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.errors import InputError

NOTE_OWNER = "AOTI"
NOTE_TYPE = 0x414F0001
SECTION = ".note.aoti.config"
RULE_MIXED = "mixed-config"
RULE_NO_RECORD = "object-without-config-record"


class ConfigRecordError(InputError):
    pass


@dataclass(frozen=True)
class ConfigRecord:
    object_name: str  # the source file the object was compiled from, as the compiler was given it
    defines: Mapping[str, str] = field(hash=False)

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.defines.items()))


@dataclass(frozen=True)
class ConfigConflict:
    key: str
    by_value: Mapping[str, tuple[ConfigRecord, ...]] = field(hash=False)  # value -> objects that saw it


def parse_notes(data: bytes, *, byteorder: str = "<") -> list[ConfigRecord]:
    """The AOTI records among the ELF notes in ``data`` (a note section or PT_NOTE segment's bytes)."""
    out: list[ConfigRecord] = []
    off = 0
    while off + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(byteorder + "III", data, off)
        off += 12
        name = data[off : off + namesz].rstrip(b"\0")
        off += (namesz + 3) & ~3
        desc = data[off : off + descsz]
        off += (descsz + 3) & ~3
        if off > len(data) + 3:
            break  # truncated: ignore the partial note
        if name != NOTE_OWNER.encode() or ntype != NOTE_TYPE:
            continue
        out.append(_parse_desc(desc))
    return out


def _parse_desc(desc: bytes) -> ConfigRecord:
    text = desc.rstrip(b"\0").decode("utf-8", errors="replace")
    source = "?"
    defines: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "source":
            source = value
        else:
            defines[key] = value
    return ConfigRecord(source, defines)


def read_config_records(path: Path | str) -> list[ConfigRecord]:
    """Every configuration record in an ELF object, program or shared library (empty list if none)."""
    import lief

    path = Path(path)
    if not path.is_file():
        msg = f"{path}: no such file"
        raise ConfigRecordError(msg)
    binary = lief.ELF.parse(str(path))
    if binary is None:
        msg = f"{path}: not an ELF file lief can read"
        raise ConfigRecordError(msg, fix="pass an object file, a program or a shared library")
    order = "<" if _enum_name(binary.header.identity_data) in ("LSB", "ELFDATA2LSB") else ">"
    section = binary.get_section(SECTION)
    if section is not None:
        return parse_notes(bytes(section.content), byteorder=order)
    # Section headers stripped (sstrip): the records are still in a PT_NOTE segment.
    records: list[ConfigRecord] = []
    segments = list(binary.segments)  # keep the binary alive while iterating (FACTS.md: lief can crash)
    for seg in segments:
        if _enum_name(seg.type) == "NOTE":
            records.extend(parse_notes(bytes(seg.content), byteorder=order))
    return records


def _enum_name(value: object) -> str:
    name = getattr(value, "name", None) or str(value)
    return name.rsplit(".", 1)[-1]


def find_conflicts(records: Iterable[ConfigRecord]) -> list[ConfigConflict]:
    """Keys whose value differs between records. A record without a key does not take part for it."""
    by_key: dict[str, dict[str, list[ConfigRecord]]] = {}
    for rec in records:
        for key, value in rec.defines.items():
            by_key.setdefault(key, {}).setdefault(value, []).append(rec)
    return [
        ConfigConflict(key, {v: tuple(recs) for v, recs in sorted(values.items())})
        for key, values in sorted(by_key.items())
        if len(values) > 1
    ]


def format_conflicts(path: Path | str, conflicts: list[ConfigConflict], records: list[ConfigRecord]) -> str:
    """The mixed-config finding: which keys differ, then each object with its defines."""
    keys = ", ".join(f"{c.key} ({' vs '.join(c.by_value)})" for c in conflicts)
    lines = [f"{path}: objects were compiled with different configurations [rule {RULE_MIXED}]: {keys}"]
    bad = {c.key for c in conflicts}
    for rec in records:
        marks = ", ".join(f"{k}={rec.defines[k]}" for k in sorted(bad) if k in rec.defines)
        lines.append(f"  {rec.object_name}: {rec.describe()}" + (f"   <- {marks}" if marks else ""))
    lines.append(
        "  fix: compile every translation unit of one binary with the same defines: build it with the SCons "
        "builders of one variant (toolchain/scons), or take the defines from the runtime's usage requirements "
        "(env.AotiUseRuntime) instead of repeating them by hand; a missing CUDA_AVAILABLE shows as 'unset'."
    )
    return "\n".join(lines)
