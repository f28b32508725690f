"""The contract of a package torch wrote itself (`torch._inductor.aoti_compile_and_package`), derived from what the
package holds: the wrapper source inductor embeds beside the plugin (`*.wrapper.cpp`).

What is read, and why it is trusted: inductor generates, for every input, a `check_input_<i>` function (its dtype,
each static size, each dynamic dimension's bounds, each static stride, its device) from the same shape environment
it compiled the kernels for (cpp_wrapper_cpu.py, torch 2.4 and later); `run_impl` binds each size symbol from the
first input dimension that carries it (`int64_t s77 = arg4_1_size[0];`), and with the checks compiled in, asserts
each input's sizes and strides as expressions over those symbols (`assert_size_stride(arg3_1, {s54, 16L}, ...)`):
that is where inputs sharing a symbol are seen. Outputs are read where the wrapper allocates them
(`aoti_torch_empty_strided` of the buffer it releases into `output_handles[k]`); anything else (a view, an op's
own result) leaves the outputs undetermined, and `aoti-toolchain contract add` records them from a run.

The parser is tolerant and says when it is unsure: `Underivable` names what is missing, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain import pt2, symdims
from toolchain.contract import read_contract
from toolchain.errors import ToolchainError
from toolchain.export_contract import compiled_input_ranges

#: dtype names torch's shim uses (`aoti_torch_dtype_<name>()`, `cached_torch_dtype_<name>`) the contract knows
DTYPES = frozenset({"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "bfloat16"})
SOURCE = "derived from the package's generated input checks (torch wrote it; no recorded contract)"

_INPUT_NAME = re.compile(r'inputs_info_\[(\d+)\]\.name\s*=\s*"([^"]*)"')
_CHECK_FN = re.compile(r"static void check_input_(\d+)\s*\(")
_DTYPE = re.compile(r"_expected_dtype\s*=\s*aoti_torch_dtype_(\w+)\(\)")
_STATIC_SIZE = re.compile(r"if\s*\(\s*(\d+)L?\s*!=\s*\w+_size\[(\d+)\]\s*\)")
_ANY_SIZE = re.compile(r"\w+_size\[(\d+)\]")
_STATIC_STRIDE = re.compile(r"if\s*\(\s*(\d+)L?\s*!=\s*\w+_stride\[(\d+)\]\s*\)")
_DEVICE = re.compile(r"_expected_device_type\s*=\s*(\d+)\s*;")
_STEAL = re.compile(r"auto\s+(\w+)\s*=\s*std::move\(inputs\[(\d+)\]\)")
_BIND = re.compile(r"(?:const\s+)?(?:int64_t|auto)\s+(\w+)\s*=\s*(\w+)_size\[(\d+)\]\s*;")
_ALIAS = re.compile(r"(?:const\s+)?(?:int64_t|auto)\s+(s\w*)\s*=\s*(s\w*)\s*;")
_ASSERT = re.compile(r"assert_size_stride\(\s*(\w+)\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}")
_OUTPUT_NAME = re.compile(r'outputs_info_\[(\d+)\]\.name\s*=\s*"([^"]*)"')
_RELEASE = re.compile(r"output_handles\[(\d+)\]\s*=\s*(\w+)\.release\(\)\s*;")
_MOVE = re.compile(r"auto\s+(\w+)\s*=\s*std::move\((\w+)\)\s*;")
_ARRAY = re.compile(r"(?:static\s+constexpr\s+|const\s+)?int64_t\s+(int_array_\d+)\[\]\s*=\s*\{([^}]*)\}\s*;")
_EMPTY = re.compile(r"aoti_torch_empty_strided\(\s*(\d+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*cached_torch_dtype_(\w+)\s*,"
                    r"[^;]*?&(\w+)_handle\s*\)")
_SPEC = re.compile(r'out_spec_\s*=\s*R"\((.*?)\)"\s*;', re.S)


class Underivable(ValueError):
    """The package's wrapper source doesn't say enough to derive a contract (the message says what is missing)."""


@dataclass(frozen=True)
class Derived:
    """A contract derived from a wrapper: `contract` (schema 2) whose "outputs" is None when they could not be
    determined from the source (a run can: `aoti-toolchain contract add`)."""

    contract: dict[str, Any]

    @property
    def outputs_known(self) -> bool:
        return self.contract.get("outputs") is not None


def _ints(text: str) -> list[str]:
    return [t.strip().removesuffix("L") for t in text.split(",") if t.strip()]


def _expr(text: str, symbols: set[str]) -> int | str | None:
    """An entry of a generated size list (`16L`, `s54`, `16*s54`) as an int, a size expression over `symbols`,
    or None when it is neither."""
    text = re.sub(r"(\d+)L\b", r"\1", text.strip())
    if text.isdigit():
        return int(text)
    try:
        node = symdims.parse(text)
    except ValueError:
        return None
    return text if symdims.symbols(node) <= symbols else None


def _function_bodies(src: str) -> dict[int, str]:
    starts = [(int(m.group(1)), m.end()) for m in _CHECK_FN.finditer(src)]
    out: dict[int, str] = {}
    for k, (i, pos) in enumerate(starts):
        end = starts[k + 1][1] if k + 1 < len(starts) else len(src)
        nxt = src.find("static bool _check_aoti_runtime_check_inputs_env", pos)
        out[i] = src[pos:min(end, nxt) if nxt > 0 else end]
    return out


def _run_impl(src: str) -> str:
    at = src.find("::run_impl(")
    if at < 0:
        msg = "its wrapper source has no run_impl"
        raise Underivable(msg)
    end = src.find("} // AOTInductorModel::run_impl", at)
    return src[at:end if end > 0 else len(src)]


def output_tree(src: str, count: int) -> dict[str, Any]:
    """The output structure from the call spec inductor compiled in (`out_spec_`, torch's pytree JSON): tuples,
    lists and dicts of leaves; a flat tuple when it can't be read or doesn't have `count` leaves."""
    flat = {"kind": "tuple", "children": [{"kind": "leaf"}] * count}
    m = _SPEC.search(src)
    if m is None:
        return flat
    leaves = 0

    def walk(node: Any, depth: int) -> dict[str, Any]:
        nonlocal leaves
        if not isinstance(node, dict) or depth > 64:
            raise ValueError
        kids = node.get("children_spec") or []
        if node.get("type") is None and not kids:
            leaves += 1
            return {"kind": "leaf"}
        kind = {"builtins.tuple": "tuple", "builtins.list": "list", "builtins.dict": "dict"}.get(node.get("type"))
        if kind is None:
            raise ValueError
        children = [walk(c, depth + 1) for c in kids]
        if kind == "dict":
            keys = json.loads(node.get("context") or "null")
            if not isinstance(keys, list) or len(keys) != len(children):
                raise ValueError
            return {"kind": "dict", "keys": [str(k) for k in keys], "children": children}
        return {"kind": kind, "children": children}

    try:
        doc = json.loads(m.group(1))
        tree = walk(doc[1] if isinstance(doc, list) and len(doc) == 2 else doc, 0)
    except (ValueError, TypeError, IndexError, RecursionError):
        return flat
    return tree if leaves == count else flat


def _leaf_names(tree: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    out: list[tuple[str, list[Any]]] = []

    def walk(node: dict[str, Any], path: list[Any]) -> None:
        if node["kind"] == "leaf":
            out.append((".".join(str(p) for p in path), path))
            return
        keys = node.get("keys") or list(range(len(node["children"])))
        for k, c in zip(keys, node["children"], strict=True):
            walk(c, [*path, k])

    walk(tree, [])
    positional = tree["kind"] != "dict"
    return [(f"output_{name or 0}" if positional else name or "output_0", path) for name, path in out]


def derive(wrapper_cpp: str) -> Derived:
    """The contract of the plugin whose generated wrapper source is `wrapper_cpp`; Underivable when unsure."""
    src = wrapper_cpp
    names = {int(i): n for i, n in _INPUT_NAME.findall(src)}
    if not names:
        msg = "its wrapper source names no inputs (inputs_info_)"
        raise Underivable(msg)
    count = max(names) + 1
    bodies = _function_bodies(src)
    missing = [i for i in range(count) if i not in bodies]
    if missing:
        msg = (f"its wrapper source has no generated check for input(s) {missing} (check_input_N: torch 2.4 and "
               "later write one per input)")
        raise Underivable(msg)
    run = _run_impl(src)
    arg_of = {name: int(i) for name, i in _STEAL.findall(run)}
    bounds = compiled_input_ranges(src)
    # symbols: bound by an input dimension, or aliased to one that is (`int64_t s77 = s54;`)
    binding: dict[str, tuple[int, int]] = {}
    for sym, arg, dim in _BIND.findall(run):
        if arg in arg_of and re.fullmatch(r"s\w*|u\w*", sym):
            binding.setdefault(sym, (arg_of[arg], int(dim)))
    alias = {a: b for a, b in _ALIAS.findall(run) if b in binding}
    known = set(binding) | set(alias)
    asserted: dict[int, tuple[list[str], list[str]]] = {}
    for arg, sizes, strides in _ASSERT.findall(run):
        if arg in arg_of:
            asserted.setdefault(arg_of[arg], (_ints(sizes), _ints(strides)))

    inputs: list[dict[str, Any]] = []
    exprs: dict[tuple[int, int], str] = {}
    for i in range(count):
        body = bodies[i]
        m = _DTYPE.search(body)
        if m is None or m.group(1) not in DTYPES:
            what = f"dtype {m.group(1)}" if m else "no dtype check"
            msg = f"input {i} ({names.get(i)}): {what} (the contract knows {', '.join(sorted(DTYPES))})"
            raise Underivable(msg)
        static = {int(d): int(v) for v, d in _STATIC_SIZE.findall(body)}
        seen = {int(d) for d in _ANY_SIZE.findall(body)}
        rank = max(seen) + 1 if seen else 0
        if i in asserted:
            rank = max(rank, len(asserted[i][0]))
        shape: list[Any] = []
        for d in range(rank):
            if d in static:
                shape.append(static[d])
                continue
            b = bounds.get((i, d), {})
            dim: dict[str, Any] = {"min": b.get("min", 0), **({"max": b["max"]} if "max" in b else {})}
            bound_here = next((s for s, (bi, bd) in binding.items() if (bi, bd) == (i, d)), None)
            text = bound_here or (_expr(asserted[i][0][d], known) if i in asserted and d < len(asserted[i][0])
                                  else None)
            if isinstance(text, str):
                text = alias.get(text, text)
                exprs[(i, d)] = text
                dim["expr"] = text
            shape.append(dim)
        entry: dict[str, Any] = {"name": names.get(i) or f"input_{i}", "dtype": m.group(1), "shape": shape}
        dev = _DEVICE.search(body)
        if dev is not None:
            entry["device"] = "cuda" if dev.group(1) == "1" else "cpu" if dev.group(1) == "0" else dev.group(1)
        inputs.append(entry)

    symbols = _symbols(inputs, binding)
    ranges = {s["name"]: (s["min"], s.get("max")) for s in symbols}
    for entry in inputs:
        for dim in entry["shape"]:
            if isinstance(dim, dict) and "expr" in dim:
                span = symdims.bounds(symdims.parse(dim["expr"]), ranges)
                if span is not None:  # the tighter of the dimension's own bounds and its expression's
                    dim["min"] = max(dim["min"], span[0])
                    if span[1] is not None:
                        dim["max"] = min(dim.get("max", span[1]), span[1])
    env = _example_env(symbols)
    for i, entry in enumerate(inputs):
        entry["strides"] = _strides(i, entry, bodies[i], asserted.get(i), env, known)
    outputs = _outputs(src, run, known, ranges, env)
    contract: dict[str, Any] = {"schema": 2, "producer": SOURCE, "symbols": symbols, "inputs": inputs,
                                "outputs": outputs, "output_tree": output_tree(src, len(outputs)) if outputs else None}
    return Derived(contract)


def _symbols(inputs: list[dict[str, Any]], binding: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """Each symbol's range: what every input dimension that carries it alone accepts."""
    out = []
    for sym in binding:
        lo, hi = 0, None
        for entry in inputs:
            for dim in entry["shape"]:
                if isinstance(dim, dict) and dim.get("expr") == sym:
                    lo = max(lo, dim["min"])
                    if "max" in dim:
                        hi = dim["max"] if hi is None else min(hi, dim["max"])
        out.append({"name": sym, "min": lo, **({"max": hi} if hi is not None else {})})
    return out


def _example_env(symbols: list[dict[str, Any]]) -> dict[str, int]:
    """A value per symbol inside its range, away from 0 and 1 (strides there are ambiguous), for strides."""
    env = {}
    for s in symbols:
        v = max(s["min"], 7)
        env[s["name"]] = min(v, s["max"]) if "max" in s else v
    return env


def _strides(i: int, entry: dict[str, Any], body: str, asserted: tuple[list[str], list[str]] | None,
             env: dict[str, int], known: set[str]) -> list[int]:
    """The input's strides at `env`'s sizes (the contract records strides at example sizes: their order is the
    layout). From the asserted stride expressions, else the static checks when they cover every dimension."""
    rank = len(entry["shape"])
    if asserted is not None and len(asserted[1]) == rank:
        out = []
        for text in asserted[1]:
            e = _expr(text, known)
            try:
                out.append(e if isinstance(e, int) else symdims.evaluate(symdims.parse(str(e)), env))
            except (ValueError, KeyError, ZeroDivisionError):
                break
        else:
            return out
    static = {int(d): int(v) for v, d in _STATIC_STRIDE.findall(body)}
    sizes = [d if isinstance(d, int) else env.get(d.get("expr", ""), max(d["min"], 7)) for d in entry["shape"]]
    contiguous, acc = [0] * rank, 1
    for d in reversed(range(rank)):
        contiguous[d] = acc
        acc *= max(sizes[d], 1)
    if len(static) == rank and all(isinstance(d, int) for d in entry["shape"]):
        return [static[d] for d in range(rank)]
    if all(static[d] == contiguous[d] for d in static):
        return contiguous
    msg = (f"input {i} ({entry['name']}): its strides are checked only in part ({static}) and are not contiguous: "
           "its layout can't be told")
    raise Underivable(msg)


def _outputs(src: str, run: str, known: set[str], ranges: dict[str, symdims.Range],
             env: dict[str, int]) -> list[dict[str, Any]] | None:
    """Each output's dtype, shape and strides where the wrapper allocates it; None when any output is made
    otherwise (a view, an input, a constant, an op's own result)."""
    released = {int(k): buf for k, buf in _RELEASE.findall(run)}
    if not released or sorted(released) != list(range(len(released))):
        return None
    moved = {dst: srcbuf for dst, srcbuf in _MOVE.findall(run)}
    arrays = {name: _ints(body) for name, body in _ARRAY.findall(run)}
    allocs = {buf: (int(n), sz, st, dt) for n, sz, st, dt, buf in _EMPTY.findall(run)}
    tree = output_tree(src, len(released))
    names = _leaf_names(tree)
    # the plugin's own output names, as the runtime reports them without a recorded contract
    plugin_names = {int(k): n for k, n in _OUTPUT_NAME.findall(src) if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", n)}
    if len(names) != len(released):
        return None
    out = []
    for k in range(len(released)):
        buf, hops = released[k], 0
        while buf not in allocs and buf in moved and hops < 1000:
            buf, hops = moved[buf], hops + 1
        if buf not in allocs:
            return None
        n, size_arr, stride_arr, dtype = allocs[buf]
        if dtype not in DTYPES or size_arr not in arrays or stride_arr not in arrays:
            return None
        sizes = [_expr(t, known) for t in arrays[size_arr]]
        strides = [_expr(t, known) for t in arrays[stride_arr]]
        if len(sizes) != n or len(strides) != n or any(s is None for s in (*sizes, *strides)):
            return None
        shape: list[Any] = []
        for s in sizes:
            if isinstance(s, int):
                shape.append(s)
            else:
                lo, hi = symdims.bounds(symdims.parse(str(s)), ranges) or (0, None)
                shape.append({"expr": s, "min": lo, **({"max": hi} if hi is not None else {})})
        try:
            at_env = [s if isinstance(s, int) else symdims.evaluate(symdims.parse(str(s)), env) for s in strides]
        except (ValueError, KeyError, ZeroDivisionError):
            return None
        name, path = plugin_names.get(k) or names[k][0], names[k][1]
        out.append({"name": name, "dtype": dtype, "shape": shape, "strides": at_env, "path": path})
    return out


def wrapper_source(path: str | Path) -> str | None:
    """The generated wrapper source a .pt2 embeds (`*.wrapper.cpp`), or None (none, several models, unreadable)."""
    try:
        with pt2.open_package(path) as pkg:
            names = [n for n in pkg.members if n.endswith(".wrapper.cpp")]
            return pkg.read(names[0]).decode(errors="replace") if len(names) == 1 else None
    except (OSError, ValueError, ToolchainError):
        return None


def add_command(path: str | Path) -> str:
    """The command that records a contract into a copy of the package at `path` (the fix where none is known)."""
    p = Path(path)
    return f"aoti-toolchain contract add {p} --example-inputs INPUT.npy ... -o {p.with_name(p.stem + '.contract.pt2')}"


def contract_for(path: str | Path) -> tuple[dict[str, Any] | None, str]:
    """The contract of the .pt2 at `path` and where it comes from: (recorded, "recorded"), else the one derived
    from its wrapper when its inputs and outputs are all known (derived, "derived"), else (None, why not)."""
    recorded = read_contract(path)
    if recorded is not None:
        return recorded, "recorded"
    src = wrapper_source(path)
    if src is None:
        return None, "it holds no contract and no single generated wrapper source to derive one from"
    try:
        derived = derive(src)
    except Underivable as exc:
        return None, f"it holds no contract and none can be derived: {exc}"
    if not derived.outputs_known:
        return None, ("it holds no contract; its inputs can be derived, but not its outputs (the wrapper does not "
                      "allocate them plainly)")
    return derived.contract, "derived"
