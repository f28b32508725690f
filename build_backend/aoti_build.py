"""The in-tree PEP 517 backend of aoti-toolchain (pyproject.toml: backend-path = ["build_backend"]).

build_wheel runs the project's own SCons build (SConstruct, the variant given by the config settings) and
assembles a platform wheel from what it installed into build/<variant>/dist:

    toolchain/                     the Python package (spec, profiles, schemas: every file it has)
    toolchain/_data/templates/     the codegen templates (templates/ in the source tree)
    toolchain/_host/               lib/libaoti_host.so, bin/aoti-run, include/aoti_host/, manifest.json,
                                   triton/aoti_toolchain/ (the Triton backend and the runtime beside it)
    toolchain/runtime/_aoti_fastrun.abi3.so
                                   the Python module's compiled per-call path (CPU wheel; SCons skips it,
                                   with a note, without numpy or Python.h)
    aoti_toolchain_cuda/_host/     the same for the CUDA runtime (the aoti-toolchain-cuda distribution)

The wheel is tagged py3-none-linux_<arch>: the runtime and aoti-run are loaded with ctypes and exec'ed, not
imported, and the one extension module, _aoti_fastrun, is built on CPython's stable ABI (3.10 and later) and
optional (toolchain.runtime takes its ctypes path where it cannot be imported), so any Python 3 works.
`auditwheel repair` then vendors OpenBLAS, Sleef and libgomp and gives it the manylinux tag it proves
(docs/packaging.md). build_sdist packs the files git knows (or, from an sdist,
the same list again); build_editable points a .pth file at the source tree and builds nothing.

Config settings (pip --config-settings KEY=VALUE, or python -m build -C):
    dist=cpu|cuda      which distribution: aoti-toolchain (default) or aoti-toolchain-cuda
    build-dir=DIR      SCons' build_dir (default: build/ of the source tree; $AOTI_WHEEL_BUILD_DIR too)
    jobs=N             SCons -j (default: the CPU count)
Standard library only (plus tomli before Python 3.11): it must run in an isolated build environment
whose only extra requirements are the SCons build's own: SCons, jinja2 and numpy (whose headers build
_aoti_fastrun).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import stat
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the build requirement tomli covers it
    import tomli as tomllib

ROOT = Path.cwd()
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "_host", "_data"}
# What an sdist carries when there is no git to ask (building an sdist from an unpacked sdist).
_SDIST_TOP = ("pyproject.toml", "SConstruct", "README.md", "noxfile.py", "build_backend", "toolchain", "runtime",
              "templates", "examples", "docs", "tests", "bench", ".ci", ".gitignore", "deploy", ".dockerignore")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: reproducible wheels


class BackendError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------- metadata

def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def version() -> str:
    """The one version: toolchain.__version__ (the runtime's build_info.h reads the same)."""
    text = (ROOT / "toolchain" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        raise BackendError("toolchain/__init__.py has no __version__ = \"...\" line")
    return m.group(1)


def _dist_kind(config_settings) -> str:
    kind = (config_settings or {}).get("dist", "cpu")
    if kind not in ("cpu", "cuda"):
        raise BackendError(f"config setting dist={kind!r}: choose cpu (aoti-toolchain) or cuda (aoti-toolchain-cuda)")
    return kind


def _name(kind: str) -> str:
    return "aoti-toolchain" if kind == "cpu" else "aoti-toolchain-cuda"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata_text(kind: str) -> str:
    project = _pyproject()["project"]
    ver = version()
    lines = ["Metadata-Version: 2.1", f"Name: {_name(kind)}", f"Version: {ver}"]
    if kind == "cpu":
        lines.append(f"Summary: {project['description']}")
        lines.append(f"Requires-Python: {project['requires-python']}")
        lines.append(f"License: {project['license']['text']}")
        lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
        for extra, deps in project.get("optional-dependencies", {}).items():
            lines.append(f"Provides-Extra: {extra}")
            lines += [f"Requires-Dist: {_with_marker(d, extra)}" for d in deps]
        readme = (ROOT / project["readme"]).read_text(encoding="utf-8")
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme
    cuda = _pyproject().get("tool", {}).get("aoti-build", {}).get("cuda-requires", [])
    lines.append("Summary: The CUDA build of the aoti-toolchain host runtime (libaoti_host.so with CUDA, aoti-run)")
    lines.append(f"Requires-Python: {project['requires-python']}")
    lines.append(f"License: {project['license']['text']}")
    lines.append(f"Requires-Dist: aoti-toolchain=={ver}")
    lines += [f"Requires-Dist: {d}" for d in cuda]
    return "\n".join(lines) + "\n"


def _with_marker(req: str, extra: str) -> str:
    if ";" in req:
        spec, marker = req.split(";", 1)
        return f"{spec.strip()}; ({marker.strip()}) and extra == \"{extra}\""
    return f"{req}; extra == \"{extra}\""


def _entry_points(kind: str) -> str:
    if kind != "cpu":
        return ""
    scripts = _pyproject()["project"].get("scripts", {})
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())


def _dist_info(kind: str) -> str:
    return f"{_normalized(_name(kind))}-{version()}.dist-info"


# ---------------------------------------------------------------------------------------------- the build

def _settings(config_settings) -> tuple[Path, int]:
    cs = config_settings or {}
    build_dir = Path(cs.get("build-dir") or os.environ.get("AOTI_WHEEL_BUILD_DIR") or ROOT / "build")
    jobs = int(cs.get("jobs") or os.cpu_count() or 2)
    return build_dir.resolve(), jobs


def run_scons(kind: str, config_settings) -> Path:
    """Build the runtime of `kind` with the project's SConstruct; returns its dist/ folder (with manifest.json)."""
    build_dir, jobs = _settings(config_settings)
    variant = "cpu-gcc-release" if kind == "cpu" else "cuda-gcc-release"
    dist = build_dir / variant / "dist"
    cmd = [sys.executable, "-m", "SCons", "-C", str(ROOT), "-Q", f"-j{jobs}", f"build_dir={build_dir}",
           f"cuda={'on' if kind == 'cuda' else 'off'}", str(dist), *(["python-module"] if kind == "cpu" else [])]
    print("aoti_build: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        raise BackendError(f"the SCons build of the runtime failed (exit {proc.returncode}): {' '.join(cmd)}")
    for need in ("lib/libaoti_host.so", "bin/aoti-run", "manifest.json"):
        if not (dist / need).is_file():
            raise BackendError(f"the SCons build left no {dist / need}")
    return dist


def _source_files(*tops: str) -> list[str]:
    """Files under `tops` that git tracks or would track (untracked but not ignored); without git, every
    file but caches. Sorted POSIX paths relative to the source root."""
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                               "--", *tops], capture_output=True, check=True)
        found = [p for p in proc.stdout.decode().split("\0") if p and (ROOT / p).is_file()]
        if found or (ROOT / ".git").exists():
            return sorted(set(found))
    except (OSError, subprocess.CalledProcessError):
        pass
    out = []
    for top in tops:
        base = ROOT / top
        if base.is_file():
            out.append(top)
            continue
        for dirpath, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
            rel = Path(dirpath).relative_to(ROOT)
            out += [(rel / f).as_posix() for f in files if not f.endswith((".pyc", ".pyo"))]
    return sorted(out)


# ---------------------------------------------------------------------------------------------- wheel

class _Wheel:
    def __init__(self, path: Path, dist_info: str) -> None:
        self.path = path
        self.dist_info = dist_info
        self.records: list[tuple[str, str, str]] = []
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        zi = zipfile.ZipInfo(arcname, date_time=_EPOCH)
        zi.external_attr = ((stat.S_IFREG | mode) & 0xFFFF) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(zi, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append((arcname, f"sha256={digest}", str(len(data))))

    def add_file(self, arcname: str, path: Path) -> None:
        mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
        self.add(arcname, path.read_bytes(), mode)

    def close(self) -> None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows(self.records)
        w.writerow((f"{self.dist_info}/RECORD", "", ""))
        zi = zipfile.ZipInfo(f"{self.dist_info}/RECORD", date_time=_EPOCH)
        zi.external_attr = ((stat.S_IFREG | 0o644) & 0xFFFF) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(zi, buf.getvalue())
        self.zf.close()


def _platform_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", sysconfig.get_platform())


def _write_wheel(wheel_directory: str, kind: str, tag: str, fill) -> str:
    name = f"{_normalized(_name(kind))}-{version()}-{tag}.whl"
    out = Path(wheel_directory) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{name}.partial")
    dist_info = _dist_info(kind)
    wheel = _Wheel(tmp, dist_info)
    try:
        fill(wheel)
        wheel.add(f"{dist_info}/METADATA", metadata_text(kind).encode())
        root_is_purelib = "true" if tag.endswith("-any") else "false"
        wheel.add(f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: aoti_build {version()}\n"
                                         f"Root-Is-Purelib: {root_is_purelib}\nTag: {tag}\n").encode())
        eps = _entry_points(kind)
        if eps:
            wheel.add(f"{dist_info}/entry_points.txt", eps.encode())
        wheel.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return name


#: What a runtime tree (build/<variant>/dist) puts into the wheel: the runtime, aoti-run, the C API headers and
#: the Triton backend's directory (triton/aoti_toolchain/: `aoti-toolchain triton-backend-dir` prints its parent).
HOST_TREE_TOPS = ("lib", "bin", "include", "triton")


def _add_host_tree(wheel: _Wheel, dist: Path, prefix: str) -> None:
    for top in HOST_TREE_TOPS:
        for path in sorted((dist / top).rglob("*")):
            if path.is_file() and not path.is_symlink():
                wheel.add_file(f"{prefix}/{path.relative_to(dist).as_posix()}", path)
    wheel.add_file(f"{prefix}/manifest.json", dist / "manifest.json")


#: The compiled per-call path of toolchain.runtime (runtime/python/fastrun.c), as SCons builds it.
FASTRUN = "_aoti_fastrun.abi3.so"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    kind = _dist_kind(config_settings)
    dist = run_scons(kind, config_settings)
    tag = f"py3-none-{_platform_tag()}"

    def fill(wheel: _Wheel) -> None:
        if kind == "cpu":
            for rel in _source_files("toolchain"):
                parts = Path(rel).parts
                if _SKIP_DIRS & set(parts[1:-1]) or rel.endswith((".pyc", ".pyo")):
                    continue
                wheel.add_file(rel, ROOT / rel)
            for rel in _source_files("templates"):
                wheel.add_file(f"toolchain/_data/{rel}", ROOT / rel)
            _add_host_tree(wheel, dist, "toolchain/_host")
            # The Python module's compiled per-call path, on CPython's stable ABI (one file for every CPython
            # the wheel installs into); toolchain.runtime uses it with the wheel's own runtime. SCons skips it
            # (with a note) without numpy or Python.h; the ctypes path then serves alone.
            fastrun = dist.parent / "python" / FASTRUN
            if fastrun.is_file():
                wheel.add_file(f"toolchain/runtime/{FASTRUN}", fastrun)
            else:
                print(f"aoti_build: note: {fastrun} was not built: the wheel's Python module takes its ctypes path",
                      file=sys.stderr)
        else:
            wheel.add("aoti_toolchain_cuda/__init__.py",
                      b'"""The CUDA build of the aoti-toolchain host runtime: _host/ holds libaoti_host.so and '
                      b'aoti-run\n(toolchain.hostlib finds it for device cuda)."""\n')
            _add_host_tree(wheel, dist, "aoti_toolchain_cuda/_host")

    return _write_wheel(wheel_directory, kind, tag, fill)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """The source tree on sys.path through a .pth file; the runtime comes from the checkout's SCons build."""
    kind = _dist_kind(config_settings)
    if kind != "cpu":
        raise BackendError("an editable install exists only for aoti-toolchain (dist=cpu)")

    def fill(wheel: _Wheel) -> None:
        wheel.add("__editable__.aoti_toolchain.pth", (str(ROOT) + "\n").encode())

    return _write_wheel(wheel_directory, kind, "py3-none-any", fill)


def _prepare_metadata(metadata_directory, config_settings) -> str:
    kind = _dist_kind(config_settings)
    d = Path(metadata_directory) / _dist_info(kind)
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(metadata_text(kind), encoding="utf-8")
    eps = _entry_points(kind)
    if eps:
        (d / "entry_points.txt").write_text(eps, encoding="utf-8")
    return d.name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


# ---------------------------------------------------------------------------------------------- sdist

def build_sdist(sdist_directory, config_settings=None):
    """aoti_toolchain-<version>.tar.gz: PKG-INFO and the source files, under one folder; builds the same
    wheels (dist=cpu and dist=cuda) as the checkout."""
    stem = f"aoti_toolchain-{version()}"
    out = Path(sdist_directory) / f"{stem}.tar.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    files = [f for f in _source_files(*_SDIST_TOP) if not f.startswith(("build/", "dist/"))]
    try:
        import gzip

        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
            def add(name: str, data: bytes, mode: int) -> None:
                ti = tarfile.TarInfo(f"{stem}/{name}")
                ti.size, ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = len(data), mode, 0, 0, 0, "", ""
                tf.addfile(ti, io.BytesIO(data))

            add("PKG-INFO", metadata_text("cpu").encode(), 0o644)
            for rel in files:
                path = ROOT / rel
                add(rel, path.read_bytes(), 0o755 if os.stat(path).st_mode & 0o111 else 0o644)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out.name
