"""The spec's TOML files parsed ahead of time, so that a command's start-up does not import and run tomllib.

toolchain/_spec_parsed/ holds one module per toolchain/spec/*.toml: its text and tomllib's parse of it (as Python
literals: the bytecode cache holds them ready, and a command imports only the files it reads);
`prototypes.py`, toolchain.spec.parse_prototype's result for each `prototype` in them (keyed by the prototype's
text, so an edited one is parsed again); `spec_rows.py`, load_spec's validated rows with the texts of its three
files. `python -m toolchain.codegen --parsed-spec` writes them from the spec; tests/unit/test_speccache.py fails
when they are stale. The spec stays the one owner of the facts: `parse_toml` returns the stored parse only for a
text equal to the stored text, and tomllib's parse of anything else (an edited spec is read as it stands, only
slower). Each call returns new objects: callers may change them.
"""

from __future__ import annotations

from toolchain._startup import here, lazy_paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    PARSED_DIR: Path
lazy_paths(globals(), PARSED_DIR=here(__file__, "_spec_parsed"))  # pathlib.Path, for codegen and tests
SCHEMA = 3
_PACKAGE = "toolchain._spec_parsed"

_modules: dict[str, str] | None = None  # spec file name -> its module in the store ({}: no usable store)
_stored_prototypes: dict | None = None  # the store's PROTOTYPES as read: an entry is checked when it is asked for


class TomlError(ValueError):
    """Text that is not valid TOML; the message is tomllib's (line and column)."""


def _store_module(name: str):
    """toolchain._spec_parsed.<name> (the package itself for ""), or None where it cannot be imported (no store:
    tomllib parses)."""
    try:
        return __import__(f"{_PACKAGE}.{name}" if name else _PACKAGE, fromlist=["_"])
    except ImportError:
        return None


def _load_store() -> dict[str, str]:
    global _modules
    if _modules is None:
        _modules = {}
        package = _store_module("")
        modules = getattr(package, "MODULES", None)
        if getattr(package, "SCHEMA", None) == SCHEMA and isinstance(modules, dict):
            _modules = {k: v for k, v in modules.items() if isinstance(k, str) and isinstance(v, str)
                        and v.isidentifier()}
    return _modules


def _stored(name: str, text: str):
    """The store's module for spec file `name` when its stored text is `text`, else None."""
    mod = _load_store().get(name)
    module = _store_module(mod) if mod else None
    return module if module is not None and getattr(module, "TEXT", None) == text else None


def _checked_prototype(p) -> tuple[str, str, tuple[tuple[str, str], ...], str] | None:
    """A stored prototype entry in the shape codegen writes, or None (the caller parses the text instead)."""
    try:
        name, returns, params, prototype = p
        pairs = tuple((t, n) for t, n in params)
    except (TypeError, ValueError):
        return None
    if all(isinstance(x, str) for x in (name, returns, prototype, *(y for pair in pairs for y in pair))):
        return (name, returns, pairs, prototype)
    return None


def stored_prototype(text: str) -> tuple[str, str, tuple[tuple[str, str], ...], str] | None:
    """toolchain.spec.parse_prototype's result for `text` as codegen stored it (name, return type, (type, name)
    of each parameter, normalised prototype), for a prototype of the spec; None for any other text."""
    global _stored_prototypes
    if _stored_prototypes is None:
        module = _store_module("prototypes") if _load_store() else None
        protos = getattr(module, "PROTOTYPES", None)
        _stored_prototypes = protos if isinstance(protos, dict) else {}
    return _checked_prototype(_stored_prototypes[text]) if text in _stored_prototypes else None


def stored_spec(texts: dict[str, str]) -> tuple | None:
    """toolchain.spec.load_spec's rows (toolchain.spec.spec_rows) as codegen stored them, when `texts` (file name
    -> text) are exactly the files they were validated from; None otherwise (load_spec validates the files)."""
    module = _store_module("spec_rows") if _load_store() else None
    stored = getattr(module, "TEXTS", None)
    if not isinstance(stored, dict) or stored != texts or not callable(getattr(module, "rows", None)):
        return None
    rows = module.rows()  # type: ignore[union-attr]
    return rows if isinstance(rows, tuple) and len(rows) == 4 else None


def parse_toml(text: str, name: str) -> dict:
    """tomllib.loads(text) for the spec file called `name`: the stored parse when the text is the stored
    one, else tomllib's. Raises TomlError for invalid TOML."""
    module = _stored(name, text)
    if module is not None:
        data = module.data()
        if isinstance(data, dict):
            return data
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(str(exc)) from None
