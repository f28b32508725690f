"""One exception hierarchy for the toolchain; one exit code per class, read from the exit-code table.

The table is toolchain/spec/exit_codes.toml: every code any of the project's CLIs exits with (aoti-run
gets the same table as a generated C++ header, toolchain/codegen.py). Each class below takes its
``exit_code`` from the row that names it, so a code is changed in one place."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from toolchain import parsed_cache

_SPEC_DIR = Path(__file__).resolve().parent / "spec"
EXIT_CODES_FILE = _SPEC_DIR / "exit_codes.toml"
C_API_FILE = _SPEC_DIR / "c_api.toml"
EXIT_CODES_SCHEMA = 1


def load_runtime_statuses(path: str | os.PathLike[str] = C_API_FILE) -> dict[str, int]:
    """The runtime's aoti_host_status values by name: the [[status]] rows of the C API spec (c_api.toml).

    Read here with the TOML parser alone, because the spec loader (toolchain.spec, which validates the whole file)
    imports this module."""
    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    try:
        rows = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("status")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read: {exc}", fix="restore it (git checkout -- toolchain/spec/c_api.toml)"
                        ) from None
    out: dict[str, int] = {}
    for i, row in enumerate(rows if isinstance(rows, list) else []):
        name, value = (row.get("name"), row.get("value")) if isinstance(row, dict) else (None, None)
        if (not isinstance(name, str) or type(value) is not int or name in out
                or value in out.values()):
            raise SpecError(f"{path}: status[{i}]: needs a new name (string) and a new value (integer)",
                            fix="give each [[status]] its own name and value")
        out[name] = value
    if not out:
        raise SpecError(f"{path}: no [[status]] tables", fix="list the aoti_host_status values as [[status]] tables")
    return out


class ToolchainError(Exception):
    """Base of every error the toolchain reports to its users (never a traceback)."""

    exit_code: int  # every class's code is set from the table, at the end of this module

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix: str | None = fix

    def __str__(self) -> str:
        base = super().__str__()
        if self.fix:
            return f"{base}\n  fix: {self.fix}"
        return base


class UsageError(ToolchainError):
    """The command line is wrong."""


class InputError(ToolchainError):
    """A file given to us is missing or malformed, or an input doesn't fit the model."""


class SpecError(ToolchainError):
    """The spec (toolchain/spec/*.toml) is malformed."""


class LoadError(ToolchainError):
    """A plugin or the host runtime library does not load."""


class RunError(ToolchainError):
    """A plugin's Run failed."""


class CompareError(ToolchainError):
    """Outputs differ from the reference beyond the tolerance."""


class ExportError(ToolchainError):
    """torch could not export or compile the module."""


#: The runtime's aoti_host_status values (runtime/include/aoti_host/c_api.h, from the C API spec), by name.
RUNTIME_STATUSES: dict[str, int] = parsed_cache.load("statuses", (C_API_FILE, __file__), load_runtime_statuses,
                                                     dict)


#: The classes the table may name.
ERROR_CLASSES: dict[str, type[ToolchainError]] = {
    c.__name__: c for c in (ToolchainError, UsageError, InputError, SpecError, LoadError, RunError, CompareError,
                            ExportError)
}


class ExitCode(NamedTuple):
    """One row of the exit-code table (toolchain/spec/exit_codes.toml)."""

    name: str
    code: int
    meaning: str
    tools: tuple[str, ...]
    classes: tuple[str, ...]
    statuses: tuple[str, ...]

    @property
    def cxx_name(self) -> str:
        """kExitBadInput for bad_input."""
        return "kExit" + "".join(part.capitalize() for part in self.name.split("_"))


_FIELDS: dict[str, type] = {"name": str, "code": int, "meaning": str, "tools": list, "classes": list,
                            "statuses": list}


def load_exit_codes(path: str | os.PathLike[str] = EXIT_CODES_FILE) -> tuple[ExitCode, ...]:
    """Read and check the exit-code table; SpecError names the file, the row and what is wrong."""

    def bad(where: str, why: str, fix: str) -> SpecError:
        return SpecError(f"{path}: {where}: {why}", fix=fix)

    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad("(file)", "exit-code table not found", "restore it (git checkout -- toolchain/spec/exit_codes.toml)"
                  ) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise bad("(file)", f"cannot read: {exc}", "fix the file's syntax or permissions") from None
    if data.get("schema") != EXIT_CODES_SCHEMA or set(data) != {"schema", "code"}:
        raise bad("(top level)", f"expected schema = {EXIT_CODES_SCHEMA} and [[code]] tables, got keys {sorted(data)}",
                  "keep the layout described at the top of the file")
    rows = data["code"]
    if not isinstance(rows, list) or not rows:
        raise bad("code", "no [[code]] tables", "add one [[code]] table per exit code")
    out: list[ExitCode] = []
    seen_classes: set[str] = set()
    seen_statuses: set[str] = set()
    for i, row in enumerate(rows):
        where = f"code[{i}]"
        if not isinstance(row, dict) or set(row) != set(_FIELDS):
            got = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise bad(where, f"keys {got}; expected exactly {', '.join(_FIELDS)}", "add the missing keys, drop others")
        for key, kind in _FIELDS.items():
            value = row[key]
            ok = isinstance(value, kind) and not isinstance(value, bool)
            if ok and kind is list:
                ok = all(isinstance(v, str) and v for v in value)
            if not ok:
                raise bad(f"{where}.{key}", f"must be {'a list of strings' if kind is list else kind.__name__}, "
                          f"got {value!r}", f"correct {key}")
        ec = ExitCode(row["name"], row["code"], row["meaning"], tuple(row["tools"]), tuple(row["classes"]),
                      tuple(row["statuses"]))
        if not re.fullmatch(r"[a-z][a-z0-9_]*", ec.name):
            raise bad(f"{where}.name", f"{ec.name!r} is not a lower_case identifier", "use lower_case_with_underscores")
        if not 0 <= ec.code <= 255:
            raise bad(f"{where}.code", f"{ec.code} is not an exit status (0..255)", "choose a code in 0..255")
        if any(ec.name == o.name or ec.code == o.code for o in out):
            raise bad(where, f"duplicate name {ec.name!r} or code {ec.code}", "give each row its own name and code")
        if not ec.tools or not ec.meaning.strip():
            raise bad(where, "empty meaning or tools", "say what the code means and which tools exit with it")
        for c in ec.classes:
            if c not in ERROR_CLASSES or c in seen_classes:
                raise bad(f"{where}.classes", f"{c!r} is unknown or named twice",
                          f"name each of {', '.join(ERROR_CLASSES)} in one row at most")
            seen_classes.add(c)
        for s in ec.statuses:
            if s not in RUNTIME_STATUSES or s in seen_statuses:
                raise bad(f"{where}.statuses", f"{s!r} is unknown or named twice",
                          f"name each of {', '.join(RUNTIME_STATUSES)} in exactly one row")
            seen_statuses.add(s)
        out.append(ec)
    missing = [c for c in ERROR_CLASSES if c not in seen_classes]
    missing += [s for s in RUNTIME_STATUSES if s not in seen_statuses]
    if missing:
        raise bad("code", f"{', '.join(missing)} in no row", "give every error class and runtime status a code")
    return tuple(out)


EXIT_CODES: tuple[ExitCode, ...] = parsed_cache.load(
    "exit_codes", (EXIT_CODES_FILE, C_API_FILE, __file__), load_exit_codes,
    lambda stored: tuple(ExitCode._make(row) for row in stored))
_BY_NAME: dict[str, ExitCode] = {e.name: e for e in EXIT_CODES}


def exit_code(name: str) -> int:
    """The exit status called `name` in the table (KeyError for a name it does not have)."""
    return _BY_NAME[name].code


def error_for_status(status: int) -> type[ToolchainError]:
    """The exception class for a runtime aoti_host_status: the first class of the row that lists it."""
    for row in EXIT_CODES:
        if any(RUNTIME_STATUSES[s] == status for s in row.statuses):
            return ERROR_CLASSES[row.classes[0]] if row.classes else ToolchainError
    return ToolchainError


for _row in EXIT_CODES:
    for _name in _row.classes:
        ERROR_CLASSES[_name].exit_code = _row.code
