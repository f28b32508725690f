"""`record`: the dataclasses the CLI's start-up path needs, built with one `exec` per class.

Python 3.11's `dataclasses.dataclass` compiles every generated method with its own `exec` and its module imports
`inspect` (with `ast`, `dis`, `tokenize`): about 35 ms of `aoti-toolchain verify`'s start for its 36 classes.
`record` generates the same `__init__`, `__repr__`, `__eq__`, `__hash__` and, for frozen classes, the same
`__setattr__`/`__delattr__` guard, in one `exec`, and imports nothing. A class it builds stays a dataclass to the
`dataclasses` module: `__dataclass_fields__` and `__dataclass_params__` are computed on first access (by
`dataclasses.fields`, `replace`, `asdict`, `is_dataclass`) from the same declarations through the real
`dataclasses.dataclass`, so the API and its checks are the standard ones. mypy sees `dataclasses.dataclass`
itself (below), so typing is checked against the real thing.

The generated methods of the classes in RECORD_MODULES are also compiled ahead of time, into
toolchain/_record_code.py (`python -m toolchain.codegen --records`; a test fails when it is stale), so that the
bytecode cache holds them: a class whose generated text equals the stored text takes the stored code objects (with
its own globals and defaults), any other is compiled here. Compiling ~4 KB of methods takes ~1 ms a class.

Supported: `@record` / `@record(frozen=True)` with `field(default=..., default_factory=..., hash=...)`, and
inheritance from other records (fields of bases first, as in dataclasses). Anything else a dataclass can declare
(ClassVar, InitVar, KW_ONLY, order, slots) is refused with a TypeError rather than built differently.
"""

from __future__ import annotations

TYPE_CHECKING = False

# the modules whose records toolchain/_record_code.py holds compiled (the ones the CLI's start-up imports)
RECORD_MODULES = ("toolchain.cuda_bin", "toolchain.distpack", "toolchain.elf.base", "toolchain.elf.config_records",
                  "toolchain.elf.reader", "toolchain.elf.resolve", "toolchain.errors", "toolchain.findings",
                  "toolchain.isa", "toolchain.spec", "toolchain.spec.cpu_isa", "toolchain.verify.checks",
                  "toolchain.verify.package", "toolchain.verify.profiles")
SOURCES: dict[str, tuple[str, str]] = {}  # "module.qualname" -> (module, text of its generated methods): codegen

if TYPE_CHECKING:
    from dataclasses import asdict as asdict
    from dataclasses import dataclass as record
    from dataclasses import field as field
else:
    _MISSING = object()

    class FrozenInstanceError(AttributeError):
        """Assignment to a field of a frozen record (the same message as dataclasses')."""

    class _Field:
        __slots__ = ("default", "default_factory", "hash", "name")

        def __init__(self, default, default_factory, hash) -> None:  # noqa: A002 - dataclasses' keyword
            self.default, self.default_factory, self.hash, self.name = default, default_factory, hash, ""

    def field(*, default=_MISSING, default_factory=_MISSING, hash=None):  # noqa: A002
        """A field with a default, a default factory, or left out of the hash (`hash=False`)."""
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        return _Field(default, default_factory, hash)

    class _LazyDataclassAttr:
        """`__dataclass_fields__`/`__dataclass_params__` of a record, made by dataclasses on first access."""

        def __init__(self, attr: str) -> None:
            self.attr = attr

        def __get__(self, obj, cls):
            shadow = _shadow(cls)
            for name in ("__dataclass_fields__", "__dataclass_params__"):
                setattr(cls, name, shadow.__dict__[name])
            return cls.__dict__[self.attr]

    def _shadow(cls):
        """A plain dataclass with `cls`'s fields, defaults and parameters, whose dataclass metadata `cls` takes."""
        import dataclasses

        ns: dict = {"__annotations__": {}}
        for f in cls.__record_fields__:
            ns["__annotations__"][f.name] = cls.__record_types__[f.name]
            kw = {}
            if f.default is not _MISSING:
                kw["default"] = f.default
            if f.default_factory is not _MISSING:
                kw["default_factory"] = f.default_factory
            if f.hash is not None:
                kw["hash"] = f.hash
            if kw:
                ns[f.name] = dataclasses.field(**kw)
        shadow = type(cls.__name__, (), ns)
        shadow.__qualname__, shadow.__module__ = cls.__qualname__, cls.__module__
        return dataclasses.dataclass(frozen=cls.__record_frozen__)(shadow)

    def _check_annotation(cls, name: str, ann) -> None:
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
        if "Var" not in text and "KW_ONLY" not in text:
            return
        for word in ("ClassVar", "InitVar", "KW_ONLY"):
            if word in text.replace(" ", "").split("[")[0]:
                raise TypeError(f"{cls.__qualname__}.{name}: record does not support {word} (use dataclasses)")

    def _build(cls, frozen: bool):
        own = cls.__dict__.get("__annotations__", {})
        fields: dict[str, _Field] = {}
        types: dict[str, object] = {}
        base_frozen = None
        for base in reversed(cls.__mro__[1:]):
            if "__record_fields__" in base.__dict__:
                for f in base.__record_fields__:
                    fields[f.name] = f
                types.update(base.__record_types__)
                base_frozen = base.__record_frozen__
            elif "__dataclass_fields__" in base.__dict__:
                raise TypeError(f"{cls.__qualname__}: record cannot inherit from the dataclass {base.__qualname__}")
        if base_frozen is not None and base_frozen != frozen:
            raise TypeError(f"{cls.__qualname__}: cannot inherit {'non-' if frozen else ''}frozen record from a "
                            f"{'' if frozen else 'non-'}frozen one")
        for name, ann in own.items():
            _check_annotation(cls, name, ann)
            value = cls.__dict__.get(name, _MISSING)
            if isinstance(value, _Field):
                f = value
                if f.default is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
            else:
                f = _Field(value, _MISSING, None)
            f.name = name
            if name.startswith("__record"):
                raise TypeError(f"{cls.__qualname__}.{name}: names starting with __record are record's own")
            if f.default is not _MISSING and type(f.default).__hash__ is None:
                raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use "
                                 "default_factory")
            fields[name] = f  # a redefined base field keeps its place, as in dataclasses
            types[name] = ann
        flds = list(fields.values())
        seen_default = False
        for f in flds:
            if f.default is not _MISSING or f.default_factory is not _MISSING:
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        return flds, types

    def _source(cls, flds, frozen: bool, set_hash: bool) -> tuple[str, dict]:
        """The text of the generated methods, and the globals they read (defaults, factories, the class)."""
        env: dict = {"__record_cls": cls, "__record_missing": _MISSING, "__record_frozen_error": FrozenInstanceError,
                     "__record_object": object}
        params, body = [], []
        # A frozen record's fields go straight into the instance's __dict__ (what object.__setattr__ does for
        # a name no class attribute of the MRO intercepts, at a third of the cost: verify makes thousands of
        # Symbols); where one does (a property, a slot), through object.__setattr__ as dataclasses does.
        in_dict = frozen and not any(hasattr(type(getattr(cls, f.name, None)), "__set__") for f in flds)
        for f in flds:
            n = f.name
            if f.default_factory is not _MISSING:
                env[f"__record_factory_{n}"] = f.default_factory
                params.append(f"{n}=__record_missing")
                value = f"__record_factory_{n}() if {n} is __record_missing else {n}"
            elif f.default is not _MISSING:
                env[f"__record_default_{n}"] = f.default
                params.append(f"{n}=__record_default_{n}")
                value = n
            else:
                params.append(n)
                value = n
            body.append(f"__record_dict[{n!r}] = {value}" if in_dict else
                        f"__record_object.__setattr__(self, {n!r}, {value})" if frozen else f"self.{n} = {value}")
        lines = [f"def __init__(self, {', '.join(params)}):" if params else "def __init__(self):"]
        if in_dict and body:
            lines.append("    __record_dict = self.__dict__")
        lines += [f"    {b}" for b in body] or ["    pass"]
        fields_repr = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in flds)
        lines += ["def __repr__(self):",
                  f"    return f'{{self.__class__.__qualname__}}({fields_repr})'"]
        mine = "".join(f"self.{f.name}," for f in flds)
        theirs = "".join(f"other.{f.name}," for f in flds)
        lines += ["def __eq__(self, other):",
                  "    if other.__class__ is self.__class__:",
                  f"        return ({mine}) == ({theirs})",
                  "    return NotImplemented"]
        if set_hash:
            hashed = "".join(f"self.{f.name}," for f in flds if f.hash is None or f.hash)
            lines += ["def __hash__(self):", f"    return hash(({hashed}))"]
        if frozen:
            names = tuple(f.name for f in flds)
            lines += ["def __setattr__(self, name, value):",
                      f"    if type(self) is __record_cls or name in {names!r}:",
                      "        raise __record_frozen_error(f'cannot assign to field {name!r}')",
                      "    super(__record_cls, self).__setattr__(name, value)",
                      "def __delattr__(self, name):",
                      f"    if type(self) is __record_cls or name in {names!r}:",
                      "        raise __record_frozen_error(f'cannot delete field {name!r}')",
                      "    super(__record_cls, self).__delattr__(name)"]
        return "\n".join(lines) + "\n", env

    _stored: dict | None = None

    def _stored_code(key: str) -> tuple | None:
        """(function whose nested code objects are the methods, their text) from toolchain/_record_code.py."""
        global _stored
        if _stored is None:
            try:
                from toolchain._record_code import CODE
            except ImportError:
                CODE = {}  # noqa: N806 - the generated module's name
            _stored = CODE if isinstance(CODE, dict) else {}
        return _stored.get(key)

    def _methods(cls, flds, text: str, env: dict) -> dict:
        """The generated methods: the stored code objects when their text is `text`, else compiled here."""
        key = f"{cls.__module__}.{cls.__qualname__}"
        SOURCES[key] = (cls.__module__, text)
        stored = _stored_code(key)
        ns: dict = {}
        if stored is not None and stored[1] == text:
            defaults = tuple(f.default if f.default_factory is _MISSING else _MISSING for f in flds
                             if f.default is not _MISSING or f.default_factory is not _MISSING) or None
            code_type, fn_type = type(_methods.__code__), type(_methods)
            for code in stored[0].__code__.co_consts:
                if isinstance(code, code_type):
                    ns[code.co_name] = fn_type(code, env, code.co_name, defaults if code.co_name == "__init__" else None)
        else:
            exec(text, env, ns)  # noqa: S102 - the text is built above from the class's own field names
        return ns

    def _process(cls, frozen: bool):
        import reprlib

        flds, types = _build(cls, frozen)
        own = cls.__dict__
        if frozen and ("__setattr__" in own or "__delattr__" in own):
            raise TypeError(f"Cannot overwrite attribute __setattr__ in class {cls.__name__}")
        # dataclasses' rule for eq=True: frozen -> a field hash; not frozen -> unhashable; unless the class body
        # defines __hash__ itself
        class_hash = own.get("__hash__", _MISSING)
        explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
        text, env = _source(cls, flds, frozen, frozen and not explicit_hash)
        ns = _methods(cls, flds, text, env)
        ns["__repr__"] = reprlib.recursive_repr()(ns["__repr__"])
        for name, fn in ns.items():
            fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
            if name in ("__setattr__", "__delattr__", "__hash__") or name not in own:
                setattr(cls, name, fn)
        if not frozen and not explicit_hash:
            cls.__hash__ = None
        cls.__record_fields__ = tuple(flds)
        cls.__record_types__ = types
        cls.__record_frozen__ = frozen
        cls.__dataclass_fields__ = _LazyDataclassAttr("__dataclass_fields__")
        cls.__dataclass_params__ = _LazyDataclassAttr("__dataclass_params__")
        if "__match_args__" not in own:
            cls.__match_args__ = tuple(f.name for f in flds)
        return cls

    def record(cls=None, /, *, frozen: bool = False):
        """`@dataclass` / `@dataclass(frozen=True)`, built with one `exec` (module docstring)."""
        if cls is None:
            return lambda c: _process(c, frozen)
        return _process(cls, frozen)

    _ATOMIC = (str, int, float, bool, bytes, type(None))

    def asdict(obj, *, dict_factory=dict):
        """`dataclasses.asdict` for records and dataclasses: fields recursively, containers copied."""
        if "__record_fields__" in type(obj).__dict__:
            return _asdict_inner(obj, dict_factory)
        import dataclasses

        return dataclasses.asdict(obj, dict_factory=dict_factory)

    def _asdict_inner(obj, dict_factory):
        if type(obj) in _ATOMIC:
            return obj
        if "__record_fields__" in type(obj).__dict__:
            return dict_factory([(f.name, _asdict_inner(getattr(obj, f.name), dict_factory))
                                 for f in type(obj).__record_fields__])
        import dataclasses

        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj, dict_factory=dict_factory)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*[_asdict_inner(v, dict_factory) for v in obj])
        if isinstance(obj, (list, tuple)):
            return type(obj)(_asdict_inner(v, dict_factory) for v in obj)
        if isinstance(obj, dict):
            return type(obj)((_asdict_inner(k, dict_factory), _asdict_inner(v, dict_factory))
                             for k, v in obj.items())
        import copy

        return copy.deepcopy(obj)
