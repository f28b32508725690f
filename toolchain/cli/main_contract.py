"""aoti-toolchain contract add: record a contract into a copy of a package torch wrote (docs/package-json.md).

The inputs are derived from the package (toolchain.torch_contract: torch's generated input checks); each example
must satisfy them; the package runs on the examples, which gives the outputs' dtypes and sizes where the source
doesn't, and a second run at other sizes of each size symbol tells which output dimensions follow it. The copy is
loaded again with its contract and run on the examples: what it returns must equal the first run's outputs.
The input is never modified; the copy is written atomically (temporary file, rename).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from toolchain.errors import InputError, UsageError, exit_code


def _dims_at(shape: list[Any], env: dict[str, int]) -> list[int] | None:
    from toolchain import symdims

    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif "expr" in d:
            try:
                out.append(symdims.evaluate(symdims.parse(d["expr"]), env))
            except (ValueError, KeyError, ZeroDivisionError):
                return None
        else:
            return None
    return out


def check_examples(contract: dict[str, Any], arrays: list[Any], files: list[Path]) -> dict[str, int]:
    """Each example against the derived inputs (InputError naming the first mismatch); the symbols' values."""
    inputs = contract["inputs"]
    if len(arrays) != len(inputs):
        msg = f"{len(arrays)} example input(s) given, the package takes {len(inputs)} ({', '.join(t['name'] for t in inputs)})"
        raise InputError(msg, fix="give one --example-inputs FILE.npy per input, in order")
    env: dict[str, int] = {}
    for t, a, f in zip(inputs, arrays, files, strict=True):
        where = f"{f}: input {t['name']}"
        if str(a.dtype) != t["dtype"]:
            raise InputError(f"{where}: dtype {a.dtype}, the plugin was compiled for {t['dtype']}",
                             fix=f"save the example as {t['dtype']}")
        if a.ndim != len(t["shape"]):
            raise InputError(f"{where}: shape {list(a.shape)} has rank {a.ndim}, the plugin takes rank {len(t['shape'])}")
        for d, (want, got) in enumerate(zip(t["shape"], a.shape, strict=True)):
            low, high = (want, want) if isinstance(want, int) else (want.get("min", 0), want.get("max"))
            if got < low or (high is not None and got > high):
                span = str(want) if isinstance(want, int) else f"{low}..{'' if high is None else high}"
                raise InputError(f"{where}: dimension {d} is {got}, the plugin was compiled for {span}")
            sym = want.get("expr") if isinstance(want, dict) else None
            if sym is not None and sym.isidentifier():
                if env.setdefault(sym, got) != got:
                    raise InputError(f"{where}: dimension {d} is {got}, but {sym} is {env[sym]} in an earlier input; "
                                     "the plugin requires them equal")
    return env


def _other_env(contract: dict[str, Any], env: dict[str, int]) -> dict[str, int] | None:
    """Another value of every symbol inside its range (to tell which output dimensions follow it), or None."""
    other = {}
    for s in contract["symbols"]:
        v = env.get(s["name"])
        if v is None:
            return None
        hi = s.get("max")
        alt = v + 1 if hi is None or v + 1 <= hi else v - 1
        if alt < s.get("min", 0) or alt == v:
            return None
        other[s["name"]] = alt
    return other


def _outputs_from_runs(contract: dict[str, Any], first: list[Any], second: list[Any] | None,
                       env: dict[str, int], other: dict[str, int] | None) -> list[dict[str, Any]]:
    from toolchain import symdims

    ranges = {s["name"]: (s.get("min", 0), s.get("max")) for s in contract["symbols"]}
    names = [s.get("name") or f"output_{k}" for k, s in enumerate(contract.get("outputs") or [])]
    out = []
    for k, a in enumerate(first):
        shape: list[Any] = []
        for d, size in enumerate(a.shape):
            moved = second is not None and second[k].shape[d] != size
            if not moved:
                shape.append(int(size))
                continue
            assert other is not None and second is not None
            sym = [s for s in env if env[s] == size and other[s] == second[k].shape[d]]
            if len(sym) == 1:
                lo, hi = symdims.bounds(symdims.parse(sym[0]), ranges) or (0, None)
                shape.append({"expr": sym[0], "min": lo, **({"max": hi} if hi is not None else {})})
            else:
                shape.append({"min": 0})
        strides = [s // a.itemsize for s in a.strides] if all(s % a.itemsize == 0 for s in a.strides) else None
        entry: dict[str, Any] = {"name": names[k] if k < len(names) else f"output_{k}", "dtype": str(a.dtype),
                                 "shape": shape}
        if strides is not None:
            entry["strides"] = strides
        out.append(entry)
    return out


def _resized(arrays: list[Any], contract: dict[str, Any], env: dict[str, int]) -> list[Any] | None:
    """The examples resized to the symbol values of `env` (their values repeated: indices stay in range)."""
    import numpy as np

    out = []
    for t, a in zip(contract["inputs"], arrays, strict=True):
        dims = _dims_at(t["shape"], env)
        if dims is None:
            return None
        out.append(np.resize(a, dims).astype(a.dtype))
    return out


def add_main(args: argparse.Namespace) -> int:
    import numpy as np

    from toolchain import atomic, runtime, torch_contract
    from toolchain.cli.files import check_regular, load_npy
    from toolchain.contract import read_contract
    from toolchain.export import add_contract

    src = Path(args.package)
    check_regular(src, "package")
    out = Path(args.output) if args.output else src.with_name(src.stem + ".contract.pt2")
    if out.resolve() == src.resolve():
        raise UsageError(f"-o {out}: the input itself; the package is never modified in place",
                         fix="give another output file")
    if read_contract(src) is not None:
        raise InputError(f"{src}: already records a contract", fix=f"aoti-toolchain inspect {src} shows it")
    wrapper = torch_contract.wrapper_source(src)
    if wrapper is None:
        raise InputError(f"{src}: not a package with one generated wrapper source (*.wrapper.cpp) to derive "
                         "its inputs from", fix="give a .pt2 written by torch._inductor.aoti_compile_and_package")
    try:
        contract = torch_contract.derive(wrapper).contract
    except torch_contract.Underivable as exc:
        raise InputError(f"{src}: no contract can be derived: {exc}",
                         fix="export the model with aoti-toolchain export, which records one") from None
    files = [Path(f) for f in args.example_inputs]
    arrays = [np.ascontiguousarray(load_npy(f)) for f in files]
    env = check_examples(contract, arrays, files)
    with runtime.load(src, device=args.device) as prog:
        for i, t in enumerate(contract["inputs"]):  # the layout the plugin checks: the runtime converts to it
            prog.set_input_layout(i, t["strides"])
        first = prog.run(arrays)
        other = _other_env(contract, env) if contract["symbols"] else None
        probe = _resized(arrays, contract, other) if other is not None else None
        second = prog.run(probe) if probe is not None else None
        plugin_names = [spec.name for spec in prog.outputs]
    if contract.get("outputs") is None:  # named as the runtime names them without a contract: the plugin's names
        contract["outputs"] = [{"name": n} for n in plugin_names]
    recorded_outputs = _outputs_from_runs(contract, first, second, env, other)
    derived_outputs = contract["outputs"] if all("dtype" in t for t in contract["outputs"]) else None
    if derived_outputs is not None:  # the source's outputs, checked against what the run returned
        for t, a in zip(derived_outputs, first, strict=True):
            if t["dtype"] != str(a.dtype) or _dims_at(t["shape"], env) != list(a.shape):
                raise InputError(f"{src}: output {t['name']}: the run returned {a.dtype}{list(a.shape)}, the "
                                 f"source says {t['dtype']}{t['shape']}: the package is not what its source says",
                                 fix="report it with the package attached")
        recorded_outputs = derived_outputs
    contract["outputs"] = recorded_outputs
    if contract.get("output_tree") is None:
        contract["output_tree"] = torch_contract.output_tree(wrapper, len(recorded_outputs))
    for k, t in enumerate(recorded_outputs):
        t.setdefault("path", [k])
    for t in contract["inputs"]:
        t.pop("device", None)
    contract["producer"] = (f"aoti-toolchain contract add: {torch_contract.SOURCE}, outputs from "
                            f"{'its source' if derived_outputs is not None else 'running the examples'}")
    with atomic.replacing(out, suffix=".pt2") as tmp:
        shutil.copyfile(src, tmp)
        add_contract(tmp, contract)
        # verified: the copy, loaded with its contract (the host checks the examples against it), gives the same
        with runtime.load(tmp, device=args.device) as prog:
            again = prog.run(arrays)
        for k, (a, b) in enumerate(zip(first, again, strict=True)):
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                raise InputError(f"{out}: output {k} differs from the original package's on the examples",
                                 fix="report it with the package attached")
    print(f"{out}: contract recorded ({len(contract['inputs'])} input(s), {len(recorded_outputs)} output(s), "
          f"{len(contract['symbols'])} size symbol(s)); verified on the examples")
    if args.json:
        print(json.dumps(contract, indent=1))
    return exit_code("ok")


def register(sub) -> None:
    p = sub.add_parser("contract", help="record a contract into a copy of a package torch wrote")
    csub = p.add_subparsers(dest="contract_command", required=True, parser_class=type(p))
    a = csub.add_parser("add", help="derive the inputs from the package, run the examples for the outputs, and "
                        "write a copy that records them (checked by the host on every run)")
    a.add_argument("package", metavar="PKG.pt2", help="a package written by torch._inductor.aoti_compile_and_package")
    a.add_argument("--example-inputs", nargs="+", required=True, metavar="FILE.npy",
                   help="one .npy per input, in order; they must be what the plugin was compiled for")
    a.add_argument("-o", "--output", metavar="OUT.pt2", help="the copy to write (default PKG.contract.pt2 beside it)")
    a.add_argument("--device", default="cpu", help="where to run the examples: cpu (default) or cuda[:N]")
    a.add_argument("--json", action="store_true", help="also print the recorded contract")
    a.set_defaults(func=add_main)
