"""aoti-toolchain demo: get the runtime (build it in a checkout, or the installed one), export a built-in example,
verify it, run it, compare with eager."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from toolchain import progress
from toolchain.errors import CompareError, InputError, ToolchainError, exit_code

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
VARIANT = "cpu-gcc-release"


def _runtime(build: Path | None) -> tuple[Path, Path]:
    """(libaoti_host.so, aoti-run) the demo uses: built now with SCons in a checkout (into `build`, default the
    checkout's build/), else the runtime toolchain.hostlib finds (the installed wheel's, or $AOTI_HOST_LIBRARY's
    tree); an error saying what the demo needs when there is none."""
    from toolchain import hostlib

    if hostlib.in_checkout():
        build = build or REPO_ROOT / "build"
        scons = shutil.which("scons") or str(Path(sys.executable).with_name("scons"))
        print(f"[1/4] building the host runtime: scons -C {REPO_ROOT} build_dir={build}", flush=True)
        with progress.step("building the host runtime (scons)"):
            subprocess.run([scons, "-C", str(REPO_ROOT), "-Q", "-s", f"build_dir={build}", f"-j{os.cpu_count() or 2}"],
                           check=True)
        dist = build / VARIANT / "dist"
        return dist / "lib" / "libaoti_host.so", dist / "bin" / "aoti-run"
    lib = hostlib.find_library()
    prog = hostlib.find_program("aoti-run")
    if lib is None or prog is None:
        looked = ", ".join(str(t) for t in hostlib.installed_trees())
        where = (f"the runtime found, {lib}, has no bin/aoti-run beside its lib/" if lib is not None else
                 f"none is installed (looked at ${hostlib.LIBRARY_ENV} and in {looked})")
        msg = ("demo needs this project's host runtime to run the example in (lib/libaoti_host.so and bin/aoti-run "
               f"of a runtime tree): {where}, and this is no checkout of aoti-toolchain to build one in")
        raise InputError(msg, fix="pip install aoti-toolchain (a platform wheel carries the runtime), or run the demo "
                         "in a checkout (git clone, bash .ci/setup: it builds the runtime with scons), or set "
                         f"{hostlib.LIBRARY_ENV}=/path/to/dist/lib/libaoti_host.so of a runtime built elsewhere")
    print(f"[1/4] using the installed host runtime: {lib.parent.parent} (aoti-toolchain --version names it)",
          flush=True)
    return lib, prog


def _check_torch() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        from toolchain.hostlib import pip_install

        msg = "demo exports the example with torch, which is not installed here"
        raise InputError(msg, fix=pip_install("torch"))


def main(args: argparse.Namespace) -> int:
    """Get the runtime, export the built-in example with torch, verify the package against the runtime, run it
    in aoti-run, compare with eager."""
    import numpy as np

    from toolchain.cli import main_export
    from toolchain.cli.parser import build_parser
    from toolchain.export import default_build_dir
    from toolchain.hostlib import in_checkout
    from toolchain.report import to_text
    from toolchain.verify import verify_paths

    progress.set_quiet(bool(getattr(args, "quiet", False)))
    _check_torch()
    build = Path(args.build_dir).resolve() if args.build_dir else None
    lib, aoti_run = _runtime(build)
    if build is None and in_checkout():
        build = REPO_ROOT / "build"
    # no build dir, installed: export's own default (the user's cache dir, made private as the runtime's cache
    # there needs it)
    work = (build or default_build_dir()) / "demo" / args.example
    pt2 = work / f"{args.example}.pt2"
    print(f"[2/4] exporting example:{args.example} with torch -> {pt2}", flush=True)
    export_args = ["export", f"example:{args.example}", "-o", str(pt2), "--weights", args.weights,
                   *(["--build-dir", str(build)] if build is not None else []), "--save-inputs", str(work),
                   *(["-q"] if args.quiet else [])]
    main_export.main(build_parser("export").parse_args(export_args))
    print(f"[3/4] verifying it in the host it will load in: aoti-toolchain verify --host {lib} {pt2}", flush=True)
    with progress.step("verifying the package"):
        report = verify_paths([pt2], host=lib, host_source="the runtime library this demo runs the example in")
    sys.stdout.write(to_text(report))
    print(f"verify verdict: {report.verdict.upper()} ({report.count('error')} error(s), "
          f"{report.count('warning')} warning(s))", flush=True)
    if report.exit_code != 0:
        msg = f"{pt2}: verify {report.verdict}: the exported package would not load as it is"
        raise ToolchainError(msg, fix="read the findings above; each names its fix")
    out = work / "out"
    if out.is_dir():  # the outputs of an earlier run of the demo go: only this run's are compared
        shutil.rmtree(out)
    n_in = len(list(work.glob("input_*.npy")))
    cmd = [str(aoti_run), str(pt2), *sum((["-i", str(work / f"input_{i}.npy")] for i in range(n_in)), []),
           "-o", str(out)]
    print(f"[4/4] running it in our LibTorch-free host: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)
    worst = 0.0
    # export saves expected_<name>.npy per output; aoti-run writes output_<name>.npy: paired by name
    for exp_path in sorted(work.glob("expected_*.npy")):
        name = exp_path.name.removeprefix("expected_")
        got_path = out / f"output_{name}"
        if not got_path.is_file():
            msg = f"aoti-run wrote no {got_path.name} for the reference {exp_path.name} (it wrote: " \
                  f"{', '.join(sorted(p.name for p in out.glob('*.npy'))) or 'nothing'})"
            raise CompareError(msg)
        got = np.load(got_path)
        exp = np.load(exp_path)
        err = float(np.max(np.abs(got.astype(np.float64) - exp))) if got.size else 0.0
        worst = max(worst, err)
        print(f"{got_path.stem} {got.dtype}{list(got.shape)}:\n{np.array2string(got, precision=5, threshold=64)}")
    print(f"max error against eager PyTorch: {worst:.3g}")
    if worst > args.tolerance:
        msg = f"max error {worst:.3g} exceeds {args.tolerance}"
        raise CompareError(msg)
    return exit_code("ok")


def register(sub) -> None:
    d = sub.add_parser("demo", help="get the runtime, export a built-in example, run it, compare with eager")
    d.add_argument("--example", default="mlp", help="the built-in example to export (toolchain/examples.py; default mlp)")
    d.add_argument("--weights", choices=("embedded", "blob"), default="embedded",
                   help="weights inside the plugin .so (embedded) or in a separate blob in the package (blob)")
    d.add_argument("--build-dir", default=None,
                   help="where the example is exported (into demo/EXAMPLE/) and, in a checkout, the runtime built "
                   "(default: build/ of the checkout this runs from; installed, the runtime is the installed one and "
                   "the directory $XDG_CACHE_HOME/aoti-toolchain, else ~/.cache/aoti-toolchain)")
    d.add_argument("--tolerance", type=float, default=1e-5,
                   help="largest absolute error against eager PyTorch that passes (default 1e-5)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (the steps still print)")
    d.set_defaults(func=main)
