"""The spec's TOML files parsed ahead of time, so that a command's start-up does not import and run tomllib.

toolchain/spec/parsed.json holds, for each toolchain/spec/*.toml, its text and tomllib's parse of it (as JSON,
which holds every value the spec uses), and toolchain.spec.parse_prototype's result for each `prototype` in
them (keyed by the prototype's text, so an edited one is parsed again). `python -m toolchain.codegen --parsed-spec` writes it from the spec;
tests/unit/test_speccache.py fails when it is stale. The spec stays the one owner of the facts: `parse_toml`
returns the stored parse only for a text equal to the stored text, and tomllib's parse of anything else (an
edited spec is read as it stands, only slower). Each call returns new objects: callers may change them.
"""

from __future__ import annotations

import json
from pathlib import Path

PARSED_FILE = Path(__file__).resolve().parent / "spec" / "parsed.json"
SCHEMA = 1

_store: dict[str, tuple[str, str]] | None = None
_stored_prototypes: dict = {}  # the store's "prototypes" as read: an entry is checked when it is asked for


class TomlError(ValueError):
    """Text that is not valid TOML; the message is tomllib's (line and column)."""


def _load_store() -> dict[str, tuple[str, str]]:
    global _store, _stored_prototypes
    if _store is None:
        _store = {}
        try:
            doc = json.loads(PARSED_FILE.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return _store  # no usable store: every file is parsed by tomllib
        files = doc.get("files") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
        if isinstance(files, dict):
            _store = {name: (e["text"], e["data"]) for name, e in files.items()
                      if isinstance(e, dict) and isinstance(e.get("text"), str) and isinstance(e.get("data"), str)}
        protos = doc.get("prototypes") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
        if isinstance(protos, dict):
            _stored_prototypes = protos
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


def parse_toml(text: str, name: str) -> dict:
    """tomllib.loads(text) for the spec file called `name`: the stored parse when the text is the stored
    one, else tomllib's. Raises TomlError for invalid TOML."""
    entry = _load_store().get(name)
    if entry is not None and entry[0] == text:
        return json.loads(entry[1])
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(str(exc)) from None
