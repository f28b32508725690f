"""What verify checks in a `.pt2` beyond its plugin's ELF: the members the runtime reads, read as the
runtime reads them (runtime/src/host/method.cpp, host/contract.cpp, host/weights.cpp, base/json.cpp).

The rules for the contract and constants JSON are written down once, in docs/package-json.md; the C++
parsers and this module apply them, and tests/integration/test_verify_package.py feeds the same crafted
documents to both and requires the same accept/refuse decision.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from toolchain import symdims
from toolchain.pt2 import Package, PackageError
from toolchain.spec import load_abi
from toolchain.spec.records import RECORDS

_ABI = load_abi()  # member names, schema versions and dtypes: toolchain/spec/abi.toml
CONTRACT_ENTRY = _ABI.package.contract_entry
CONSTANTS_ENTRY = _ABI.package.constants_entry
TARGET_ENTRY = _ABI.package.target_entry
PLUGIN_DIR = _ABI.package.plugin_dir
MAX_INT = 1 << 62  # largest size, bound, stride, offset or data_size accepted (contract.h kMaxContractInt)
MAX_RANK = 64  # contract.h kMaxContractRank
MAX_SYMBOLS = 4096  # contract.cpp kMaxSymbols
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_DEPTH = 64  # json.h Json::kMaxDepth: nested arrays/objects

# The records' keys (toolchain/spec/records.toml), as the runtime reads them and its messages name them.
_CON, _SYM, _TEN, _DIM = RECORDS.contract, RECORDS.contract_symbol, RECORDS.contract_tensor, RECORDS.contract_dim
_LAYOUTS, _CONST = RECORDS.constants, RECORDS.constant
_TGT, _CPU, _CUDA = RECORDS.target, RECORDS.target_cpu, RECORDS.target_cuda

# contract.cpp dtype_from_name -> (code, item size); "torch." prefixes are dropped first.
DTYPES: dict[str, tuple[int, int]] = {n: (d.code, d.itemsize) for n, d in _ABI.dtype_names().items()}


class PackageJsonError(ValueError):
    """A contract or constants entry the runtime refuses; the message names the member and the field."""


@dataclass(frozen=True)
class Member:
    """One member of a package: its name, size and how to read it."""

    name: str
    size: int
    read: Callable[[], bytes]


def package_members(pkg: Package) -> list[Member]:
    """The open package's members in central-directory order, each read (CRC-checked) through the strict
    reader the runtime's rules are written in (toolchain.pt2)."""
    return [Member(m.name, m.size, partial(pkg.read, m.name)) for m in pkg.members.values()]


READ_ERRORS = (PackageError, OSError)


# -- strict JSON (json.h) ------------------------------------------------------------------------------

def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON number"
    raise PackageJsonError(msg)


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        msg = f"number {text} is out of range"
        raise PackageJsonError(msg)
    return v


def _int(text: str) -> int:
    if not math.isfinite(float(text)):  # json.cpp reads every number as a double first
        msg = f"number {text} is out of range"
        raise PackageJsonError(msg)
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            msg = f"duplicate key {k!r}"
            raise PackageJsonError(msg)
        out[k] = v
    return out


def _depth(doc: Any) -> int:
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(data: bytes, what: str) -> Any:
    """json.h's subset: UTF-8, RFC 8259 numbers that are finite as doubles, no NaN/Infinity, no duplicate
    keys, at most MAX_DEPTH nested arrays/objects."""
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_int,
                         object_pairs_hook=_unique_keys)
    except PackageJsonError as exc:
        msg = f"{what}: invalid JSON: {exc}"
        raise PackageJsonError(msg) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        msg = f"{what}: invalid JSON: {exc}"
        raise PackageJsonError(msg) from None
    if _depth(doc) > MAX_DEPTH:
        msg = f"{what}: invalid JSON: nested more than {MAX_DEPTH} deep"
        raise PackageJsonError(msg)
    return doc


# -- the contract (contract.cpp) -----------------------------------------------------------------------

def _list(v: Any, what: str, *, missing: bool = False, limit: int | None = None, items: str = "entries") -> list:
    """`v` when it is a list of at most `limit` entries; PackageJsonError in the runtime's words otherwise
    (`missing`: the field is required, so a missing one is named so)."""
    if not isinstance(v, list):
        msg = f"{what} is {'missing or ' if missing else ''}not a list"
        raise PackageJsonError(msg)
    if limit is not None and len(v) > limit:
        msg = (f"{what} has {len(v)} dimensions, more than {limit}" if items == "dimensions"
               else f"{what} has more than {limit} {items}")
        raise PackageJsonError(msg)
    return v


def _bounded(v: Any, what: str) -> int:
    if type(v) is not int or not 0 <= v <= MAX_INT:
        msg = f"{what} is not an integer in [0, 2^62]"
        raise PackageJsonError(msg)
    return v


def _symbols(lst: Any, what: str) -> set[str]:
    if lst is None:
        return set()
    _list(lst, what, limit=MAX_SYMBOLS)
    names: set[str] = set()
    for i, s in enumerate(lst):
        w = f"{what}[{i}]"
        name = s.get(_SYM.name) if isinstance(s, dict) else None
        if not isinstance(name, str) or not name or len(name) > 128:
            msg = f"{w} is not an object with a name"
            raise PackageJsonError(msg)
        if not _SYMBOL.match(name):
            msg = f"{w}.{_SYM.name} \"{name[:80]}\" is not a symbol name (a letter or _, then letters, digits, _)"
            raise PackageJsonError(msg)
        if name in names:
            msg = f"{w}.{_SYM.name} {name} is given twice"
            raise PackageJsonError(msg)
        names.add(name)
        _range(s, _SYM, w)
    return names


def _expr(text: Any, what: str, symbols: set[str]) -> None:
    if not isinstance(text, str):
        msg = f"{what} is not a string"
        raise PackageJsonError(msg)
    try:
        node = symdims.parse(text)
    except ValueError as exc:
        msg = f"{what}: {exc}"
        raise PackageJsonError(msg) from None
    unknown = sorted(symdims.symbols(node) - symbols)
    if unknown:
        msg = f"{what}: size expression \"{text[:80]}\" names {unknown[0]}, which is not in the contract's symbols"
        raise PackageJsonError(msg)


def _tensors(lst: Any, what: str, symbols: set[str] = frozenset()) -> int:
    for i, t in enumerate(_list(lst, what, missing=True)):
        w = f"{what}[{i}]"
        if not isinstance(t, dict):
            msg = f"{w} is not an object"
            raise PackageJsonError(msg)
        if _TEN.name in t and not isinstance(t[_TEN.name], str):
            msg = f"{w}.{_TEN.name} is not a string"
            raise PackageJsonError(msg)
        dt = t.get(_TEN.dtype)
        if not isinstance(dt, str) or dt.removeprefix("torch.") not in DTYPES:
            msg = f"{w}.{_TEN.dtype} is missing or not a known dtype name"
            raise PackageJsonError(msg)
        shape = _list(t.get(_TEN.shape), f"{w}.{_TEN.shape}", missing=True, limit=MAX_RANK, items="dimensions")
        for d, dim in enumerate(shape):
            wd = f"{w}.{_TEN.shape}[{d}]"
            if isinstance(dim, dict):
                _range(dim, _DIM, wd)
                if _DIM.expr in dim:
                    _expr(dim[_DIM.expr], f"{wd}.{_DIM.expr}", symbols)
            else:
                _bounded(dim, wd)
        if _TEN.strides in t:
            _strides(t[_TEN.strides], f"{w}.{_TEN.strides}", len(shape))
    return len(lst)


def _range(obj: dict[str, Any], keys: Any, what: str) -> tuple[int, int]:
    """A symbol's or a dynamic dimension's optional `min`/`max` (0 and unbounded), `min <= max`."""
    lo = _bounded(obj[keys.min], f"{what}.{keys.min}") if keys.min in obj else 0
    hi = _bounded(obj[keys.max], f"{what}.{keys.max}") if keys.max in obj else (1 << 63) - 1
    if lo > hi:
        msg = f"{what} has {keys.min} {lo} > {keys.max} {hi}"
        raise PackageJsonError(msg)
    return lo, hi


def _strides(st: Any, what: str, rank: int) -> None:
    _list(st, what)
    if len(st) != rank:
        msg = f"{what} has {len(st)} entries, the shape {rank}"
        raise PackageJsonError(msg)
    for d, s in enumerate(st):
        _bounded(s, f"{what}[{d}]")


def check_contract(data: bytes, where: str) -> tuple[int, int]:
    """(inputs, outputs) of a valid contract; PackageJsonError naming the field otherwise."""
    doc = parse_json(data, where)
    if not isinstance(doc, dict):
        msg = f"{where}: the contract is not a JSON object"
        raise PackageJsonError(msg)
    schema = _ABI.package.contract_schema
    key = _CON.schema
    if key in doc and not (type(doc[key]) is int and 1 <= doc[key] <= schema):
        msg = f"{where}: {key} is not 1..{schema} (written by a newer aoti-toolchain?)"
        raise PackageJsonError(msg)
    symbols = _symbols(doc.get(_CON.symbols), f"{where}: {_CON.symbols}")
    return (_tensors(doc.get(_CON.inputs), f"{where}: {_CON.inputs}", symbols),
            _tensors(doc.get(_CON.outputs), f"{where}: {_CON.outputs}", symbols))


# -- constant layouts (weights.cpp parse_constant_layouts) -----------------------------------------------

def storage_nbytes(sizes: list[int], strides: list[int], itemsize: int, offset: int) -> int:
    if any(s == 0 for s in sizes):
        return 0
    return itemsize * (offset + 1 + sum(st * (sz - 1) for sz, st in zip(sizes, strides, strict=True)))


def _int_list(v: Any, what: str) -> list[int]:
    _list(v, what, missing=True, limit=MAX_RANK)
    if any(type(x) is not int or not 0 <= x <= MAX_INT for x in v):
        msg = f"{what} has an entry that is not an integer in [0, 2^62]"
        raise PackageJsonError(msg)
    return v


def check_constant_layouts(data: bytes, where: str, blob_size: int) -> int:
    """The number of constant layouts of a valid entry; PackageJsonError naming the field otherwise."""
    doc = parse_json(data, where)
    if not isinstance(doc, dict):
        msg = f"{where}: the constant layouts are not a JSON object"
        raise PackageJsonError(msg)
    schema = _ABI.package.constants_schema
    if not (type(doc.get(_LAYOUTS.schema)) is int and doc[_LAYOUTS.schema] == schema):
        msg = f"{where}: {_LAYOUTS.schema} is missing or not {schema} (written by a newer aoti-toolchain?)"
        raise PackageJsonError(msg)
    lst = _list(doc.get(_LAYOUTS.constants), f"{where}: {_LAYOUTS.constants}", missing=True)
    total = 0
    for i, c in enumerate(lst):
        total += _constant_layout(c, f"{where}: {_LAYOUTS.constants}[{i}]")
        if total > blob_size:
            msg = f"{where}: {_LAYOUTS.constants}[{i}] ends beyond the weights blob ({blob_size} bytes)"
            raise PackageJsonError(msg)
    return len(lst)


def _constant_layout(c: Any, w: str) -> int:
    """One constant's layout checked (weights.cpp); its data_size."""
    if not isinstance(c, dict):
        msg = f"{w} is not an object"
        raise PackageJsonError(msg)
    if not isinstance(c.get(_CONST.name), str) or not c[_CONST.name]:
        msg = f"{w}.{_CONST.name} is missing or not a non-empty string"
        raise PackageJsonError(msg)
    sizes = _int_list(c.get(_CONST.shape), f"{w}.{_CONST.shape}")
    strides = _int_list(c.get(_CONST.stride), f"{w}.{_CONST.stride}")
    if len(sizes) != len(strides):
        msg = f"{w}: {_CONST.shape} and {_CONST.stride} differ in rank"
        raise PackageJsonError(msg)
    for key in (_CONST.offset, _CONST.data_size):
        if type(c.get(key)) is not int or not 0 <= c[key] <= MAX_INT:
            msg = f"{w}.{key} is missing or not an integer in [0, 2^62]"
            raise PackageJsonError(msg)
    if _CONST.device in c and not isinstance(c[_CONST.device], str):
        msg = f"{w}.{_CONST.device} is not a string"
        raise PackageJsonError(msg)
    itemsize = 1
    if _CONST.dtype in c:
        if not isinstance(c[_CONST.dtype], str):
            msg = f"{w}.{_CONST.dtype} is not a string"
            raise PackageJsonError(msg)
        itemsize = DTYPES.get(c[_CONST.dtype].removeprefix("torch."), (0, 1))[1]
    offset, data_size = c[_CONST.offset], c[_CONST.data_size]
    if storage_nbytes(sizes, strides, itemsize, offset) > data_size:
        msg = (f"{w}: {_CONST.shape} {sizes}, {_CONST.stride} {strides} and {_CONST.offset} {offset} span more "
               f"than its {_CONST.data_size} of {data_size} bytes")
        raise PackageJsonError(msg)
    return data_size


# -- the package as the runtime reads it ----------------------------------------------------------------

@dataclass
class PackageFinding:
    """A finding on a package entry (bad-package-json, bad-package)."""

    rule: str  # bad-package-json | bad-package
    message: str
    fix_variant: str | None = None  # the rule's fix (toolchain/spec/rules.toml) to give


# -- the target record (preflight.cpp parse_target) ------------------------------------------------------

_MAX_LISTED = 256
_CUDA_VERSION = re.compile(r"^[1-9][0-9]?\.[0-9]$")


def check_target(data: bytes, where: str) -> None:
    """The target record as the runtime's preflight reads it; PackageJsonError naming the field otherwise."""
    doc = parse_json(data, where)
    if not isinstance(doc, dict):
        raise PackageJsonError(f"{where}: not a JSON object")
    if not (type(doc.get(_TGT.schema)) is int and doc[_TGT.schema] == _ABI.package.target_schema):
        raise PackageJsonError(f"{where}: {_TGT.schema} is not {_ABI.package.target_schema}")
    cpu, cuda = doc.get(_TGT.cpu), doc.get(_TGT.cuda)
    if cpu is not None:
        _target_cpu(cpu, f"{where}: {_TGT.cpu}")
    if cuda is not None:
        _target_cuda(cuda, f"{where}: {_TGT.cuda}")


def _target_cpu(cpu: Any, w: str) -> None:
    if not isinstance(cpu, dict):
        raise PackageJsonError(f"{w} is not an object")
    for key in (_CPU.isa, _CPU.requested):
        if cpu.get(key) is not None and not isinstance(cpu[key], str):
            raise PackageJsonError(f"{w}.{key} is not a string")
    exts = cpu.get(_CPU.extensions, [])
    if not isinstance(exts, list) or len(exts) > _MAX_LISTED:
        raise PackageJsonError(f"{w}.{_CPU.extensions} is not a list of at most {_MAX_LISTED} names")
    if any(not isinstance(e, str) or not 0 < len(e) <= 64 for e in exts):
        raise PackageJsonError(f"{w}.{_CPU.extensions} holds a non-name")


def _target_cuda(cuda: Any, w: str) -> None:
    if not isinstance(cuda, dict):
        raise PackageJsonError(f"{w} is not an object")
    for key in (_CUDA.sass, _CUDA.ptx):
        lst = cuda.get(key, [])
        if not isinstance(lst, list) or len(lst) > _MAX_LISTED:
            raise PackageJsonError(f"{w}.{key} is not a list of architectures")
        if any(type(a) is not int or not 10 <= a <= 999 for a in lst):
            raise PackageJsonError(f"{w}.{key} holds a non-architecture")
    for key in (_CUDA.cuda, _CUDA.min_driver):
        if cuda.get(key) is not None and not isinstance(cuda[key], str):
            raise PackageJsonError(f"{w}.{key} is not a string")
    version = cuda.get(_CUDA.cuda)
    if version and not _CUDA_VERSION.match(version):
        raise PackageJsonError(f"{w}.{_CUDA.cuda} \"{version}\" is not a CUDA version (13.0)")
    if len(cuda.get(_CUDA.min_driver) or "") > 32:
        raise PackageJsonError(f"{w}.{_CUDA.min_driver} is not a driver version")


def check_package(path: Path, members: list[Member]) -> list[PackageFinding]:
    """The runtime's view of a package (program.cpp Program::load): one plugin under data/aotinductor/, its
    contract and (when a weights blob is there) its constant layouts, each valid."""
    out: list[PackageFinding] = []
    plugins = [m for m in members if PLUGIN_DIR in m.name and m.name.endswith(".so")]
    blobs = [m for m in members if PLUGIN_DIR in m.name and m.name.endswith("_weights.blob")]
    if not plugins:
        out.append(PackageFinding("bad-package", f"{path}: holds no plugin (no <model>/data/aotinductor/*.so); the "
                                  "runtime refuses it"))
        return out
    if len(plugins) > 1:
        out.append(PackageFinding("bad-package", f"{path}: holds {len(plugins)} plugins; the runtime loads one "
                                  "plugin per package", "several-plugins"))
        return out
    prefix = plugins[0].name[:plugins[0].name.find("/") + 1]
    by_name = {m.name: m for m in members}
    checks: list[tuple[str, Callable[[bytes, str], Any]]] = [(CONTRACT_ENTRY, check_contract), (TARGET_ENTRY, check_target)]
    if blobs:
        checks.insert(1, (CONSTANTS_ENTRY, partial(check_constant_layouts, blob_size=blobs[-1].size)))
    for entry, check in checks:
        member = by_name.get(prefix + entry)
        if member is None:
            continue
        try:
            check(member.read(), f"{path}:{member.name}")
        except PackageJsonError as exc:
            out.append(PackageFinding("bad-package-json", str(exc)))
    return out
