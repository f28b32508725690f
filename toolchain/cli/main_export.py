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

    build_dir = Path(args.build_dir) if args.build_dir else None  # None: the user's cache dir
    prepare_build_dirs(build_dir)
    module, example_inputs = _module_from_spec(args.model)
    out = export(module, example_inputs, Path(args.output), weights=args.weights, build_dir=build_dir)
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


def register(sub) -> None:
    e = sub.add_parser("export", help="export a torch module to a .pt2 for this host (needs torch)")
    e.add_argument("model", help="example:NAME (built-in) or package.module:factory returning (module, inputs)")
    e.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    e.add_argument("--weights", choices=("embedded", "blob"), default="embedded")
    e.add_argument("--build-dir", default=None, help="TMPDIR and the inductor cache go under it (default: "
                   "$XDG_CACHE_HOME/aoti-toolchain, else ~/.cache/aoti-toolchain; never the current directory)")
    e.add_argument("--save-inputs", metavar="DIR", help="also save the example inputs and eager outputs as .npy")
    e.set_defaults(func=main)
