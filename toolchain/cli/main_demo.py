"""aoti-toolchain demo: build the runtime, export a built-in example, verify it, run it, compare with eager."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from toolchain import progress
from toolchain.cli import main_export
from toolchain.errors import CompareError, ToolchainError, exit_code

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def main(args: argparse.Namespace) -> int:
    """Build the runtime, export the built-in example with torch, verify the package against the runtime,
    run it in aoti-run, compare with eager."""
    import numpy as np

    from toolchain.report import to_text
    from toolchain.verify import verify_paths

    build = Path(args.build_dir).resolve()
    scons = shutil.which("scons") or str(Path(sys.executable).with_name("scons"))
    progress.set_quiet(bool(getattr(args, "quiet", False)))
    print(f"[1/4] building the host runtime: scons -C {REPO_ROOT} build_dir={build}", flush=True)
    with progress.step("building the host runtime (scons)"):
        subprocess.run([scons, "-C", str(REPO_ROOT), "-Q", "-s", f"build_dir={build}", f"-j{os.cpu_count() or 2}"],
                       check=True)
    aoti_run = build / "cpu-gcc-release" / "dist" / "bin" / "aoti-run"
    work = build / "demo" / args.example
    pt2 = work / f"{args.example}.pt2"
    print(f"[2/4] exporting example:{args.example} with torch -> {pt2}", flush=True)
    ns = argparse.Namespace(model=f"example:{args.example}", output=str(pt2), weights=args.weights,
                            build_dir=str(build), save_inputs=str(work), quiet=getattr(args, "quiet", False))
    main_export.main(ns)
    lib = build / "cpu-gcc-release" / "dist" / "lib" / "libaoti_host.so"
    print(f"[3/4] verifying it in the host it will load in: aoti-toolchain verify --host {lib} {pt2}", flush=True)
    with progress.step("verifying the package"):
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


def register(sub) -> None:
    d = sub.add_parser("demo", help="build the runtime, export a built-in example, run it, compare with eager")
    d.add_argument("--example", default="mlp", help="the built-in example to export (toolchain/examples.py; default mlp)")
    d.add_argument("--weights", choices=("embedded", "blob"), default="embedded",
                   help="weights inside the plugin .so (embedded) or in a separate blob in the package (blob)")
    d.add_argument("--build-dir", default=str(REPO_ROOT / "build"),
                   help="where the runtime is built and the example exported (default: this checkout's build/)")
    d.add_argument("--tolerance", type=float, default=1e-5,
                   help="largest absolute error against eager PyTorch that passes (default 1e-5)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr (the steps still print)")
    d.set_defaults(func=main)
