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
    out = export(module, example_inputs, Path(args.output), weights=args.weights, build_dir=Path(args.build_dir))
    print(f"exported {args.model} -> {out}")
    if args.save_inputs:
        files.prepare_outdir(Path(args.save_inputs))
        from toolchain.runtime import to_numpy  # bfloat16 as ml_dtypes.bfloat16 ('<V2' in the file)

        d = Path(args.save_inputs)
        for i, x in enumerate(example_inputs):
            files.save_npy(d / f"input_{i}.npy", to_numpy(x.detach()))
        outs = module(*example_inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for k, y in enumerate(outs):
            files.save_npy(d / f"expected_{k}.npy", to_numpy(y.detach()))
        print(f"example inputs and eager outputs -> {d}")
    return exit_code("ok")


def register(sub) -> None:
    e = sub.add_parser("export", help="export a torch module to a .pt2 for this host (needs torch)")
    e.add_argument("model", help="example:NAME (built-in) or package.module:factory returning (module, inputs)")
    e.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    e.add_argument("--weights", choices=("embedded", "blob"), default="embedded")
    e.add_argument("--build-dir", default="build", help="TMPDIR and the inductor cache go under it")
    e.add_argument("--save-inputs", metavar="DIR", help="also save the example inputs and eager outputs as .npy")
    e.set_defaults(func=main)
