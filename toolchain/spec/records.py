"""toolchain/spec/records.toml read and checked: the key names of the JSON records in a package (the
contract, the constant layouts, the target record) and of a program's methods.json.

Code reads and writes those records through these constants, never through key literals:
`RECORDS.contract_tensor.dtype` is the JSON key of a tensor's dtype; `RECORDS.required["constant"]` the keys
the runtime refuses a constant layout without. codegen renders the same table into the runtime's
aoti_host/package_records.h (`records::contract_tensor::kDtype`), so a key renamed in the spec is renamed
in both languages.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from toolchain import parsed_cache
from toolchain.errors import SpecError

SPEC = Path(__file__).resolve().parent / "records.toml"
_ID = re.compile(r"^[a-z][a-z0-9_]*$")
# A key as a C++ string literal and a JSON member name both take it as written: no quote, backslash or control
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class RecordObject(NamedTuple):
    """One kind of JSON object in a record: its name, its keys (id -> JSON key) and the required ids."""

    name: str
    keys: dict[str, str]
    required: tuple[str, ...]

    def cxx(self, key_id: str) -> str:
        """The C++ constant of a key: data_size -> kDataSize."""
        return "k" + "".join(part.capitalize() for part in key_id.split("_"))


class Records:
    """Every object of records.toml: `records.<object>.<id>` is the JSON key (a namedtuple per object)."""

    def __init__(self, objects: dict[str, RecordObject], source: Path) -> None:
        self.objects = objects
        self.source = source
        #: object -> the JSON keys the runtime refuses it without
        self.required = {o.name: tuple(o.keys[i] for i in o.required) for o in objects.values()}
        for o in objects.values():
            setattr(self, o.name, namedtuple(o.name, list(o.keys))(**o.keys))

    def __getattr__(self, name: str) -> Any:  # only for names that are not an object of the spec
        msg = f"{self.source}: no object {name!r} (one of {', '.join(self.objects)})"
        raise AttributeError(msg)


def _bad(path: Path, where: str, why: str, fix: str) -> SpecError:
    return SpecError(f"{path}: {where}: {why}", fix=fix)


@cache
def load_records(path: str | os.PathLike[str] = SPEC) -> Records:
    """The records of `path`; the packaged table through the user's parsed cache (toolchain.parsed_cache)."""
    if Path(path) == SPEC:
        return parsed_cache.load("records", (SPEC, __file__), lambda: _load(SPEC), _records_from, _plain)
    return _load(path)


def _plain(records: Records) -> dict:
    return {o.name: (dict(o.keys), tuple(o.required)) for o in records.objects.values()}


def _records_from(stored: dict) -> Records:
    return Records({name: RecordObject(name, dict(keys), tuple(required)) for name, (keys, required) in stored.items()},
                   SPEC)


def _load(path: str | os.PathLike[str]) -> Records:
    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    p = Path(path)
    data = tomllib.loads(p.read_text(encoding="utf-8"))
    if data.get("schema") != 1:
        raise _bad(p, "schema", f"is {data.get('schema')!r}, not 1", "set schema = 1")
    objects: dict[str, RecordObject] = {}
    for name, table in data.items():
        if name == "schema":
            continue
        if not isinstance(table, dict) or set(table) != {"keys", "required"} or not _ID.match(name):
            raise _bad(p, f"[{name}]", "is not an object table with `required` and `[" + name + ".keys]`",
                       "give each object a lower-case name, a required list and a keys table")
        keys, required = table["keys"], table["required"]
        for key_id, key in keys.items():
            if not _ID.match(key_id) or not isinstance(key, str) or not _KEY.match(key):
                raise _bad(p, f"[{name}.keys] {key_id}", f"{key!r} is not a key name",
                           "ids are lower_case; keys are letters, digits, _ . - (at most 64)")
        if len(set(keys.values())) != len(keys):
            raise _bad(p, f"[{name}.keys]", "names one JSON key twice", "give each id its own key")
        unknown = [r for r in required if r not in keys]
        if unknown:
            raise _bad(p, f"[{name}] required", f"{unknown[0]!r} is not an id of [{name}.keys]",
                       f"use ids of [{name}.keys]: {', '.join(keys)}")
        objects[name] = RecordObject(name, dict(keys), tuple(required))
    return Records(objects, p)


#: The records of toolchain/spec/records.toml.
RECORDS = load_records()
