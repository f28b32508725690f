"""The contract of an exported program (torch needed): its size symbols, inputs, outputs and output tree.

A dynamic dimension is what torch's exported program says it is: a size expression over the program's
symbols (`s77`, `s17 + s77`), never a per-input range. Inputs that share a dimension share its symbol, so
the runtime binds each symbol once per run and refuses inputs that disagree (docs/package-json.md).

Sizes and strides are read as torch prints them, never with int(): int() on a symbolic size makes torch
specialise the symbol to the example's value for every later read of the same program.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from toolchain import symdims
from toolchain.errors import ExportError
from toolchain.spec.records import RECORDS

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The contract's keys (toolchain/spec/records.toml)
_CON, _SYM, _TEN, _DIM = RECORDS.contract, RECORDS.contract_symbol, RECORDS.contract_tensor, RECORDS.contract_dim
_TREE = RECORDS.contract_tree


def _ranges(ep: Any) -> dict[str, symdims.Range]:
    out: dict[str, symdims.Range] = {}
    for sym, vr in ep.range_constraints.items():
        if not _SYMBOL.match(str(sym)):
            continue  # a derived dimension's range (`2*s27`): its expression's bounds give it
        upper = None if str(vr.upper) in ("oo", "int_oo") else int(vr.upper)
        out[str(sym)] = (max(int(vr.lower), 0), upper)
    return out


def _dim(size: Any, ranges: dict[str, symdims.Range]) -> int | dict[str, Any]:
    if isinstance(size, int):
        return size
    text = str(size)
    if text.isdigit():
        return int(text)
    try:
        node = symdims.parse(text)
    except ValueError:
        node = None
    if node is None or not symdims.symbols(node) <= set(ranges):
        return {_DIM.min: 0}  # not a size expression the runtime evaluates: unbounded, as its range is unknown
    low, high = symdims.bounds(node, ranges) or (0, None)
    return {_DIM.expr: text, _DIM.min: low, **({_DIM.max: high} if high is not None else {})}


def _example_strides(value: Any, env: dict[str, int]) -> list[int] | None:
    """The strides of `value` (a fake tensor) at the example sizes, or None when one can't be evaluated."""
    out = []
    for s in value.stride():
        if isinstance(s, int):
            out.append(s)
            continue
        try:
            out.append(symdims.evaluate(symdims.parse(str(s)), env))
        except (ValueError, KeyError, ZeroDivisionError):
            return None
    return out


def _tensor(name: str, value: Any, ranges: dict[str, symdims.Range]) -> dict[str, Any]:
    import torch

    if not isinstance(value, torch.Tensor):
        msg = f"{name}: only tensors can cross the plugin boundary, got {type(value).__name__}"
        raise ExportError(msg)
    return {_TEN.name: name, _TEN.dtype: str(value.dtype).removeprefix("torch."),
            _TEN.shape: [_dim(s, ranges) for s in value.shape]}


def output_tree(spec: Any) -> tuple[dict[str, Any], list[list[str | int]]]:
    """torch's output TreeSpec as the contract's "output_tree" ({"kind": "leaf" | "tuple" | "list" | "dict",
    "keys" for dicts, "children"}) and the path of each leaf in order. Named tuples and other registered
    containers whose context lists field names become dicts of those names; any other node a tuple."""
    paths: list[list[str | int]] = []

    def walk(s: Any, path: list[str | int]) -> dict[str, Any]:
        if s.is_leaf():
            paths.append(path)
            return {_TREE.kind: "leaf"}
        kids = list(s.children()) if callable(getattr(s, "children", None)) else list(s.children_specs)
        keys = _keys(s)
        if keys is not None and len(keys) == len(kids):
            return {_TREE.kind: "dict", _TREE.keys: keys,
                    _TREE.children: [walk(c, [*path, k]) for c, k in zip(kids, keys, strict=True)]}
        kind = "list" if s.type is list else "tuple"
        return {_TREE.kind: kind, _TREE.children: [walk(c, [*path, i]) for i, c in enumerate(kids)]}

    return walk(spec, []), paths


def _keys(spec: Any) -> list[str] | None:
    ctx = spec.context
    fields = getattr(ctx, "_fields", None)  # a namedtuple's context is its class
    if fields is not None:
        return [str(f) for f in fields]
    if isinstance(ctx, (list, tuple)) and ctx and all(isinstance(k, (str, int)) for k in ctx) and (
            spec.type is not tuple and spec.type is not list):
        return [str(k) for k in ctx]
    return None


def leaf_names(paths: Sequence[Sequence[str | int]], positional_root: bool) -> list[str]:
    """A name per output leaf: its path joined with '.', characters outside [A-Za-z0-9_.-] made '_'; under a
    positional root (one tensor, a tuple or a list) prefixed `output_` (output_0, output_1.0), under a dict
    root the keys alone (logits, aux.0). Names are unique: a clash gets `_<index>` appended."""
    names, seen = [], set()
    for i, path in enumerate(paths):
        body = ".".join(_SAFE.sub("_", str(p)) for p in path) or "0"
        name = f"output_{body}" if positional_root else body
        if name.startswith(".") or name in seen:
            name = f"{name.lstrip('.') or 'output'}_{i}"
        seen.add(name)
        names.append(name)
    return names


def contract_of(ep: Any, example_inputs: Sequence[Any], torch_version: str, schema: int) -> dict[str, Any]:
    """The contract of `ep` (schema 2, docs/package-json.md): "symbols" with their ranges, each input and
    output's dtype and shape (a dynamic dimension is {"expr", "min", "max"}), the inputs' strides, the
    outputs' names and paths and the "output_tree"."""
    import torch

    ranges = _ranges(ep)
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    env: dict[str, int] = {}  # each symbol's example value, for the outputs' example strides
    inputs = []
    for i, name in enumerate(ep.graph_signature.user_inputs):
        val = placeholders[name].meta.get("val") if name in placeholders else None
        example = example_inputs[i] if i < len(example_inputs) else None
        entry = _tensor(name, val if val is not None else example, ranges)
        if isinstance(example, torch.Tensor):
            entry[_TEN.strides] = [int(s) for s in example.stride()]
            for dim, size in zip(entry[_TEN.shape], example.shape, strict=False):
                if isinstance(dim, dict) and dim.get(_DIM.expr) in ranges:
                    env.setdefault(dim[_DIM.expr], int(size))
        inputs.append(entry)
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    n_out = len(ep.graph_signature.user_outputs)
    values = [getattr(a, "meta", {}).get("val") for a in (out_node.args[0][-n_out:] if n_out else [])]
    tree, paths = output_tree(ep.call_spec.out_spec) if ep.call_spec.out_spec is not None else (None, [])
    if tree is None or len(paths) != len(values):
        tree = {_TREE.kind: "tuple", _TREE.children: [{_TREE.kind: "leaf"}] * len(values)}
        paths = [[k] for k in range(len(values))]
    names = leaf_names(paths, tree[_TREE.kind] != "dict")
    outputs = []
    for name, path, val in zip(names, paths, values, strict=True):
        entry = _tensor(name, val, ranges)
        entry[_TEN.path] = list(path)
        strides = _example_strides(val, env)
        if strides is not None:
            entry[_TEN.strides] = strides
        outputs.append(entry)
    symbols = [{_SYM.name: s, _SYM.min: lo, **({_SYM.max: hi} if hi is not None else {})}
               for s, (lo, hi) in ranges.items()]
    return {_CON.schema: schema, _CON.producer: "aoti-toolchain", _CON.torch: torch_version, _CON.symbols: symbols,
            _CON.inputs: inputs, _CON.outputs: outputs, _CON.output_tree: tree}


_WRAPPER_BOUND = re.compile(
    r'input_handles\[(\d+)\]: dim value is too (small|large) at (\d+), "\s*<<\s*"expected (?:it )?to be (?:>=|<=) (\d+)')


def compiled_input_ranges(wrapper_cpp: str) -> dict[tuple[int, int], dict[str, int]]:
    """The size bounds the plugin's generated input check enforces, per (input, dimension): what the compiled
    code was specialised for (inductor writes them from its shape environment, cpp_wrapper_cpu.py), each as a
    dynamic dimension's range ({min, max})."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for m in _WRAPPER_BOUND.finditer(wrapper_cpp):
        key = (int(m.group(1)), int(m.group(3)))
        out.setdefault(key, {})[_DIM.min if m.group(2) == "small" else _DIM.max] = int(m.group(4))
    return out


def _set_range(dim: dict[str, Any], span: symdims.Range) -> None:
    dim[_DIM.min] = span[0]
    if span[1] is None:
        dim.pop(_DIM.max, None)
    else:
        dim[_DIM.max] = span[1]


def _input_dim(contract: dict[str, Any], i: int, d: int) -> Any:
    """Dimension `d` of input `i` of `contract` (a size or a dynamic dimension); None when it has none."""
    inputs = contract[_CON.inputs]
    return inputs[i][_TEN.shape][d] if i < len(inputs) and d < len(inputs[i][_TEN.shape]) else None


def narrow_to_compiled(contract: dict[str, Any], bounds: dict[tuple[int, int], dict[str, int]]) -> None:
    """Narrows `contract` to the sizes the compiled plugin checks (`compiled_input_ranges`): a symbol's range
    to what every input dimension bound to it accepts, then every dimension's range from its expression."""
    symbols = {s[_SYM.name]: s for s in contract[_CON.symbols]}
    for (i, d), b in bounds.items():
        dim = _input_dim(contract, i, d)
        if not isinstance(dim, dict):
            continue
        if _DIM.expr not in dim:
            target, keys = dim, _DIM
        elif dim[_DIM.expr] in symbols:
            target, keys = symbols[dim[_DIM.expr]], _SYM
        else:
            continue  # a derived dimension: its symbol is narrowed where it stands alone
        if b.get(_DIM.min, 0) > target.get(keys.min, 0):
            target[keys.min] = b[_DIM.min]
        if _DIM.max in b and b[_DIM.max] < target.get(keys.max, b[_DIM.max] + 1):
            target[keys.max] = b[_DIM.max]
    ranges = {s[_SYM.name]: (s[_SYM.min], s.get(_SYM.max)) for s in contract[_CON.symbols]}
    for entry in (*contract[_CON.inputs], *contract[_CON.outputs]):
        for dim in entry[_TEN.shape]:
            if isinstance(dim, dict) and _DIM.expr in dim:
                _set_range(dim, symdims.bounds(symdims.parse(dim[_DIM.expr]), ranges) or (0, None))


def asked_ranges(dynamic_shapes: Any, input_names: Sequence[str]) -> dict[tuple[int, int], tuple[Any, Any]]:
    """(input, dimension) -> (min, max) the caller asked for in torch.export's `dynamic_shapes` (a dict by
    input name or a sequence by position, each a dict or sequence of Dims or Dim hints); None where not given."""
    if isinstance(dynamic_shapes, dict):
        per_input = [dynamic_shapes.get(n) for n in input_names]
    elif isinstance(dynamic_shapes, (list, tuple)):
        per_input = list(dynamic_shapes)
    else:
        return {}
    out: dict[tuple[int, int], tuple[Any, Any]] = {}
    for i, spec in enumerate(per_input):
        items = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for d, dim in items:
            if dim is None or isinstance(dim, int) or not isinstance(d, int):
                continue
            low, high = getattr(dim, "min", None), getattr(dim, "max", None)
            high = None if high is None or str(high) in ("oo", "int_oo") else int(high)
            out[(i, d)] = (None if low is None else int(low), high)
    return out


def narrower_than_asked(contract: dict[str, Any], asked: dict[tuple[int, int], tuple[Any, Any]]) -> list[str]:
    """A line for each input dimension whose recorded range is narrower than the one asked for."""
    lines = []
    for (i, d), (low, high) in sorted(asked.items()):
        dim = _input_dim(contract, i, d)
        if dim is None:
            continue
        got = (dim, dim) if isinstance(dim, int) else (dim.get(_DIM.min, 0), dim.get(_DIM.max))
        if (low is not None and got[0] > low) or (high is not None and (got[1] is None or got[1] < high)):
            sym = f" (symbol {dim[_DIM.expr]})" if isinstance(dim, dict) and _DIM.expr in dim else ""
            lines.append(f"input {contract[_CON.inputs][i][_TEN.name]} dimension {d}{sym}: asked {_span(low, high)}, "
                         f"the plugin torch compiled accepts {_span(*got)}")
    return lines


def _span(low: Any, high: Any) -> str:
    return f"{0 if low is None else low}..{'' if high is None else high}"
