"""The spec: the AOTI C ABI as data (entry points, shims, providers, ABI facts, the C API) and its loaders.

Everything that lists shims or entry points (headers, linker lists, link tests, the verifier)
is generated from the TOML files next to this module: entry_points.toml, shims.toml and providers.toml
(``load_spec``), abi.toml (dtypes, constant codes, package member names, C++-runtime symbols: ``load_abi``)
and c_api.toml (the host runtime's C API: ``load_c_api``). A malformed spec is rejected with a
``SpecError`` naming the file, the key and the reason, plus how to fix it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from toolchain import parsed_cache
from toolchain.errors import SpecError

SPEC_DIR = Path(__file__).resolve().parent
_LOADER = SPEC_DIR / "__init__.py"  # this module: what the parsed cache's entries depend on besides the TOML
SCHEMA_VERSION = 1
ENTRY_POINTS_FILE = "entry_points.toml"
SHIMS_FILE = "shims.toml"
PROVIDERS_FILE = "providers.toml"
ABI_FILE = "abi.toml"
C_API_FILE = "c_api.toml"
GROUPS: tuple[str, ...] = ("core", "cpu", "cuda")
HEADERS: tuple[str, ...] = ("shim.h", "generated/c_shim_cpu.h", "generated/c_shim_cuda.h", "c/shim_cpu.h")
# Zero-argument int32_t getters whose value the host chooses once (torch's enum values).
CONSTANT_PREFIXES: tuple[str, ...] = (
    "aoti_torch_dtype_",
    "aoti_torch_device_type_",
    "aoti_torch_layout_",
    "aoti_torch_memory_format_",
)

_IDENT = r"[A-Za-z_]\w*"
_TYPE = (rf"(?:(?:const|unsigned|signed|long|short|struct)\s+)*(?:{_IDENT}::)*{_IDENT}"
         rf"(?:\s*\*(?:\s*const\b)?)*")
_PROTO_PATTERN = rf"^\s*(?P<ret>{_TYPE})\s*\b(?P<name>{_IDENT})\s*\((?P<params>[^()]*)\)\s*$"
_PARAM_PATTERN = rf"^\s*(?P<type>{_TYPE})\s*\b(?P<name>{_IDENT})\s*$"
_VERSION_RE = re.compile(r"^\d+\.\d+$")
_SPACES_RE = re.compile(r"\s+")
_STAR_RE = re.compile(r"\s*\*\s*")


class Param(NamedTuple):
    """One parameter of a C prototype: its type and name."""

    type: str
    name: str


class Function(NamedTuple):
    """A C function of the spec: name, return type, parameters, and the prototype's text."""

    name: str
    returns: str
    params: tuple[Param, ...]
    prototype: str  # normalised: "RET NAME(TYPE NAME, ...)"


class EntryPoint(NamedTuple):
    """An AOTInductor entry point a plugin exports (entry_points.toml): a Function's fields, then its own."""

    name: str
    returns: str
    params: tuple[Param, ...]
    prototype: str
    required: bool
    since: str
    deprecated: bool
    since_note: str = ""


class Shim(NamedTuple):
    """A shim function the host provides to plugins (shims.toml): a Function's fields, its group and header."""

    name: str
    returns: str
    params: tuple[Param, ...]
    prototype: str
    group: str
    header: str
    # the provider (providers.toml) whose library the host's implementation opens on the shim's first call
    loads: str = ""
    # an op shim's generated wrapper: the kernel entry it calls (a function in namespace aoti_host) and the
    # C++ arguments passed before the shim's own; or why its wrapper is written by hand (toolchain/shim_wrappers.py
    # checks these; docs/architecture.md "Shim rows")
    impl: str = ""
    impl_args: tuple[str, ...] = ()
    manual: str = ""

    @property
    def is_constant(self) -> bool:
        """True for the zero-argument int32_t dtype_/device_type_/layout_/memory_format_ getters."""
        return (
            not self.params
            and self.returns == "int32_t"
            and self.name.startswith(CONSTANT_PREFIXES)
        )


class Provider(NamedTuple):
    """A library that provides symbols a plugin may import (providers.toml): its SONAMEs and patterns."""

    name: str
    sonames: tuple[str, ...]
    symbol_patterns: tuple[str, ...]
    preload: bool
    note: str = ""


class Spec(NamedTuple):
    """The entry points, shims and providers of the spec, and the files they were read from."""

    entry_points: tuple[EntryPoint, ...]
    shims: tuple[Shim, ...]
    providers: tuple[Provider, ...]
    types: tuple[str, ...]
    sources: tuple[Path, ...]  # the files read

    def shims_in(self, *groups: str) -> tuple[Shim, ...]:
        for group in groups:
            if group not in GROUPS:
                msg = f"unknown shim group {group!r}{_did_you_mean(group, GROUPS)}"
                raise SpecError(msg, fix=f"use one of: {', '.join(GROUPS)}")
        return tuple(s for s in self.shims if s.group in groups)

    def shim(self, name: str) -> Shim:
        return _named(self.shims, name, "shim", SHIMS_FILE)

    def entry_point(self, name: str) -> EntryPoint:
        return _named(self.entry_points, name, "entry point", ENTRY_POINTS_FILE)


def _named(rows: tuple[Any, ...], name: str, what: str, file: str) -> Any:
    """The row of `rows` called `name`; SpecError with the closest name when there is none."""
    for row in rows:
        if row.name == name:
            return row
    msg = f"no {what} named {name!r} in the spec{_did_you_mean(name, [r.name for r in rows])}"
    raise SpecError(msg, fix=f"add it to {SPEC_DIR / file} or correct the name")


# ---------------------------------------------------------------------------------------------
# prototypes


def normalise_type(text: str) -> str:
    """``const int64_t *`` -> ``const int64_t*``: single spaces, stars attached to the type."""
    text = _SPACES_RE.sub(" ", text.strip())
    return _STAR_RE.sub("*", text).replace("*const", "* const")


def parse_prototype(text: str) -> Function:
    """Parse ``RET NAME(TYPE NAME, ...)``; ``()`` and ``(void)`` mean no parameters.

    Raises ``ValueError`` with the reason when the text is not such a prototype.
    """
    m = re.match(_PROTO_PATTERN, text)
    if m is None:
        msg = f"cannot parse {text!r} as 'RET NAME(TYPE NAME, ...)'"
        raise ValueError(msg)
    returns = normalise_type(m["ret"])
    raw_params = m["params"].strip()
    params: list[Param] = []
    if raw_params not in ("", "void"):
        for i, part in enumerate(raw_params.split(",")):
            pm = re.match(_PARAM_PATTERN, part)
            if pm is None:
                msg = f"cannot parse parameter {i + 1} {part.strip()!r} as 'TYPE NAME'"
                raise ValueError(msg)
            params.append(Param(normalise_type(pm["type"]), pm["name"]))
    args = ", ".join(f"{p.type} {p.name}" for p in params)
    prototype = f"{returns} {m['name']}({args})"
    return Function(m["name"], returns, tuple(params), prototype)


# ---------------------------------------------------------------------------------------------
# validation helpers


def _did_you_mean(word: str, choices: Any) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _error(path: str | os.PathLike[str], key: str, reason: str, fix: str) -> SpecError:
    return SpecError(f"{path}: {key}: {reason}", fix=fix)


_KIND_NAMES = {str: "a string", bool: "a boolean (true/false)", list: "an array of strings",
               int: "an integer"}


def _check_value(path: str | os.PathLike[str], key: str, value: object, kind: type) -> None:
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if ok and kind is list:
        ok = all(isinstance(v, str) for v in value)  # type: ignore[attr-defined]
    if not ok:
        got = type(value).__name__
        raise _error(path, key, f"must be {_KIND_NAMES[kind]}, got {got} {value!r}",
                     f"write {key.rsplit('.', 1)[-1]} as {_KIND_NAMES[kind]}")


def _check_keys(path: str | os.PathLike[str], where: str, table: dict[str, Any], fields: dict[str, tuple[type, bool]]
                ) -> None:
    for k in table:
        if k not in fields:
            raise _error(path, f"{where}.{k}" if where else k,
                         f"unknown key {k!r}{_did_you_mean(k, fields)}",
                         f"remove it or correct the spelling; allowed keys: {', '.join(fields)}")
    for k, (kind, required) in fields.items():
        key = f"{where}.{k}" if where else k
        if k not in table:
            if required:
                raise _error(path, key, "missing required key", f"add {k} = ... ({_KIND_NAMES[kind]})")
            continue
        _check_value(path, key, table[k], kind)


def _read(path: str | os.PathLike[str], array: str, extra_top: dict[str, tuple[type, bool]],
          tables: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The file's top level: schema, `extra_top` keys, the [[array]], and `tables` (checked by the caller)."""
    import tomllib  # only when a file is parsed: the parsed cache spares most starts tomllib and its imports

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _error(path, "(file)", "spec file not found",
                     "restore it from the repository (git checkout -- <file>)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(path, "(file)", f"cannot read: {exc}", "check the file's permissions and encoding") from None
    except tomllib.TOMLDecodeError as exc:
        raise _error(path, "(file)", f"invalid TOML: {exc}", "fix the syntax at that line and column") from None
    if "schema" not in data:
        raise _error(path, "schema", "missing schema version",
                     f"add 'schema = {SCHEMA_VERSION}' at the top of the file")
    schema = data["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA_VERSION:
        raise _error(path, "schema", f"unknown schema version {schema!r} (this toolchain reads {SCHEMA_VERSION})",
                     f"write the file for schema {SCHEMA_VERSION} or upgrade aoti-toolchain")
    fields: dict[str, tuple[type, bool]] = {"schema": (int, True), **extra_top, array: (list, True)}
    for k in data:
        if k not in fields and k not in tables:
            allowed = [*fields, *tables]
            raise _error(path, k, f"unknown key {k!r}{_did_you_mean(k, allowed)}",
                         f"remove it or correct the spelling; allowed top-level keys: {', '.join(allowed)}")
    for k, (kind, _required) in extra_top.items():
        if k not in data:
            raise _error(path, k, "missing required key", f"add {k} = [...] at the top of the file")
        _check_value(path, k, data[k], kind)
    rows = data.get(array)
    if rows is None:
        raise _error(path, array, f"no [[{array}]] tables", f"add at least one [[{array}]] table")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _error(path, array, f"must be an array of tables ([[{array}]])",
                     f"write each entry as a [[{array}]] table")
    return data, rows


def _where(array: str, index: int, row: dict[str, Any]) -> str:
    name = row.get("name")
    return f'{array} "{name}"' if isinstance(name, str) and name else f"{array}[{index}]"


def _function(path: str | os.PathLike[str], where: str, row: dict[str, Any], seen: set[str]) -> Function:
    name = row["name"]
    if name in seen:
        raise _error(path, f"{where}.name", f"duplicate name {name!r}", "keep one entry per name; delete the other")
    seen.add(name)
    try:
        fn = parse_prototype(row["prototype"])
    except ValueError as exc:
        raise _error(path, f"{where}.prototype", f"unparsable prototype: {exc}",
                     "write it as in the torch header, without the export macro or the trailing ';'") from None
    if fn.name != name:
        raise _error(path, f"{where}.prototype", f"prototype declares {fn.name!r} but name is {name!r}",
                     "make name and the prototype's function name the same")
    return fn


# ---------------------------------------------------------------------------------------------
# the three files

_EP_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "prototype": (str, True), "required": (bool, True), "since": (str, True),
    "deprecated": (bool, True), "since_note": (str, False), "source": (str, False),
}
_SHIM_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "prototype": (str, True), "group": (str, True), "header": (str, True),
    "note": (str, False), "loads": (str, False), "impl": (str, False), "impl_args": (list, False),
    "manual": (str, False),
}
_PROVIDER_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "soname": (str, False), "sonames": (list, False),
    "symbol_patterns": (list, True), "preload": (bool, True), "note": (str, False),
}


def _load_entry_points(path: str | os.PathLike[str]) -> tuple[EntryPoint, ...]:
    _, rows = _read(path, "entry_point", {})
    seen: set[str] = set()
    out: list[EntryPoint] = []
    for i, row in enumerate(rows):
        where = _where("entry_point", i, row)
        _check_keys(path, where, row, _EP_FIELDS)
        fn = _function(path, where, row, seen)
        since = row["since"]
        if not _VERSION_RE.match(since):
            raise _error(path, f"{where}.since", f"version {since!r} is not like '2.13'",
                         "give the best-known torch release as MAJOR.MINOR and explain doubt in since_note")
        out.append(EntryPoint(fn.name, fn.returns, fn.params, fn.prototype, required=row["required"],
                              since=since, deprecated=row["deprecated"], since_note=row.get("since_note", "")))
    return tuple(out)


def _load_shims(path: str | os.PathLike[str]) -> tuple[tuple[Shim, ...], tuple[str, ...]]:
    data, rows = _read(path, "shim", {"types": (list, True)})
    types: list[str] = []
    for i, t in enumerate(data["types"]):
        norm = normalise_type(t)
        if not norm or norm in types:
            reason = "empty type" if not norm else f"duplicate type {norm!r}"
            raise _error(path, f"types[{i}]", reason, "list each type once")
        types.append(norm)
    seen: set[str] = set()
    out: list[Shim] = []
    for i, row in enumerate(rows):
        where = _where("shim", i, row)
        _check_keys(path, where, row, _SHIM_FIELDS)
        fn = _function(path, where, row, seen)
        for field, choices in (("group", GROUPS), ("header", HEADERS)):
            if row[field] not in choices:
                raise _error(path, f"{where}.{field}",
                             f"unknown {field} {row[field]!r}{_did_you_mean(row[field], choices)}",
                             f"use one of: {', '.join(choices)}")
        for t in (fn.returns, *(p.type for p in fn.params)):
            if t not in types:
                raise _error(path, f"{where}.prototype", f"type {t!r} is not in the top-level types list",
                             "add it to types = [...] if the C header can declare it (no c10/C++ types), "
                             "or drop this shim")
        out.append(Shim(fn.name, fn.returns, fn.params, fn.prototype, group=row["group"], header=row["header"],
                        loads=row.get("loads", ""), impl=row.get("impl", ""),
                        impl_args=tuple(row.get("impl_args", ())), manual=row.get("manual", "")))
    return tuple(out), tuple(types)


def _load_providers(path: str | os.PathLike[str]) -> tuple[Provider, ...]:
    _, rows = _read(path, "provider", {})
    seen: set[str] = set()
    out: list[Provider] = []
    for i, row in enumerate(rows):
        where = _where("provider", i, row)
        _check_keys(path, where, row, _PROVIDER_FIELDS)
        if row["name"] in seen:
            raise _error(path, f"{where}.name", f"duplicate name {row['name']!r}",
                         "keep one entry per name; delete the other")
        seen.add(row["name"])
        if ("soname" in row) == ("sonames" in row):
            raise _error(path, f"{where}.sonames", "give exactly one of soname (a string) or sonames (an array)",
                         'write sonames = ["libfoo.so.1", ...]')
        sonames = (row["soname"],) if "soname" in row else tuple(row["sonames"])
        if not sonames or not all(sonames):
            raise _error(path, f"{where}.sonames", "empty soname list", "list at least one soname")
        out.append(Provider(row["name"], sonames, tuple(row["symbol_patterns"]), row["preload"],
                            row.get("note", "")))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# abi.toml: dtypes, constant codes, package member names, C++-runtime symbols


class Dtype(NamedTuple):
    """One torch dtype: its name, code and item size (abi.toml)."""

    name: str
    code: int
    itemsize: int
    runtime: bool  # the host runtime computes with it (contracts may name it)
    numpy: str  # numpy's dtype string ("<f4"; "<V2" for ml_dtypes.bfloat16), "" when numpy has none
    aliases: tuple[str, ...]

    @property
    def numpy_kind(self) -> str:
        """numpy's kind character ('f', 'i', 'u', 'b', 'c'; 'V' for an ml_dtypes type), "" when numpy has none."""
        return self.numpy[1] if self.numpy else ""


class PackageLayout(NamedTuple):
    """The .pt2 members the runtime reads and their schema versions (abi.toml)."""

    contract_entry: str
    contract_schema: int
    constants_entry: str
    constants_schema: int
    plugin_dir: str
    methods_manifest: str
    methods_schema: int
    target_entry: str
    target_schema: int


#: The getter families whose values abi.toml holds, by their table there (dtypes come from [[dtype]]).
CONSTANT_TABLES: dict[str, str] = {
    "aoti_torch_device_type_": "device_type", "aoti_torch_layout_": "layout",
    "aoti_torch_memory_format_": "memory_format",
}


class Abi(NamedTuple):
    """The ABI facts both languages share: dtypes, constant tables, the package layout (abi.toml)."""

    dtypes: tuple[Dtype, ...]  # in code order, dense from 0
    constants: dict[str, dict[str, int]]  # table ("device_type", ...) -> {name: code}
    package: PackageLayout
    cxx_runtime_core: tuple[str, ...]
    source: Path  # the file read

    def dtype(self, name: str) -> Dtype | None:
        """The dtype called `name` or one of its aliases ("torch." prefix allowed); None if none is."""
        n = name.removeprefix("torch.")
        return next((d for d in self.dtypes if n == d.name or n in d.aliases), None)

    def dtype_names(self) -> dict[str, Dtype]:
        """Every name a contract may use (names and aliases of the runtime's dtypes) -> its dtype."""
        out: dict[str, Dtype] = {}
        for d in self.dtypes:
            if d.runtime:
                out[d.name] = d
                out.update(dict.fromkeys(d.aliases, d))
        return out

    def constant_value(self, getter: str) -> int | None:
        """What the zero-argument getter `getter` (aoti_torch_dtype_float32, ...) returns; None if unknown."""
        if getter.startswith("aoti_torch_dtype_"):
            d = next((d for d in self.dtypes if d.name == getter.removeprefix("aoti_torch_dtype_")), None)
            return None if d is None else d.code
        for prefix, table in CONSTANT_TABLES.items():
            if getter.startswith(prefix):
                return self.constants[table].get(getter.removeprefix(prefix))
        return None


_DTYPE_FIELDS: dict[str, tuple[type, bool]] = {
    "name": (str, True), "code": (int, True), "itemsize": (int, True), "runtime": (bool, True),
    "numpy": (str, True), "aliases": (list, True),
}
_PACKAGE_FIELDS: dict[str, tuple[type, bool]] = {
    "contract_entry": (str, True), "contract_schema": (int, True), "constants_entry": (str, True),
    "constants_schema": (int, True), "plugin_dir": (str, True), "methods_manifest": (str, True),
    "methods_schema": (int, True), "target_entry": (str, True), "target_schema": (int, True),
}
# 'V': an ml_dtypes extension type, always '<' (numpy.save's descr for it; plain void is '|V<n>').
_NUMPY_RE = re.compile(r"^([<|][biufc]|<V)\d{1,2}$")
_C_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*$")


def _table(path: str | os.PathLike[str], data: dict[str, Any], key: str) -> dict[str, Any]:
    t = data.get(key)
    if not isinstance(t, dict):
        raise _error(path, key, f"missing [{key}] table", f"add a [{key}] table (see the file's header)")
    return t


def load_abi(path: str | os.PathLike[str] | None = None) -> Abi:
    """Read and validate abi.toml (default: the packaged one, through the user's parsed cache)."""
    if path is None:
        default = SPEC_DIR / ABI_FILE
        return parsed_cache.load("abi", (default, _LOADER), lambda: _load_abi(default), _abi_from)
    return _load_abi(Path(path))


def _abi_from(stored: tuple) -> Abi:
    """An Abi from the parsed cache's plain copy of one."""
    dtypes, constants, package, cxx_core, source = stored
    return Abi(tuple(Dtype._make(d) for d in dtypes), constants, PackageLayout._make(package), cxx_core,
               Path(source))


def _load_abi(path: Path) -> Abi:
    data, rows = _read(path, "dtype", {}, ("device_type", "layout", "memory_format", "package", "cxx_runtime"))
    dtypes: list[Dtype] = []
    names: set[str] = set()
    for i, row in enumerate(rows):
        where = _where("dtype", i, row)
        _check_keys(path, where, row, _DTYPE_FIELDS)
        d = Dtype(row["name"], row["code"], row["itemsize"], row["runtime"], row["numpy"], tuple(row["aliases"]))
        if d.code != i:
            raise _error(path, f"{where}.code", f"code {d.code} at position {i}: codes must run 0, 1, 2, ... in order",
                         "keep the [[dtype]] tables sorted by code, one per code")
        for n in (d.name, *d.aliases):
            if not _C_NAME_RE.match(n) or n in names:
                raise _error(path, f"{where}", f"name or alias {n!r} is not a lower_case identifier or is taken",
                             "give each dtype its own names")
            names.add(n)
        if d.itemsize not in (1, 2, 4, 8, 16):
            raise _error(path, f"{where}.itemsize", f"{d.itemsize} is not 1, 2, 4, 8 or 16", "give torch's elementSize()")
        if d.numpy and (not _NUMPY_RE.match(d.numpy) or int(d.numpy[2:]) != d.itemsize):
            raise _error(path, f"{where}.numpy", f"{d.numpy!r} is not a little-endian numpy dtype string of "
                         f"{d.itemsize} bytes", "write it as numpy.dtype(...).str gives it ('<f4', '|u1'), or \"\"")
        dtypes.append(d)
    constants: dict[str, dict[str, int]] = {}
    for key in ("device_type", "layout", "memory_format"):
        table = _table(path, data, key)
        for name, value in table.items():
            _check_value(path, f"{key}.{name}", value, int)
        constants[key] = dict(table)
    pkg = _table(path, data, "package")
    _check_keys(path, "package", pkg, _PACKAGE_FIELDS)
    cxx = _table(path, data, "cxx_runtime")
    _check_keys(path, "cxx_runtime", cxx, {"core_symbols": (list, True)})
    if not cxx["core_symbols"]:
        raise _error(path, "cxx_runtime.core_symbols", "empty list", "list the symbols only a C++ runtime defines")
    return Abi(tuple(dtypes), constants, PackageLayout(**pkg), tuple(cxx["core_symbols"]), path)


# ---------------------------------------------------------------------------------------------
# c_api.toml: the host runtime's C API


class Status(NamedTuple):
    """One aoti_host_status value of the C API (c_api.toml)."""

    name: str
    value: int
    meaning: str


class CStruct(NamedTuple):
    """A struct of the C API and its fields (c_api.toml), with the comments the header prints."""

    name: str
    fields: tuple[Param, ...]
    doc: str = ""
    comments: dict[str, str] = {}  # field name -> its comment


class CApi(NamedTuple):
    """The runtime's C API: statuses, structs, functions, the function table and the shims it exports
    (c_api.toml)."""

    statuses: tuple[Status, ...]
    structs: tuple[CStruct, ...]
    functions: tuple[Function, ...]
    shims: tuple[str, ...]  # exported aoti_torch_* shims the ctypes module binds and the table carries
    source: Path
    table: tuple[tuple[str, ...], ...] = ()  # [v - 1]: the functions version v appends to aoti_host_api
    docs: dict[str, str] = {}  # function -> its comment in the header
    sections: dict[str, str] = {}  # function -> the comment opening the group it starts

    @property
    def table_version(self) -> int:
        """AOTI_HOST_API_VERSION: the version of the last [[table]] row."""
        return len(self.table)


#: The function that returns the table (not in it).
GET_API = "aoti_host_get_api"


def _c_struct(path: Path, i: int, row: dict[str, Any]) -> CStruct:
    where = _where("struct", i, row)
    comments = row.get("comments", {})
    _check_keys(path, where, {k: v for k, v in row.items() if k != "comments"},
                {"name": (str, True), "doc": (str, False), "fields": (list, True)})
    fields: list[Param] = []
    for k, text in enumerate(row["fields"]):
        m = re.match(_PARAM_PATTERN, text)
        if m is None:
            raise _error(path, f"{where}.fields[{k}]", f"cannot parse {text!r} as 'TYPE NAME'",
                         "write each field as 'TYPE NAME', one per entry")
        fields.append(Param(normalise_type(m["type"]), m["name"]))
    names = [f.name for f in fields]
    if not isinstance(comments, dict) or not all(isinstance(v, str) for v in comments.values()):
        raise _error(path, f"{where}.comments", "must be a table of field = \"comment\"",
                     "write [struct.comments] after the struct, one string per field")
    for field in comments:
        if field not in names:
            raise _error(path, f"{where}.comments.{field}", f"no field {field!r}{_did_you_mean(field, names)}",
                         f"comment a field of the struct: {', '.join(names)}")
    return CStruct(row["name"], tuple(fields), row.get("doc", ""), dict(comments))


def _c_api_table(path: Path, rows: Any, functions: list[Function], shims: tuple[str, ...]
                 ) -> tuple[tuple[str, ...], ...]:
    """The [[table]] rows, checked: versions 1..N in order, every function and shim in it exactly once."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise _error(path, "table", "missing or malformed [[table]] rows",
                     "add [[table]] version = 1, functions = [...]")
    known = [f.name for f in functions if f.name != GET_API] + list(shims)
    table: list[tuple[str, ...]] = []
    placed: dict[str, int] = {}
    for i, row in enumerate(rows):
        where = f"table[{i}]"
        _check_keys(path, where, row, {"version": (int, True), "functions": (list, True)})
        if row["version"] != i + 1:
            raise _error(path, f"{where}.version", f"version {row['version']} where {i + 1} comes next",
                         "number the [[table]] rows 1, 2, ... in order; never renumber a released one")
        for name in row["functions"]:
            if name not in known:
                raise _error(path, f"{where}.functions", f"{name!r} is neither a [[function]] nor in shims"
                             f"{_did_you_mean(name, known)}", "declare it first, or correct the name")
            if name in placed:
                raise _error(path, f"{where}.functions", f"{name!r} is already in version {placed[name]}",
                             "an entry is in the table once, in the version that added it")
            placed[name] = i + 1
        table.append(tuple(row["functions"]))
    missing = [n for n in known if n not in placed]
    if missing:
        raise _error(path, "table", f"not in the function table: {', '.join(missing)}",
                     f"append them to a new [[table]] row, version = {len(table) + 1} (released rows never change)")
    return tuple(table)


def load_c_api(path: Path | None = None) -> CApi:
    """Read and validate c_api.toml (default: the packaged one)."""
    path = SPEC_DIR / C_API_FILE if path is None else Path(path)
    data, rows = _read(path, "function", {"shims": (list, True)}, ("status", "struct", "table"))
    for key in ("status", "struct"):
        if not isinstance(data.get(key), list) or not all(isinstance(r, dict) for r in data[key]):
            raise _error(path, key, f"missing or malformed [[{key}]] tables", f"add one [[{key}]] table per {key}")
    statuses: list[Status] = []
    for i, row in enumerate(data["status"]):
        where = _where("status", i, row)
        _check_keys(path, where, row, {"name": (str, True), "value": (int, True), "meaning": (str, True)})
        st = Status(row["name"], row["value"], row["meaning"])
        if not re.fullmatch(r"AOTI_HOST_[A-Z_]+", st.name) or any(st.name == o.name or st.value == o.value
                                                                    for o in statuses):
            raise _error(path, where, f"{st.name!r} = {st.value}: not AOTI_HOST_<NAME>, or a duplicate name/value",
                         "give each status its own AOTI_HOST_ name and value")
        statuses.append(st)
    if not statuses or statuses[0].value != 0:
        raise _error(path, "status", "the first status must be the success value 0", "start with AOTI_HOST_OK = 0")
    structs = [_c_struct(path, i, row) for i, row in enumerate(data["struct"])]
    seen: set[str] = set()
    functions: list[Function] = []
    docs: dict[str, str] = {}
    sections: dict[str, str] = {}
    for i, row in enumerate(rows):
        where = _where("function", i, row)
        _check_keys(path, where, row, {"name": (str, True), "prototype": (str, True), "doc": (str, False),
                                       "section": (str, False)})
        functions.append(_function(path, where, row, seen))
        docs[row["name"]] = row.get("doc", "")
        if row.get("section"):
            sections[row["name"]] = row["section"]
    if GET_API not in seen:
        raise _error(path, "function", f"no [[function]] {GET_API!r}", "declare the call that returns the table")
    shims = tuple(data["shims"])
    table = _c_api_table(path, data.get("table"), functions, shims)
    return CApi(tuple(statuses), tuple(structs), tuple(functions), shims, path, table, docs, sections)


def spec_files(directory: str | os.PathLike[str] | None = None) -> tuple[Path, ...]:
    """The files ``load_spec`` reads, for build-system dependencies."""
    d = SPEC_DIR if directory is None else Path(directory)
    return (d / ENTRY_POINTS_FILE, d / SHIMS_FILE, d / PROVIDERS_FILE)


def load_spec(directory: str | os.PathLike[str] | None = None) -> Spec:
    """Read and validate the spec in ``directory`` (default: the packaged one, through the user's parsed
    cache: parsing and checking the three files is most of what `verify` would spend on the spec)."""
    if directory is None:
        return parsed_cache.load("spec", (*spec_files(), _LOADER), lambda: _load_spec(None), _spec_from)
    return _load_spec(directory)


def _params(stored: tuple) -> tuple[Param, ...]:
    return tuple(Param(t, n) for t, n in stored)


def _spec_from(stored: tuple) -> Spec:
    """A Spec from the parsed cache's plain copy of one (``_make`` refuses a row of another length: then the
    cache parses again)."""
    entry_points, shims, providers, types, sources = stored
    return Spec(
        entry_points=tuple(EntryPoint._make((n, r, _params(ps), *rest)) for n, r, ps, *rest in entry_points),
        shims=tuple(Shim._make((n, r, _params(ps), *rest)) for n, r, ps, *rest in shims),
        providers=tuple(Provider._make(p) for p in providers), types=types,
        sources=tuple(Path(p) for p in sources))


def _load_spec(directory: str | os.PathLike[str] | None) -> Spec:
    ep_path, shim_path, prov_path = spec_files(directory)
    entry_points = _load_entry_points(ep_path)
    shims, types = _load_shims(shim_path)
    providers = _load_providers(prov_path)
    names = [p.name for p in providers]
    for i, shim in enumerate(shims):
        if shim.loads and shim.loads not in names:
            raise _error(shim_path, f"shim[{i}] ({shim.name}).loads",
                         f"unknown provider {shim.loads!r}{_did_you_mean(shim.loads, names)}",
                         f"name a provider of {prov_path.name}: {', '.join(names)}")
    return Spec(entry_points=entry_points, shims=shims, providers=providers, types=types,
                sources=(ep_path, shim_path, prov_path))


__all__ = [
    "ABI_FILE", "CONSTANT_PREFIXES", "CONSTANT_TABLES", "C_API_FILE", "Abi", "CApi", "CStruct", "Dtype",
    "PackageLayout", "Status", "load_abi", "load_c_api", "GROUPS", "HEADERS", "SCHEMA_VERSION", "SPEC_DIR", "EntryPoint", "Function",
    "Param", "Provider", "Shim", "Spec", "SpecError", "load_spec", "normalise_type", "parse_prototype",
    "spec_files",
]
