"""Per-object configuration records: read them from any ELF file and find the objects that disagree.

`runtime/include/aoti_host/config.h` puts one SHT_NOTE record (owner "AOTI", type 0x414f0001) into each
object that includes an aoti_host header or is compiled by our SCons builders. The descriptor is text:
``source=<file>\\nKEY=value\\n...``. Notes are concatenated by the linker, survive --gc-sections and
strip, so a linked program or library still holds one record per object that went in.

API (used by the checks engine, toolchain/verify/checks.py, which the post-link step runs too):
- ``records_of(elf) -> list[ConfigRecord]``: the records among the notes the ELF reader parsed.
- ``read_config_records(path) -> list[ConfigRecord]``: the same for a file (an object, program or library).
- ``find_conflicts(records) -> list[ConfigConflict]``: one per key that has more than one value.
- ``format_conflicts(path, conflicts, records) -> str``: the message, each object with its defines (the
  rule's fix comes from the rule table, toolchain/spec/rules.toml).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.elf.reader import ElfFile, parse_note_bytes, read_elf

NOTE_OWNER = "AOTI"
NOTE_TYPE = 0x414F0001
SECTION = ".note.aoti.config"
RULE_MIXED = "mixed-config"
RULE_NO_RECORD = "object-without-config-record"


@dataclass(frozen=True)
class ConfigRecord:
    """The configuration one object was compiled with (its aoti_host/config.h note)."""

    object_name: str  # the source file the object was compiled from, as the compiler was given it
    defines: Mapping[str, str] = field(hash=False)

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.defines.items()))


@dataclass(frozen=True)
class ConfigConflict:
    """A configuration key the objects of one binary disagree on, with who saw which value."""

    key: str
    by_value: Mapping[str, tuple[ConfigRecord, ...]] = field(hash=False)  # value -> objects that saw it


def parse_notes(data: bytes, *, byteorder: str = "<") -> list[ConfigRecord]:
    """The AOTI records among the ELF notes in ``data`` (a note section or PT_NOTE segment's bytes)."""
    notes = parse_note_bytes(data, little_endian=byteorder == "<")
    return [_parse_desc(n.desc) for n in notes if n.owner == NOTE_OWNER and n.type == NOTE_TYPE]


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


def records_of(elf: ElfFile) -> list[ConfigRecord]:
    """The configuration records among an already parsed file's notes."""
    return [_parse_desc(n.desc) for n in elf.notes if n.owner == NOTE_OWNER and n.type == NOTE_TYPE]


def read_config_records(path: Path | str) -> list[ConfigRecord]:
    """Every configuration record in an ELF object, program or shared library (empty list if none).
    InputError (an ElfError for a file that is not a readable ELF file) names the file and the defect."""
    return records_of(read_elf(path))


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
    return "\n".join(lines)
