"""Fetch the headers the CUDA variant's cuDNN attention is compiled with: cuDNN 9's C headers (cudnn.h,
cudnn_graph.h, ...) from the nvidia-cudnn-cu13 wheel and NVIDIA's header-only C++ graph API (cudnn_frontend.h
and its tree) from the nvidia-cudnn-frontend wheel, both MIT/NVIDIA-licensed headers used at compile time only.

    .venv/bin/python .ci/cudnn_headers.py [DEST]                  (default build/cudnn-headers; .ci/setup runs it)
    python3 .ci/cudnn_headers.py DEST --wheel WHEEL [--wheel WHEEL]  (a machine without network: wheels taken along)

`pip download --no-deps` fetches each wheel into a temporary directory; only its include/ files are extracted,
into DEST/cudnn/include and DEST/frontend/include, and the wheel is deleted (the cuDNN wheel is 366 MB of
libraries the build never needs: the runtime opens cuDNN at run time, docs/scons.md). Nothing is installed
into a Python environment. Idempotent: a DEST whose stamp names these versions is left alone; a new tree is
extracted beside it and renamed into place, so an interrupted run leaves no half tree. SCons finds the result
(toolchain/scons/cudnn.py). Standard library only."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# The pins: the cuDNN headers are those of the GPU machine's torch 2.11 (nvidia-cudnn-cu13 9.19); the frontend
# is the release the runtime's attention is written against.
CUDNN = "nvidia-cudnn-cu13==9.19.0.56"
FRONTEND = "nvidia-cudnn-frontend==1.32.0"
STAMP = ".versions"
# (requirement, the include/ folder inside its wheel, where it goes under DEST)
PARTS = ((CUDNN, "nvidia/cudnn/include/", "cudnn/include"), (FRONTEND, "include/", "frontend/include"))


def complete(dest: Path) -> bool:
    stamp = dest / STAMP
    return (stamp.is_file() and stamp.read_text().split() == [CUDNN, FRONTEND]
            and (dest / "cudnn/include/cudnn_graph.h").is_file() and (dest / "frontend/include/cudnn_frontend.h").is_file())


def extract_includes(wheel: Path, prefix: str, into: Path) -> int:
    """Extract the members of `wheel` under `prefix` into `into` (keeping their tree below it); their count."""
    root = into.resolve()
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            target = (into / info.filename[len(prefix):]).resolve()
            if root not in target.parents:
                msg = f"{wheel.name}: member {info.filename} would land outside {into}"
                raise SystemExit(msg)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += 1
    return count


def download(requirement: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", requirement, "-d", str(into)], check=True)
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(into.glob(f"{name}-*.whl"))
    if not found:
        msg = f"pip download {requirement} left no {name}-*.whl in {into}"
        raise SystemExit(msg)
    return found[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", default="build/cudnn-headers", type=Path)
    parser.add_argument("--wheel", action="append", type=Path, default=[],
                        help="a wheel taken along (nvidia-cudnn-cu13, nvidia-cudnn-frontend) instead of pip download")
    args = parser.parse_args(argv)
    dest: Path = args.dest
    if complete(dest):
        print(f"cudnn_headers: {dest} already holds {CUDNN} and {FRONTEND} headers")
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        for requirement, prefix, sub in PARTS:
            name = requirement.split("==")[0].replace("-", "_")
            given = [w for w in args.wheel if w.name.startswith(name + "-")]
            if not given:
                print(f"setup: fetching {requirement}'s headers (pip download, then only include/ is kept) into "
                      f"{dest / sub}", flush=True)
            with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:  # the wheel is deleted with it
                wheel = given[0] if given else download(requirement, Path(tmp))
                n = extract_includes(wheel, prefix, fresh / sub)
            if n == 0:
                msg = f"{wheel.name} has no {prefix} headers"
                raise SystemExit(msg)
            print(f"cudnn_headers: {n} headers of {wheel.name} in {dest / sub}")
        (fresh / STAMP).write_text(f"{CUDNN}\n{FRONTEND}\n")
        if dest.exists():
            shutil.rmtree(dest)
        fresh.rename(dest)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
