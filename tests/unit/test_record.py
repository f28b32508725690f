"""toolchain.record builds the classes dataclasses.dataclass would: same methods' behaviour, same dataclass API."""

from __future__ import annotations

import dataclasses
import importlib
import pickle

import pytest

from toolchain import record as rec


def _pair(frozen: bool):
    """The same declarations built by dataclasses and by record."""
    out = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field), (rec.record, rec.field)):
        @deco(frozen=frozen)
        class Base:
            """A base."""

            name: str
            size: int = 3

        @deco(frozen=frozen)
        class Child(Base):
            """A child with a factory, a field out of the hash and a redefined base field."""

            tags: list = fld(default_factory=list)
            meta: dict = fld(default_factory=dict, hash=False)
            size: int = 5
            note: str | None = None

        out.append((Base, Child))
    return out


@pytest.mark.parametrize("frozen", [False, True])
def test_same_behaviour_as_dataclasses(frozen):
    (dbase, dchild), (rbase, rchild) = _pair(frozen)
    for args, kw in [(("a",), {}), (("a", 7, ["x"]), {"note": "n"}), ((), {"name": "b", "meta": {"k": 1}})]:
        d, r = dchild(*args, **kw), rchild(*args, **kw)
        assert repr(d).replace(dchild.__qualname__, "C") == repr(r).replace(rchild.__qualname__, "C")
        assert dataclasses.asdict(d) == dataclasses.asdict(r) == rec.asdict(r)
        assert [f.name for f in dataclasses.fields(d)] == [f.name for f in dataclasses.fields(r)]
        assert [(f.default, f.default_factory, f.hash) for f in dataclasses.fields(d)] == \
               [(f.default, f.default_factory, f.hash) for f in dataclasses.fields(r)]
        assert r == rchild(*args, **kw) and r != rbase("a") and (r == d) is False
        r2 = dataclasses.replace(r, name="other")
        assert type(r2) is rchild and r2.name == "other" and r2.size == r.size
        assert dataclasses.is_dataclass(r) and dataclasses.is_dataclass(rchild)
        assert rchild.__match_args__ == dchild.__match_args__
        if frozen:
            assert hash(rbase("a", 1)) == hash(dbase("a", 1))
            with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
                r.name = "x"
            with pytest.raises(AttributeError, match="cannot delete field 'size'"):
                del r.size
        else:
            assert rchild.__hash__ is None and dchild.__hash__ is None
            r.name = "x"
            assert r.name == "x"
    for fn in (rchild.__init__, rchild.__repr__, rchild.__eq__):
        assert fn.__qualname__.startswith(rchild.__qualname__ + ".")
    with pytest.raises(TypeError):
        rchild()  # `name` is required, as in the dataclass
    assert dataclasses.fields(rbase)[1].default == 3
    assert rchild.size == 5 and "tags" not in rchild.__dict__


def test_defaults_not_shared_and_recursive_repr():
    @rec.record
    class Node:
        """A node that may hold itself."""

        items: list = rec.field(default_factory=list)

    a, b = Node(), Node()
    a.items.append(a)
    assert b.items == [] and repr(a) == "test_defaults_not_shared_and_recursive_repr.<locals>.Node(items=[...])"


def test_refuses_what_it_does_not_build():
    with pytest.raises(ValueError, match="mutable default"):
        @rec.record
        class Bad:
            """A mutable default."""

            x: list = []  # noqa: RUF012
    with pytest.raises(TypeError, match="ClassVar"):
        @rec.record
        class Bad2:
            """A class variable."""

            x: ClassVar[int] = 1  # noqa: F821
    with pytest.raises(TypeError, match="non-default argument"):
        @rec.record
        class Bad3:
            """A required field after a default."""

            x: int = 1
            y: int
    with pytest.raises(TypeError, match="frozen"):
        @rec.record(frozen=True)
        class Base:
            """A frozen base."""

            x: int

        @rec.record
        class Child(Base):
            """Not frozen."""

            y: int = 0


def test_toolchain_records_are_dataclasses():
    """Every record in the modules that use it: the dataclass view agrees with record's, and instances pickle."""
    from toolchain.findings import Finding

    f = Finding("r", "error", "f", "m", "fix", fix_op=("op", "arg"))
    assert pickle.loads(pickle.dumps(f)) == f
    assert dataclasses.asdict(f) == rec.asdict(f)
    for name in ("toolchain.findings", "toolchain.spec", "toolchain.elf.base", "toolchain.elf.reader",
                 "toolchain.elf.resolve", "toolchain.verify.profiles", "toolchain.verify.checks", "toolchain.isa"):
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and "__record_fields__" in obj.__dict__:
                names = [f.name for f in dataclasses.fields(obj)]
                assert names == [f.name for f in obj.__record_fields__] == list(obj.__match_args__)



def test_stored_code_is_fresh():
    """toolchain/_record_code.py holds the current text of every start-up record (else each is compiled)."""
    from toolchain import codegen

    assert codegen.RECORD_CODE.read_text(encoding="utf-8") == codegen.render_record_code(), \
        "stale: run python -m toolchain.codegen --records and commit toolchain/_record_code.py"
    from toolchain._record_code import CODE

    assert set(CODE) == {k for k, (m, _t) in rec.SOURCES.items() if m in rec.RECORD_MODULES and "<locals>" not in k}


def test_stored_code_used_only_for_its_text(monkeypatch):
    """A stored entry is used only when its text is the class's: a stale one is ignored (the class compiled)."""
    from toolchain._record_code import CODE
    from toolchain.elf.base import Segment

    assert Segment.__init__.__code__.co_filename.endswith("_record_code.py")  # the start-up records use it

    def make():
        @rec.record(frozen=True)
        class Pt:
            """Two fields."""

            x: int
            y: int = 2

        return Pt

    key = f"{__name__}.test_stored_code_used_only_for_its_text.<locals>.make.<locals>.Pt"
    monkeypatch.setattr(rec, "_stored", {key: CODE["toolchain.elf.base.Segment"]})  # another class's methods
    pt = make()
    assert pt.__init__.__code__.co_filename == "<string>"
    assert repr(pt(1)) == "test_stored_code_used_only_for_its_text.<locals>.make.<locals>.Pt(x=1, y=2)"
    text = rec.SOURCES[key][1]
    ns: dict = {}
    exec("def stored():\n" + "".join(f"    {line}\n" for line in text.splitlines()), {}, ns)  # noqa: S102
    monkeypatch.setattr(rec, "_stored", {key: (ns["stored"], text)})
    pt = make()
    assert pt.__init__.__code__ in ns["stored"].__code__.co_consts  # the stored code, with this class's defaults
    assert repr(pt(1)) == repr(pt(1, 2)) and pt(1) == pt(1, 2) and hash(pt(1)) == hash((1, 2))
    with pytest.raises(AttributeError, match="cannot assign"):
        pt(1).x = 3


def test_frozen_field_behind_a_data_descriptor_is_set_as_dataclasses_sets_it():
    """A frozen record fills its fields' __dict__ entries directly, unless a data descriptor of the class
    intercepts the name: then object.__setattr__, as dataclasses does (here: a property with no setter)."""
    class Base:
        @property
        def x(self):
            return 1

    for deco in (dataclasses.dataclass(frozen=True), rec.record(frozen=True)):
        @deco
        class Pt(Base):
            """A field a property of the base intercepts."""

            x: int

        with pytest.raises(AttributeError):
            Pt(2)
    assert rec.record(frozen=True)(type("Plain", (), {"__annotations__": {"x": "int"}, "__doc__": "d"}))(3).x == 3
