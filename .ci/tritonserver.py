"""Fetch NVIDIA Triton Inference Server 2.51 for the Triton backend's tests: the nvidia-pytriton 0.7.0 wheel
ships the server itself (pytriton/tritonserver/bin/tritonserver, its libraries in nvidia_pytriton.libs/, the
python backend), so `pip download --no-deps` and an unzip give a server that runs on CPU, with no container.

    .venv/bin/python .ci/tritonserver.py [DEST]        (default build/tritonserver; .ci/setup runs it)
    python3 .ci/tritonserver.py DEST --wheel WHEEL       (a machine without network: the wheel taken along)

The wheel is unpacked into DEST as it is (the server finds its libraries through its RPATH,
$ORIGIN/../../../nvidia_pytriton.libs), never installed into a Python environment or imported: the project's
tests start DEST/pytriton/tritonserver/bin/tritonserver as a program. Idempotent: a DEST that already holds
this version's server is left alone; a new one is unpacked beside it and renamed into place, so an
interrupted run leaves no half tree. Standard library only."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REQUIREMENT = "nvidia-pytriton==0.7.0"
DIST_INFO = "nvidia_pytriton-0.7.0.dist-info"  # what marks a complete tree of this version
SERVER = Path("pytriton", "tritonserver", "bin", "tritonserver")


def complete(dest: Path) -> bool:
    return (dest / DIST_INFO).is_dir() and os.access(dest / SERVER, os.X_OK)


def unpack(wheel: Path, into: Path) -> None:
    """Extract `wheel` into `into`, keeping each member's permission bits less the umask (zipfile drops them:
    the server and its libraries must stay executable). Members may not leave `into`."""
    root = into.resolve()
    umask = os.umask(0o022)
    os.umask(umask)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            target = (into / info.filename).resolve()
            if root != target and root not in target.parents:
                msg = f"{wheel}: member {info.filename!r} would land outside {into}"
                raise SystemExit(msg)
            zf.extract(info, into)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(target, (mode & ~umask) | stat.S_IRUSR)


def main(argv: list[str]) -> int:
    wheel = None
    if "--wheel" in argv:
        i = argv.index("--wheel")
        wheel = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    dest = Path(argv[0] if argv else "build/tritonserver")
    if complete(dest):
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tritonserver.", dir=dest.parent) as tmp:
        wheels = Path(tmp, "wheel")
        if wheel is not None:
            wheels.mkdir()
            shutil.copyfile(wheel, wheels / wheel.name)
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                            "--only-binary=:all:", REQUIREMENT, "-d", str(wheels)], check=True)
        found = sorted(wheels.glob("nvidia_pytriton-*.whl"))
        if len(found) != 1:
            msg = f"pip download {REQUIREMENT} left {[p.name for p in found]} in {wheels}, not one wheel"
            raise SystemExit(msg)
        tree = Path(tmp, "tree")
        unpack(found[0], tree)
        if not complete(tree):
            msg = f"{found[0].name}: no executable {SERVER} in it"
            raise SystemExit(msg)
        if dest.exists():  # another version, or a broken tree
            shutil.rmtree(dest)
        tree.rename(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
