"""The spec's TOML parsed ahead of time (toolchain/_spec_parsed/, toolchain.speccache): current with the
spec, equal to tomllib's parse, and never used for a text that is not the stored one."""

from __future__ import annotations

import pytest
import tomllib

from toolchain import codegen, speccache
from toolchain.spec import SPEC_DIR


def test_parsed_spec_is_generated_from_the_spec():
    fresh = codegen.render_parsed_spec()
    have = {p.name: p.read_text(encoding="utf-8") for p in speccache.PARSED_DIR.glob("*.py")}
    assert have == fresh, "stale: run python -m toolchain.codegen --parsed-spec and commit toolchain/_spec_parsed/"
    from toolchain import _spec_parsed

    assert set(_spec_parsed.MODULES) == {p.name for p in SPEC_DIR.glob("*.toml")}


@pytest.mark.parametrize("path", sorted(SPEC_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_stored_parse_is_tomllibs(path):
    text = path.read_text(encoding="utf-8")
    got = speccache.parse_toml(text, path.name)
    assert got == tomllib.loads(text)
    # new objects each call: a caller that changes its copy changes no other caller's
    got.clear()
    assert speccache.parse_toml(text, path.name) == tomllib.loads(text)


def test_a_text_other_than_the_stored_one_is_parsed_as_it_stands():
    path = SPEC_DIR / "exit_codes.toml"
    edited = path.read_text(encoding="utf-8").replace("schema = 1", "schema = 7", 1)
    assert speccache.parse_toml(edited, path.name)["schema"] == 7
    with pytest.raises(speccache.TomlError, match=r"line \d+"):
        speccache.parse_toml(edited + "\n[[code]\n", path.name)
    # a file of another name with the same text gets the same (correct) parse
    assert speccache.parse_toml(path.read_text(encoding="utf-8"), "other.toml") == \
        tomllib.loads(path.read_text(encoding="utf-8"))


def test_an_edited_spec_file_is_read_as_it_stands(tmp_path):
    from toolchain.errors import SpecError
    from toolchain.spec import load_spec

    for p in SPEC_DIR.glob("*.toml"):
        (tmp_path / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    shims = tmp_path / "shims.toml"
    shims.write_text(shims.read_text(encoding="utf-8") + "\nnot toml [\n", encoding="utf-8")
    with pytest.raises(SpecError, match="invalid TOML"):
        load_spec(tmp_path)


def test_stored_prototypes_are_the_parsers():
    """Every prototype of the spec comes stored, equal to what the parser gives; other text is parsed."""
    from toolchain._spec_parsed import prototypes
    from toolchain.spec import Function, Param, load_spec, parse_prototype, parse_prototype_text

    spec = load_spec()
    functions = [*spec.entry_points, *spec.shims]
    for fn in functions:
        text = next(t for t, p in prototypes.PROTOTYPES.items() if p[0] == fn.name)
        assert speccache.stored_prototype(text) is not None
        assert parse_prototype(text) == parse_prototype_text(text)
        assert (fn.name, fn.returns, fn.params, fn.prototype) == tuple(vars(parse_prototype(text)).values())
    assert speccache.stored_prototype("int f(int x)") is None
    assert parse_prototype("int f(int x)") == Function("f", "int", (Param("int", "x"),), "int f(int x)")
    with pytest.raises(ValueError, match="cannot parse"):
        parse_prototype("not a prototype")


def test_stored_spec_is_load_specs_and_only_for_the_stored_texts(tmp_path):
    """load_spec builds the spec from codegen's stored rows only where all three files' texts are the stored
    ones; the result equals the validated one. A file edited into an invalid spec (a duplicate shim, valid
    TOML) is validated and refused, not served from the store."""
    from toolchain.errors import SpecError
    from toolchain.spec import load_spec, spec_files

    for p in SPEC_DIR.glob("*.toml"):
        (tmp_path / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    texts = {p.name: p.read_text(encoding="utf-8") for p in spec_files()}
    assert speccache.stored_spec(texts) is not None
    assert load_spec() == load_spec(stored=False)
    copied = load_spec(tmp_path)
    assert copied.sources == spec_files(tmp_path)
    assert copied.shims == load_spec(stored=False).shims
    shims = tmp_path / "shims.toml"
    text = shims.read_text(encoding="utf-8")
    first = text.index("[[shim]]")
    block = text[first:text.index("[[shim]]", first + 1)]
    shims.write_text(text + "\n" + block, encoding="utf-8")
    assert speccache.stored_spec({**texts, "shims.toml": shims.read_text(encoding="utf-8")}) is None
    with pytest.raises(SpecError, match="duplicate name"):
        load_spec(tmp_path)
