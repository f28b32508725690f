"""aoti-toolchain: command-line entry point (`aoti-toolchain ...` or `python -m toolchain ...`)."""

from __future__ import annotations

import argparse
import errno
import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from toolchain.atomic import replacing
from toolchain.errors import CompareError, InputError, ToolchainError, UsageError, exit_code

REPO_ROOT = Path(__file__).resolve().parent.parent


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", fix=f"see `{self.prog} --help`")


#: Largest .npy header read (the runtime's bound, runtime/tools/npy.cpp): numpy.save writes a few hundred bytes.
NPY_MAX_HEADER = 1 << 20

_FILE_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def open_regular(path: Path, what: str):
    """Open `path` for reading only if it is a regular file: opened without blocking (a FIFO with no writer
    would hang open() or read() forever) and checked by fstat on that same descriptor, so nothing can swap
    it between the check and the read. Returns a binary file object; InputError names what it is instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        msg = f"{path}: no such file"
        raise InputError(msg, fix=f"check the path of the {what}") from None
    except OSError as exc:
        kind = "is a socket, not a regular file" if exc.errno == errno.ENXIO else f"cannot be opened: {exc.strerror}"
        msg = f"{path}: {kind}"
        raise InputError(msg, fix=f"give the path of a readable {what} file") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        msg = f"{path}: is {_file_type(st.st_mode)}, not a regular file (only regular files are read)"
        raise InputError(msg, fix=f"give the path of the {what} file")
    return os.fdopen(fd, "rb")


def _check_regular(path: Path, what: str) -> None:
    open_regular(path, what).close()


def _load_npy(path: Path, what: str = ".npy input"):
    """A .npy array, read only after its header's shape * itemsize is checked against the file's size (from
    fstat), so a crafted header can't make numpy allocate or read more than the file holds."""
    import numpy as np
    from numpy.lib import format as npy_format

    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, _fortran, dtype = npy_format.read_array_header_1_0(f, max_header_size=NPY_MAX_HEADER)
            elif version in ((2, 0), (3, 0)):
                shape, _fortran, dtype = npy_format.read_array_header_2_0(f, max_header_size=NPY_MAX_HEADER)
            else:
                msg = f"unsupported .npy format version {version}"
                raise ValueError(msg)
            if dtype.hasobject:
                msg = "an object array (it holds Python objects, not numbers)"
                raise ValueError(msg)
            need = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
            have = size - f.tell()
            if need != have:
                what_is = "truncated data" if have < need else f"{have - need} bytes after the data"
                msg = (f"{what_is}: shape {tuple(shape)} of {dtype.str} needs {need} bytes after the header, "
                       f"the file has {have}")
                raise ValueError(msg)
            f.seek(0)
            return np.load(f, allow_pickle=False, max_header_size=NPY_MAX_HEADER)
        except (ValueError, OSError, EOFError) as exc:
            msg = f"{path}: not a valid .npy file: {exc}"
            raise InputError(msg, fix="save inputs with numpy.save(path, array)") from exc


def _prepare_outdir(path: Path) -> None:
    """Create the output directory (and parents) and check files can be made in it, before any work:
    an unusable -o is a bad input, found early, with nothing written."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # mkdir below says why it can't be made
        st = None
    except OSError as exc:
        msg = f"{path}: cannot use as the output directory: {exc.strerror}"
        raise InputError(msg, fix="choose another -o") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        msg = f"{path}: exists and is {_file_type(st.st_mode)}, not a directory"
        raise InputError(msg, fix="choose another -o")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"{path}: cannot create the output directory: {exc.strerror or exc}"
        raise InputError(msg, fix="choose another -o (a path under a directory you can write)") from None
    if not os.access(path, os.W_OK | os.X_OK):
        msg = f"{path}: the output directory is not writable"
        raise InputError(msg, fix="choose another -o or fix its permissions")


def _save_npy(path: Path, array) -> None:
    """Write atomically (toolchain.atomic); a path that can't take the file is an InputError, nothing left."""
    import numpy as np

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputError(msg, fix="choose another output directory") from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        msg = f"{path}: exists and is {_file_type(st.st_mode)}, not a file this command may replace"
        raise InputError(msg, fix="remove it or choose another output directory")
    try:
        with replacing(path, suffix=".npy") as tmp, tmp.open("wb") as f:
            np.save(f, np.ascontiguousarray(array))
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputError(msg, fix="check the output directory exists, is writable and has free space") from None


def compare(outputs, refs, atol: float, rtol: float) -> list[str]:
    """Lines describing each output against its reference; raises CompareError on a mismatch."""
    import numpy as np

    if len(refs) != len(outputs):
        msg = f"{len(refs)} reference(s) for {len(outputs)} output(s)"
        raise UsageError(msg)
    lines, bad = [], []
    for k, (out, ref) in enumerate(zip(outputs, refs, strict=True)):
        if out.shape != ref.shape:
            bad.append(f"output_{k}: shape {list(out.shape)}, reference {list(ref.shape)}")
            continue
        err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)))) if out.size else 0.0
        ok = bool(np.allclose(out, ref, atol=atol, rtol=rtol))
        lines.append(f"output_{k}: max abs error {err:.3g} ({'ok' if ok else 'MISMATCH'})")
        if not ok:
            bad.append(lines[-1])
    if bad:
        msg = "outputs differ from the references: " + "; ".join(bad)
        raise CompareError(msg, fix=f"atol={atol} rtol={rtol}; loosen them only if the model is numerically noisy")
    return lines


def cmd_run(args: argparse.Namespace) -> int:
    from toolchain import runtime

    # Every file is checked (regular, well-formed) and the output directory made before the slow load.
    model = Path(args.model)
    if not model.is_dir():  # a directory is a program of several methods
        _check_regular(model, "model (.pt2 package, plugin .so or methods.json)")
    if args.weights is not None:
        _check_regular(Path(args.weights), "weights blob (--weights)")
    specs = [runtime.split_input_arg(p) for p in args.input]
    inputs = [_load_npy(Path(p)) for p, _ in specs]
    layouts = [runtime.layout_strides(lay, x.shape) if lay else None for (_, lay), x in zip(specs, inputs, strict=True)]
    refs = [_load_npy(Path(p), "reference (--compare)") for p in args.compare]
    _prepare_outdir(Path(args.output))
    with runtime.load(args.model, weights=args.weights, library_path=args.library, strict=args.strict) as prog:
        if args.method is not None and args.method not in prog.methods:
            msg = f"{args.model}: no method {args.method!r}; it has {', '.join(prog.methods)}"
            raise UsageError(msg, fix="choose one with --method")
        for k, strides in enumerate(layouts):
            if strides is not None:
                prog.set_input_layout(k, strides, method=args.method)
        outputs = prog.run(inputs, method=args.method)
    for k, out in enumerate(outputs):
        dest = Path(args.output) / f"output_{k}.npy"
        _save_npy(dest, out)
        print(f"output_{k}: {out.dtype}{list(out.shape)} -> {dest}")
    if refs:
        for line in compare(outputs, refs, args.atol, args.rtol):
            print(line)
    return exit_code("ok")


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


def cmd_export(args: argparse.Namespace) -> int:
    from toolchain.export import export, prepare_build_dirs

    prepare_build_dirs(Path(args.build_dir))
    module, example_inputs = _module_from_spec(args.model)
    out = export(module, example_inputs, Path(args.output), weights=args.weights, build_dir=Path(args.build_dir))
    print(f"exported {args.model} -> {out}")
    if args.save_inputs:
        _prepare_outdir(Path(args.save_inputs))
        import numpy as np

        d = Path(args.save_inputs)
        for i, x in enumerate(example_inputs):
            _save_npy(d / f"input_{i}.npy", x.detach().numpy())
        outs = module(*example_inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for k, y in enumerate(outs):
            _save_npy(d / f"expected_{k}.npy", np.asarray(y.detach().numpy()))
        print(f"example inputs and eager outputs -> {d}")
    return exit_code("ok")


def cmd_demo(args: argparse.Namespace) -> int:
    """Build the runtime, export the built-in example with torch, verify the package against the runtime,
    run it in aoti-run, compare with eager."""
    import numpy as np

    from toolchain.verify import verify_paths
    from toolchain.verify.formats import to_text

    build = Path(args.build_dir).resolve()
    scons = shutil.which("scons") or str(Path(sys.executable).with_name("scons"))
    print(f"[1/4] building the host runtime: scons -C {REPO_ROOT} build_dir={build}", flush=True)
    subprocess.run([scons, "-C", str(REPO_ROOT), "-Q", "-s", f"build_dir={build}", f"-j{os.cpu_count() or 2}"], check=True)
    aoti_run = build / "cpu-gcc-release" / "dist" / "bin" / "aoti-run"
    work = build / "demo" / args.example
    pt2 = work / f"{args.example}.pt2"
    print(f"[2/4] exporting example:{args.example} with torch -> {pt2}", flush=True)
    ns = argparse.Namespace(model=f"example:{args.example}", output=str(pt2), weights=args.weights,
                            build_dir=str(build), save_inputs=str(work))
    cmd_export(ns)
    lib = build / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"
    print(f"[3/4] verifying it in the host it will load in: aoti-toolchain verify --host {lib} {pt2}", flush=True)
    report = verify_paths([pt2], host=lib, host_source="the runtime library this demo built")
    sys.stdout.write(to_text(report))
    print(f"verify verdict: {report.verdict.upper()} ({report.count('error')} error(s), "
          f"{report.count('warning')} warning(s))", flush=True)
    if report.exit_code != 0:
        msg = f"{pt2}: verify {report.verdict}: the exported package would not load as it is"
        raise ToolchainError(msg, fix="read the findings above; each names its fix")
    n_in = len(list(work.glob("input_*.npy")))
    cmd = [str(aoti_run), str(pt2), *sum((["-i", str(work / f"input_{i}.npy")] for i in range(n_in)), []),
           "-o", str(work / "out")]
    print(f"[4/4] running it in our LibTorch-free host: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)
    worst = 0.0
    for k, exp_path in enumerate(sorted(work.glob("expected_*.npy"))):
        got = np.load(work / "out" / f"output_{k}.npy")
        exp = np.load(exp_path)
        err = float(np.max(np.abs(got.astype(np.float64) - exp))) if got.size else 0.0
        worst = max(worst, err)
        print(f"output_{k} {got.dtype}{list(got.shape)}:\n{np.array2string(got, precision=5, threshold=64)}")
    print(f"max error against eager PyTorch: {worst:.3g}")
    if worst > args.tolerance:
        msg = f"max error {worst:.3g} exceeds {args.tolerance}"
        raise CompareError(msg)
    return exit_code("ok")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aoti-toolchain", description="Build, check, repair and run AOTInductor plugins.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a .pt2 or plugin .so in the host runtime (Python module)")
    r.add_argument("model", help="a .pt2, a plugin .so, or a program of several methods (a directory or methods.json)")
    r.add_argument("--method", help="the method to run (default: the first, forward when present)")
    r.add_argument("--weights", help="weights blob for a plugin .so exported with weights outside")
    r.add_argument("-i", "--input", action="append", default=[], metavar="FILE.npy[:LAYOUT]",
                   help="input .npy, in order (repeat); LAYOUT (contiguous, channels_last, channels_last_3d, "
                   "strides=S0,S1,...) is the layout a plugin without a contract was built for")
    r.add_argument("--strict", action="store_true",
                   help="refuse inputs in another layout than the plugin's instead of converting them")
    r.add_argument("-o", "--output", required=True, help="directory for output_<k>.npy")
    r.add_argument("--compare", nargs="+", default=[], metavar="REF.npy", help="reference outputs, in order")
    r.add_argument("--atol", type=float, default=1e-5)
    r.add_argument("--rtol", type=float, default=1e-4)
    r.add_argument("--library", type=Path, default=None, help="libaoti_host.so (default: this checkout's build)")
    r.set_defaults(func=cmd_run)

    e = sub.add_parser("export", help="export a torch module to a .pt2 for this host (needs torch)")
    e.add_argument("model", help="example:NAME (built-in) or package.module:factory returning (module, inputs)")
    e.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    e.add_argument("--weights", choices=("embedded", "blob"), default="embedded")
    e.add_argument("--build-dir", default="build", help="TMPDIR and the inductor cache go under it")
    e.add_argument("--save-inputs", metavar="DIR", help="also save the example inputs and eager outputs as .npy")
    e.set_defaults(func=cmd_export)

    d = sub.add_parser("demo", help="build the runtime, export a built-in example, run it, compare with eager")
    d.add_argument("--example", default="mlp")
    d.add_argument("--weights", choices=("embedded", "blob"), default="embedded")
    d.add_argument("--build-dir", default=str(REPO_ROOT / "build"))
    d.add_argument("--tolerance", type=float, default=1e-5)
    d.set_defaults(func=cmd_demo)

    from toolchain.verify.cli import register_commands  # verify, inspect, patch (issue 4)

    register_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except ToolchainError as exc:
        print(f"aoti-toolchain: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except subprocess.CalledProcessError as exc:
        print(f"aoti-toolchain: error: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}", file=sys.stderr)
        return exit_code("failed")
    except KeyboardInterrupt:
        return exit_code("interrupted")
