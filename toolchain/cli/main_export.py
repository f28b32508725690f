"""aoti-toolchain export: export a torch module to a .pt2 for this host (needs torch)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from toolchain import progress
from toolchain.cli import files
from toolchain.errors import InputError, UsageError, exit_code

FACTORY_RETURNS = ("(module, example_inputs) or (module, example_inputs, dynamic_shapes), dynamic_shapes as "
                   "torch.export takes them")

EPILOG = """\
Your own model: a file mymodel.py in the current directory with

    import torch

    def factory():
        model = MyModel()                      # any torch.nn.Module, in eval mode or not
        return model, (torch.randn(8, 16),)    # the example inputs forward() is traced with

  aoti-toolchain export mymodel:factory -o model.pt2 --dynamic x:0=1..64 --save-inputs model/

exports forward(x) with its dimension 0 ("batch") dynamic from 1 to 64; NAME is forward's parameter name.
The factory may also return (model, inputs, dynamic_shapes), e.g. {"x": {0: torch.export.Dim("batch",
min=1, max=64)}}; then leave --dynamic out. The current directory is importable, as with `python -m`.

Size ranges: each --dynamic MIN..MAX is what the package must accept. torch specialises sizes 0 and 1
while tracing, so when a minimum is 0 or 1 export traces and compiles with torch's size-oblivious
reasoning. Where the model's code still branches on a size being 1 (a channels-last convolution choosing
its memory format, a linear layer's contiguity check on attention's transposed input), torch compiles the
plugin for sizes >= 2 only: export then fails, naming each dimension, the range the plugin accepts and
the guard torch added. Re-export with that range (--dynamic x:0=2..64), or pass --allow-narrower to keep
the plugin; the package then records the narrower range and the runtime refuses smaller sizes, saying why.

Shared sizes: give --dynamic for every input dimension that varies. torch finds dimensions that must be
equal (a batch, the sequence length of tokens and of their mask); the package records each as one named
size (inspect shows them), and the runtime refuses inputs that disagree on one before the plugin runs.

Outputs: forward may return tensors in tuples, lists and dicts. Each leaf is named by its path (logits,
aux.0, aux.1) or output_<k> for a positional output; --save-inputs writes expected_<name>.npy per leaf
(expected_0.npy for output_0), which `aoti-toolchain run --compare DIR` reads back.
"""

_DYNAMIC = re.compile(r"^(?P<name>[A-Za-z_]\w*):(?P<dim>\d+)=(?P<min>\d+)\.\.(?P<max>\d*)$")


def parse_dynamic(specs: list[str]) -> dict[str, dict[int, tuple[int, int | None]]]:
    """NAME:DIM=MIN..MAX (MAX may be left out: no upper bound) -> {name: {dim: (min, max)}}."""
    out: dict[str, dict[int, tuple[int, int | None]]] = {}
    for spec in specs:
        m = _DYNAMIC.match(spec)
        if m is None:
            msg = f"--dynamic {spec!r}: expected NAME:DIM=MIN..MAX, e.g. x:0=1..64"
            raise UsageError(msg, fix="NAME is a parameter of forward(), DIM a dimension index, MIN..MAX its sizes")
        low, high = int(m["min"]), (int(m["max"]) if m["max"] else None)
        if high is not None and high < low:
            msg = f"--dynamic {spec!r}: MAX {high} is below MIN {low}"
            raise UsageError(msg, fix="give MIN..MAX with MIN <= MAX")
        dims = out.setdefault(m["name"], {})
        if int(m["dim"]) in dims:
            msg = f"--dynamic {spec!r}: dimension {m['dim']} of {m['name']} is given twice"
            raise UsageError(msg, fix="give each dimension once")
        dims[int(m["dim"])] = (low, high)
    return out


def dynamic_shapes_for(module: Any, example_inputs: Any, dynamic: dict[str, dict[int, tuple[int, int | None]]]):
    """torch.export's dynamic_shapes for forward's parameters from parse_dynamic's result (Dim.DYNAMIC hints,
    so that torch relates dimensions that must be equal across inputs itself)."""
    import inspect

    import torch

    params = [p.name for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    shapes: dict[str, Any] = {}
    for k, name in enumerate(params[:len(example_inputs)]):
        x = example_inputs[k]
        dims = dynamic.get(name)
        if dims is None:
            shapes[name] = None
            continue
        for d, (low, high) in dims.items():
            if not isinstance(x, torch.Tensor) or d >= x.dim():
                msg = f"--dynamic {name}:{d}: {name} has {x.dim() if isinstance(x, torch.Tensor) else 'no'} dimensions"
                raise UsageError(msg, fix=f"give a dimension index below {x.dim() if isinstance(x, torch.Tensor) else 0}")
            size = int(x.shape[d])
            if not (low <= size and (high is None or size <= high)):
                msg = (f"--dynamic {name}:{d}={low}..{'' if high is None else high}: the example input has size "
                       f"{size} there, outside the range")
                raise UsageError(msg, fix="make the example's size fall inside MIN..MAX (an example of 2 or more "
                                 "is safest)")
        shapes[name] = {d: torch.export.Dim.DYNAMIC(min=low, max=high) if high is not None
                        else torch.export.Dim.DYNAMIC(min=low) for d, (low, high) in dims.items()}
    unknown = sorted(set(dynamic) - set(params[:len(example_inputs)]))
    if unknown:
        msg = f"--dynamic: {', '.join(unknown)}: not a parameter of {type(module).__name__}.forward"
        raise UsageError(msg, fix=f"use forward's parameter names: {', '.join(params) or '(none)'}")
    return shapes


def _module_from_spec(spec: str) -> tuple[Any, Any, Any]:
    from toolchain import examples

    if spec.startswith("example:"):
        module, inputs = examples.get(spec.removeprefix("example:"))
        return module, inputs, None
    if ":" not in spec:
        msg = f"{spec!r}: expected example:NAME or module:factory (e.g. mymodel:factory for ./mymodel.py)"
        raise UsageError(msg, fix=f"the factory returns {FACTORY_RETURNS}")
    import importlib

    mod_name, func = spec.split(":", 1)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules in the current directory import
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        if getattr(exc, "name", None) == "torch" or str(getattr(exc, "name", "")).startswith("torch."):
            _need_torch()
        msg = f"{spec}: cannot import module {mod_name!r}: {exc}"
        raise InputError(msg, fix=f"run from the directory holding {mod_name.replace('.', '/')}.py, or add its "
                         "directory to PYTHONPATH") from exc
    factory = getattr(module, func, None)
    if not callable(factory):
        msg = f"{spec}: module {mod_name!r} ({getattr(module, '__file__', '?')}) has no function {func!r}"
        raise InputError(msg, fix=f"define {func}() returning {FACTORY_RETURNS}")
    made = factory()
    if not isinstance(made, (tuple, list)) or len(made) not in (2, 3):
        msg = f"{spec}: the factory returned {type(made).__name__}" + (
            f" of {len(made)} items" if isinstance(made, (tuple, list)) else "")
        raise InputError(msg, fix=f"return {FACTORY_RETURNS}")
    inputs = made[1]
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)  # a lone tensor: forward takes one input
    return made[0], tuple(inputs), (made[2] if len(made) == 3 else None)


def _need_torch() -> None:
    """export needs torch, which the toolchain installs only with its [torch] extra: say so before anything."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        from toolchain.hostlib import pip_install

        msg = "export needs torch, which is not installed here (running, verifying and serving don't need it)"
        raise UsageError(msg, fix=pip_install("torch"))


def main(args: argparse.Namespace) -> int:
    _need_torch()
    from toolchain.export import export, prepare_build_dirs

    progress.set_quiet(bool(getattr(args, "quiet", False)))
    build_dir = Path(args.build_dir) if args.build_dir else None  # None: the user's cache dir
    prepare_build_dirs(build_dir)
    dynamic = parse_dynamic(getattr(args, "dynamic", None) or [])
    with progress.step(f"loading {args.model}"):
        module, example_inputs, dynamic_shapes = _module_from_spec(args.model)
    if dynamic:
        if dynamic_shapes is not None:
            msg = f"{args.model}: the factory returns dynamic shapes and --dynamic gives more"
            raise UsageError(msg, fix="give dynamic shapes in one place: the factory or --dynamic")
        dynamic_shapes = dynamic_shapes_for(module, example_inputs, dynamic)
    out = export(module, example_inputs, Path(args.output), weights=args.weights, build_dir=build_dir,
                 dynamic_shapes=dynamic_shapes, allow_narrower=bool(getattr(args, "allow_narrower", False)),
                 **_target_options(args))
    print(f"exported {args.model} -> {out}")
    if args.save_inputs:
        save_examples(Path(args.save_inputs), module, example_inputs, out)
        print(f"example inputs and eager outputs -> {args.save_inputs}")
    return exit_code("ok")


def save_examples(d: Path, module: Any, example_inputs: Any, package: Path) -> None:
    """The example inputs (input_<i>.npy) and eager PyTorch's outputs, one file per leaf of the output tree,
    named as `aoti-toolchain run` names its outputs (expected_<name>.npy, docs/cli.md). Everything is computed
    before the first file is written, so a model whose outputs can't be saved leaves no half-written folder."""
    import torch
    from torch.utils import _pytree

    from toolchain import contract
    from toolchain.runtime import to_numpy  # bfloat16 as ml_dtypes.bfloat16 ('<V2' in the file)

    with torch.no_grad():
        outs = module(*example_inputs)
    leaves = _pytree.tree_leaves(outs)
    bad = [type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)]
    if bad:
        msg = f"the model returns {', '.join(sorted(set(bad)))} among its outputs; only tensors can be saved"
        raise InputError(msg, fix="return tensors (in tuples, lists or dicts) from forward")
    names = contract.output_file_stems(contract.read_contract(package), len(leaves))
    arrays = {f"input_{i}.npy": to_numpy(x.detach()) for i, x in enumerate(example_inputs)}
    arrays.update({f"expected_{n}.npy": to_numpy(y.detach()) for n, y in zip(names, leaves, strict=True)})
    files.prepare_outdir(d)
    for name, array in arrays.items():
        files.save_npy(d / name, array)


def _target_options(args: argparse.Namespace) -> dict:
    """--cpu-isa / --cuda-arch / --cuda-ptx as export()'s arguments (docs/targets.md)."""
    out: dict = {"cpu_isa": getattr(args, "cpu_isa", None)}  # callers like demo build their own namespace
    arch, ptx = getattr(args, "cuda_arch", None), getattr(args, "cuda_ptx", False)
    if arch is not None or ptx:
        out.update(cuda_arch=arch, cuda_ptx=ptx)
    return out


def _add_target_arguments(e) -> None:
    from toolchain.target import CPU_ISA_CHOICES, DEFAULT_CPU_ISA

    e.add_argument("--cpu-isa", choices=CPU_ISA_CHOICES, default=DEFAULT_CPU_ISA,
                   help=f"the CPUs the plugin runs on: vector ISA and -march (default {DEFAULT_CPU_ISA}: x86-64-v3; "
                   "native: this machine's widest; docs/targets.md)")
    e.add_argument("--cuda-arch", metavar="LIST", help="CUDA plugins: compute capabilities to build SASS for, "
                   "e.g. 90 (inductor builds for the export GPU only)")
    e.add_argument("--cuda-ptx", action="store_true", help="CUDA plugins: embed PTX too, so newer GPUs JIT it")


def register(sub) -> None:
    e = sub.add_parser("export", help="export a torch module to a .pt2 for this host (needs torch)",
                       description="Export a torch module to a .pt2 package built for this host's runtime.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("model", help=f"example:NAME (built-in) or module:factory, the factory returning {FACTORY_RETURNS}")
    e.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    e.add_argument("--dynamic", action="append", default=[], metavar="NAME:DIM=MIN..MAX",
                   help="make dimension DIM of forward's input NAME dynamic, from MIN to MAX (MAX left out: no "
                   "bound); repeat for more dimensions")
    e.add_argument("--weights", choices=("embedded", "blob"), default="embedded",
                   help="weights inside the plugin .so (embedded) or in a separate blob in the package (blob)")
    e.add_argument("--build-dir", default=None, help="TMPDIR and the inductor cache go under it (default: "
                   "$XDG_CACHE_HOME/aoti-toolchain, else ~/.cache/aoti-toolchain; never the current directory)")
    e.add_argument("--save-inputs", metavar="DIR", help="also save the example inputs (input_<i>.npy) and eager "
                   "outputs as .npy, one per output leaf (expected_<name>.npy: expected_0.npy, expected_logits.npy)")
    e.add_argument("--allow-narrower", action="store_true", help="accept a plugin that torch compiled for a "
                   "narrower size range than --dynamic asks for (it specialised sizes 0 and 1): the package records "
                   "the range that holds; without it such an export fails and says why")
    e.add_argument("-q", "--quiet", action="store_true", help="print no progress, only the result and errors")
    _add_target_arguments(e)
    e.set_defaults(func=main)
