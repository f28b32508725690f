"""aoti-toolchain export: export a torch module to a .pt2 for this host (needs torch)."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolchain.cli import files
from toolchain.errors import InputError, UsageError, exit_code


def _module_from_spec(spec: str):
    from toolchain import examples

    if spec.startswith("example:"):
        return examples.get(spec.removeprefix("example:"))
    if ":" not in spec:
        msg = f"{spec!r}: expected example:NAME or package.module:factory"
        raise UsageError(msg, fix="the factory returns (module, example_inputs)")
    import importlib

    mod_name, func = spec.split(":", 1)
    try:
        factory = getattr(importlib.import_module(mod_name), func)
    except (ImportError, AttributeError) as exc:
        msg = f"{spec}: cannot import: {exc}"
        raise InputError(msg) from exc
    return factory()


def main(args: argparse.Namespace) -> int:
    from toolchain.export import export, prepare_build_dirs

    prepare_build_dirs(Path(args.build_dir))
    module, example_inputs = _module_from_spec(args.model)
    out = export(module, example_inputs, Path(args.output), weights=args.weights, build_dir=Path(args.build_dir),
                 **_target_options(args))
    print(f"exported {args.model} -> {out}")
    if args.save_inputs:
        files.prepare_outdir(Path(args.save_inputs))
        import numpy as np

        d = Path(args.save_inputs)
        for i, x in enumerate(example_inputs):
            files.save_npy(d / f"input_{i}.npy", x.detach().numpy())
        outs = module(*example_inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for k, y in enumerate(outs):
            files.save_npy(d / f"expected_{k}.npy", np.asarray(y.detach().numpy()))
        print(f"example inputs and eager outputs -> {d}")
    return exit_code("ok")


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
    e = sub.add_parser("export", help="export a torch module to a .pt2 for this host (needs torch)")
    e.add_argument("model", help="example:NAME (built-in) or package.module:factory returning (module, inputs)")
    e.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    e.add_argument("--weights", choices=("embedded", "blob"), default="embedded")
    e.add_argument("--build-dir", default="build", help="TMPDIR and the inductor cache go under it")
    e.add_argument("--save-inputs", metavar="DIR", help="also save the example inputs and eager outputs as .npy")
    _add_target_arguments(e)
    e.set_defaults(func=main)
