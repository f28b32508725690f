"""What the tools take from a package's contract without torch: output names, the files they are written to,
and the output tree that structured results are rebuilt from (docs/package-json.md).

The contract may come from anywhere, so nothing here trusts it: a name that is not a safe file stem, names
that clash, or a tree that does not match the outputs fall back to positions (output_0, output_1, ...).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from toolchain import pt2
from toolchain.errors import ToolchainError
from toolchain.spec import load_abi
from toolchain.spec.records import RECORDS

_LAYOUT = load_abi().package
_STEM = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
MAX_TREE_DEPTH = 64
MAX_MANIFEST = 16 << 20  # bytes of a methods.json read (program.cpp kMaxManifest: the runtime refuses more)


def read_contract(path: str | Path) -> dict[str, Any] | None:
    """The contract of the .pt2 at `path` as a JSON object, or None when it has none or it is not an object
    (the runtime's checks, not this, decide whether a package is valid)."""
    try:
        with pt2.open_package(path) as pkg:
            name = next((n for n in pkg.members if n.endswith("/" + _LAYOUT.contract_entry)), None)
            if name is None:
                return None
            doc = json.loads(pkg.read(name))
    except (OSError, ValueError, RecursionError, ToolchainError):  # UnicodeDecodeError is a ValueError
        return None
    return doc if isinstance(doc, dict) else None


def output_names(contract: dict[str, Any] | None, count: int) -> list[str]:
    """The name of each of `count` outputs: the contract's, or output_<i> where it has none that is safe."""
    outs = contract.get(RECORDS.contract.outputs) if isinstance(contract, dict) else None
    names = [o.get(RECORDS.contract_tensor.name) if isinstance(o, dict) else None for o in outs] if isinstance(outs, list) else []
    if len(names) != count or not all(isinstance(n, str) and _STEM.match(n) for n in names) or \
            len(set(names)) != count:
        return [f"output_{i}" for i in range(count)]
    return names


def output_file_stems(contract: dict[str, Any] | None, count: int) -> list[str]:
    """The stem each output's file is named by: output_<stem>.npy for results, expected_<stem>.npy for eager
    references. A name output_<x> gives <x> (so one output's files are output_0.npy and expected_0.npy); a
    dict's key paths give themselves (output_logits.npy, output_aux.0.npy)."""
    stems = [n.removeprefix("output_") or n for n in output_names(contract, count)]
    return stems if len(set(stems)) == count else [str(i) for i in range(count)]


def structure(contract: dict[str, Any] | None, leaves: list[Any]) -> Any:
    """`leaves` (the flat outputs, in order) rebuilt into the contract's output tree: dicts, tuples and lists
    as the model returned them. Without a tree that matches, a tuple of the leaves (a lone leaf alone)."""
    tree = contract.get(RECORDS.contract.output_tree) if isinstance(contract, dict) else None
    it = iter(leaves)
    k = RECORDS.contract_tree

    def build(node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth > MAX_TREE_DEPTH:
            raise ValueError
        kind = node.get(k.kind)
        if kind == "leaf":
            return next(it)
        kids = node.get(k.children)
        if not isinstance(kids, list):
            raise ValueError
        if kind == "dict":
            keys = node.get(k.keys)
            if not isinstance(keys, list) or len(keys) != len(kids) or not all(isinstance(k, str) for k in keys):
                raise ValueError
            return {k: build(c, depth + 1) for k, c in zip(keys, kids, strict=True)}
        if kind in ("tuple", "list"):
            items = [build(c, depth + 1) for c in kids]
            return items if kind == "list" else tuple(items)
        raise ValueError

    try:
        out = build(tree, 0)
    except (ValueError, RecursionError, StopIteration):  # StopIteration: fewer leaves than the tree holds
        return leaves[0] if len(leaves) == 1 else tuple(leaves)
    if next(it, None) is not None:  # leaves left over: the tree does not describe these outputs
        return leaves[0] if len(leaves) == 1 else tuple(leaves)
    return out


def method_packages(path: str | Path) -> dict[str, Path]:
    """Method name -> its .pt2 in the program at `path`, as the runtime resolves it (runtime/src/host/program.cpp):
    a directory's methods.json, else every *.pt2 in it by stem; a manifest (*.json) itself; {} for a single
    package or plugin. A manifest that can't be read gives {}: the runtime's own load reports it."""
    p = Path(path)
    manifest = p / _LAYOUT.methods_manifest if p.is_dir() else p if p.suffix == ".json" else None
    if manifest is None:
        return {}
    if manifest.is_file():
        try:
            doc = json.loads(manifest.read_bytes()[:MAX_MANIFEST])
            key = RECORDS.method
            return {str(m[key.name]): manifest.parent / str(m[key.package]) for m in doc[RECORDS.methods.methods]}
        except (OSError, ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
            return {}
    return {q.stem: q for q in sorted(p.glob("*.pt2"))} if p.is_dir() else {}


def method_package(path: str | Path, method: str) -> Path:
    """The package file of `method` in the program at `path`; `path` itself when it is one file."""
    return method_packages(path).get(method, Path(path))
