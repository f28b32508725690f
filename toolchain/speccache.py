"""The spec's TOML files parsed ahead of time, so that a command's start-up does not import and run tomllib.

toolchain/_spec_parsed.py holds, for each toolchain/spec/*.toml, its text and tomllib's parse of it (as Python
literals: the module's bytecode cache holds them ready to use), and toolchain.spec.parse_prototype's result for
each `prototype` in them (keyed by the prototype's text, so an edited one is parsed again).
`python -m toolchain.codegen --parsed-spec` writes it from the spec; tests/unit/test_speccache.py fails when it is
stale. The spec stays the one owner of the facts: `parse_toml` returns the stored parse only for a text equal to
the stored text, and tomllib's parse of anything else (an edited spec is read as it stands, only slower). Each
call returns new objects: callers may change them.
"""

from __future__ import annotations

from pathlib import Path

PARSED_FILE = Path(__file__).resolve().parent / "_spec_parsed.py"
SCHEMA = 2

_store: dict[str, tuple[str, object]] | None = None  # file name -> (stored text, function giving its parse)
_stored_prototypes: dict = {}  # the store's PROTOTYPES as read: an entry is checked when it is asked for
_stored_spec: tuple = ()  # the store's SPEC: (the files' names, a function giving load_spec's rows)


class TomlError(ValueError):
    """Text that is not valid TOML; the message is tomllib's (line and column)."""


def _load_store() -> dict[str, tuple[str, object]]:
    global _store, _stored_prototypes, _stored_spec
    if _store is None:
        _store = {}
        try:
            from toolchain import _spec_parsed as parsed
        except ImportError:
            return _store  # no usable store: every file is parsed by tomllib
        if getattr(parsed, "SCHEMA", None) != SCHEMA:
            return _store
        texts, data = getattr(parsed, "TEXTS", None), getattr(parsed, "DATA", None)
        if isinstance(texts, dict) and isinstance(data, dict):
            _store = {name: (text, data[name]) for name, text in texts.items()
                      if isinstance(text, str) and callable(data.get(name))}
        protos = getattr(parsed, "PROTOTYPES", None)
        if isinstance(protos, dict):
            _stored_prototypes = protos
        spec = getattr(parsed, "SPEC", None)
        if isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1]):
            _stored_spec = spec
    return _store


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
    _load_store()
    return _checked_prototype(_stored_prototypes[text]) if text in _stored_prototypes else None


def stored_spec(texts: dict[str, str]) -> tuple | None:
    """toolchain.spec.load_spec's rows (toolchain.spec.spec_rows) as codegen stored them, when `texts` (file name
    -> text) are exactly the files they were validated from; None otherwise (load_spec validates the files)."""
    store = _load_store()
    if not _stored_spec or set(texts) != set(_stored_spec[0]):
        return None
    if any(name not in store or store[name][0] != text for name, text in texts.items()):
        return None
    rows = _stored_spec[1]()
    return rows if isinstance(rows, tuple) and len(rows) == 4 else None


def parse_toml(text: str, name: str) -> dict:
    """tomllib.loads(text) for the spec file called `name`: the stored parse when the text is the stored
    one, else tomllib's. Raises TomlError for invalid TOML."""
    entry = _load_store().get(name)
    if entry is not None and entry[0] == text:
        data = entry[1]()  # type: ignore[operator]
        if isinstance(data, dict):
            return data
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(str(exc)) from None
