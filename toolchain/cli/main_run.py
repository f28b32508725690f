"""aoti-toolchain run: run a .pt2, a plugin .so or a program of several methods in the host runtime."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolchain.cli import files
from toolchain.errors import UsageError, exit_code


def main(args: argparse.Namespace) -> int:
    from toolchain import contract, runtime

    # Every file is checked (regular, well-formed) and the output directory made before the slow load.
    model = Path(args.model)
    if not model.is_dir():  # a directory is a program of several methods
        files.check_regular(model, "model (.pt2 package, plugin .so or methods.json)")
    if args.weights is not None:
        files.check_regular(Path(args.weights), "weights blob (--weights)")
    specs = [runtime.split_input_arg(p) for p in args.input]
    inputs = [files.load_npy(Path(p)) for p, _ in specs]
    layouts = [runtime.layout_strides(lay, x.shape) if lay else None for (_, lay), x in zip(specs, inputs, strict=True)]
    compare_dir = len(args.compare) == 1 and Path(args.compare[0]).is_dir()
    refs = [] if compare_dir else [files.load_npy(Path(p), "reference (--compare)") for p in args.compare]
    created = files.prepare_outdir(Path(args.output))
    written: list[Path] = []
    try:
        with runtime.load(args.model, weights=args.weights, library_path=args.library, strict=args.strict) as prog:
            if args.method is not None and args.method not in prog.methods:
                msg = f"{args.model}: no method {args.method!r}; it has {', '.join(prog.methods)}"
                raise UsageError(msg, fix="choose one with --method")
            for k, strides in enumerate(layouts):
                if strides is not None:
                    prog.set_input_layout(k, strides, method=args.method)
            outputs = prog.run(inputs, method=args.method)
            stems = contract.output_file_stems(prog.contract(args.method), len(outputs))
        if compare_dir:  # export --save-inputs DIR wrote expected_<stem>.npy per output
            refs = [files.load_npy(Path(args.compare[0]) / f"expected_{s}.npy", "reference (--compare)") for s in stems]
        for stem, out in zip(stems, outputs, strict=True):
            dest = Path(args.output) / f"output_{stem}.npy"
            files.save_npy(dest, out)
            written.append(dest)
            print(f"output_{stem}: {out.dtype}{list(out.shape)} -> {dest}")
    except BaseException:  # no partial result: this command's outputs and the directories it made go
        for f in written:
            f.unlink(missing_ok=True)
        files.remove_created(created)
        raise
    if refs:
        for line in files.compare(outputs, refs, args.atol, args.rtol, [f"output_{s}" for s in stems]):
            print(line)
    return exit_code("ok")


def register(sub) -> None:
    r = sub.add_parser("run", help="run a .pt2 or plugin .so in the host runtime (Python module)")
    r.add_argument("model", help="a .pt2, a plugin .so, or a program of several methods (a directory or methods.json)")
    r.add_argument("--method", help="the method to run (default: the first, forward when present)")
    r.add_argument("--weights", help="weights blob for a plugin .so exported with weights outside")
    r.add_argument("-i", "--input", action="append", default=[], metavar="FILE.npy[:LAYOUT]",
                   help="input .npy, in order (repeat); LAYOUT (contiguous, channels_last, channels_last_3d, "
                   "strides=S0,S1,...) is the layout a plugin without a contract was built for")
    r.add_argument("--strict", action="store_true",
                   help="refuse inputs in another layout than the plugin's instead of converting them")
    r.add_argument("-o", "--output", required=True, help="directory for the outputs, one file per output leaf: "
                   "output_0.npy, output_1.npy, ... (a dict's leaves by key: output_logits.npy, output_aux.0.npy)")
    r.add_argument("--compare", nargs="+", default=[], metavar="REF.npy|DIR", help="reference outputs, in order; or "
                   "the directory export --save-inputs wrote (its expected_<name>.npy files)")
    r.add_argument("--atol", type=float, default=1e-5, help="--compare: absolute tolerance (default 1e-5)")
    r.add_argument("--rtol", type=float, default=1e-4, help="--compare: relative tolerance (default 1e-4)")
    r.add_argument("--library", type=Path, default=None, metavar="LIBAOTI_HOST.so",
                   help="the host runtime library to run in (default: $AOTI_HOST_LIBRARY, else the runtime the "
                   "installed aoti-toolchain wheel carries, else the build of the checkout this runs from; "
                   "`aoti-toolchain --version` names the one found)")
    r.set_defaults(func=main)
