"""The torch-version matrix (`nox -s torch_versions`): packages written by each torch release from 2.11 up, run by
this runtime against that torch's eager outputs, and the shims each release's plugins import.

    python -m toolchain.torch_versions [--versions 2.11.0 2.14.1 ...] [--root build/torch-versions]
        [--host build/cpu-gcc-release/dist] [--record toolchain/torch_versions.json]
        [--markdown docs/torch-versions.md] [--min 2.11] [--jobs 2] [--render-only]

For each release (default: the newest patch of every minor release from --min up that `pip index versions torch`
lists; the torch of this environment stands for its own release), in a venv of its own under ROOT/venvs/<ver>:
toolchain/torch_versions_corpus.py exports the corpus with that torch's `aoti_compile_and_package` (the configs a
user passes to ship a plugin without libtorch: toolchain.export.inductor_configs) and saves eager outputs; then
every case runs through `aoti-run` and through the Python module (toolchain.runtime) of HOST and is compared with
them, and each plugin's imports and exports are read from its ELF. The record (versions, packages, verdicts,
imports, entry points) is written as JSON (toolchain/torch_versions.json: inspect and the default test run read
it) and as the table in docs/torch-versions.md.

PyPI's Linux wheels are CUDA builds. They run on CPU, but `import torch` loads libtorch_cuda.so and so the CUDA
libraries it links. A venv gets the torch wheel without its dependencies, then the pure-Python ones and only the
CUDA libraries that import loads (see reduced_requirements): no triton (GPU kernels only), no cuda-bindings, no
cuSOLVER or NVTX (opened on first use; NVRTC still comes, as cuBLAS's dependency). Everything (wheels, pip's cache, venvs, inductor's cache and TMPDIR,
packages) stays under ROOT, never in /tmp or the default build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.atomic import write_text

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).with_name("torch_versions_corpus.py")
DEFAULT_RECORD = Path(__file__).with_name("torch_versions.json")
DEFAULT_DOC = REPO / "docs" / "torch-versions.md"
RTOL, ATOL = 1e-4, 1e-5

# The cuda-toolkit extras whose libraries libtorch_cpu/libtorch_cuda list in DT_NEEDED (import fails without them);
# cuSOLVER (libtorch_cuda_linalg.so), NVRTC (libcaffe2_nvrtc.so) and NVTX are opened on first use only (NVRTC is
# installed anyway: cuBLAS's wheel requires it).
IMPORT_CUDA_LIBS = frozenset({"cudart", "cublas", "cufft", "cufile", "cupti", "curand", "cusparse", "nvjitlink"})
NOT_FOR_CPU = frozenset({"triton", "cuda-bindings"})  # GPU kernel compiler, CUDA's Python bindings


class MatrixError(Exception):
    """A release that cannot be installed or exported here; its row says why (status: the row's status)."""

    def __init__(self, msg: str, status: str = "not installable here") -> None:
        super().__init__(msg)
        self.status = status


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def newest_per_minor(listed: list[str], minimum: str) -> list[str]:
    """From `pip index versions` output's versions: the newest final release of each minor >= minimum (no local
    builds such as 2.13.0+cpu, no pre-releases)."""
    best: dict[tuple[int, ...], str] = {}
    for v in listed:
        if not re.fullmatch(r"\d+\.\d+\.\d+", v) or _vtuple(v)[:2] < _vtuple(minimum)[:2]:
            continue
        key = _vtuple(v)[:2]
        if key not in best or _vtuple(v) > _vtuple(best[key]):
            best[key] = v
    return [best[k] for k in sorted(best)]


def pip_versions(minimum: str) -> list[str]:
    """The torch releases pip lists here, newest patch per minor from `minimum`."""
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch"], capture_output=True, text=True)
    m = re.search(r"Available versions:\s*(.+)", p.stdout)
    if p.returncode != 0 or m is None:
        msg = f"pip index versions torch failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}"
        raise MatrixError(msg)
    return newest_per_minor([v.strip() for v in m.group(1).split(",")], minimum)


def reduced_requirements(metadata: str) -> list[str]:
    """torch's Requires-Dist (its wheel's METADATA text) less what a CPU-only run never loads (module docstring)."""
    from packaging.requirements import Requirement

    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        if req.name in NOT_FOR_CPU:
            continue
        if req.name == "cuda-toolkit":
            req.extras = set(req.extras) & IMPORT_CUDA_LIBS
        req.marker = None
        out.append(str(req))
    return out


@dataclass
class Env:
    """Where one release's torch runs: its python, how it got there and what that cost."""

    version: str
    python: Path
    source: str
    seconds: float = 0.0
    bytes: int = 0
    torch: str = ""


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


def _pip(python: str | Path, *args: str, env: dict[str, str], log: Path) -> None:
    with open(log, "a") as f:
        f.write(f"\n$ pip {' '.join(args)}\n")
        f.flush()
        p = subprocess.run([str(python), "-m", "pip", *args], stdout=f, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        msg = f"pip {args[0]} failed ({p.returncode}): {' | '.join(tail)} (log: {log})"
        raise MatrixError(msg)


def ensure_env(version: str, root: Path) -> Env:
    """A venv with torch==version under root/venvs (made once; a finished one is marked by .aoti-torch), or this
    environment when its torch is that release."""
    import importlib.metadata as md

    try:
        here = md.version("torch")
    except md.PackageNotFoundError:
        here = ""
    if here and _vtuple(here) == _vtuple(version):
        return Env(version, Path(sys.executable), "this environment", torch=here)
    venv = root / "venvs" / version
    python = venv / "bin" / "python"
    mark = venv / ".aoti-torch"
    if mark.exists():
        info = json.loads(mark.read_text())
        return Env(version, python, info["source"], info["seconds"], info["bytes"], info["torch"])
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"install-{version}.log"
    env = {**os.environ, "PIP_CACHE_DIR": str(root / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = time.monotonic()
    wheels = root / "wheels" / version
    if not list(wheels.glob("torch-*.whl")):
        _pip(sys.executable, "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels), f"torch=={version}",
             env=env, log=log)
    wheel = next(wheels.glob("torch-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(python, "install", "--no-deps", str(wheel), env=env, log=log)
    _pip(python, "install", *reduced_requirements(meta), "numpy", env=env, log=log)
    p = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if p.returncode != 0:
        msg = f"import torch fails in {venv}: {p.stderr.strip()[-400:]}"
        raise MatrixError(msg)
    e = Env(version, python, f"PyPI wheel {wheel.name} ({wheel.stat().st_size // 2**20} MiB), imported on CPU",
            round(time.monotonic() - start, 1), _dir_bytes(venv), p.stdout.strip())
    write_text(mark, json.dumps({"source": e.source, "seconds": e.seconds, "bytes": e.bytes, "torch": e.torch}))
    return e


def export_corpus(env: Env, out: Path, root: Path) -> dict[str, Any]:
    """The corpus exported by env's torch into out (toolchain/torch_versions_corpus.py); its manifest. An export
    already in out is reused when it was made by the same corpus script, configs and torch (out/key.txt)."""
    import hashlib

    from toolchain.export import inductor_configs

    configs = json.dumps(inductor_configs("embedded"), sort_keys=True)
    key = hashlib.sha256(CORPUS.read_bytes() + configs.encode() + env.torch.encode()).hexdigest()
    if (out / "manifest.json").is_file() and (out / "key.txt").is_file() and (out / "key.txt").read_text() == key:
        return json.loads((out / "manifest.json").read_text())
    scratch = root / "cache" / env.version
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    run_env = {**os.environ, "TMPDIR": str(scratch / "tmp"), "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor")}
    shutil.rmtree(out, ignore_errors=True)
    log = root / "logs" / f"export-{env.version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        # -I: isolated (no PYTHONPATH, no script directory on sys.path, where toolchain/inspect.py would shadow
        # the standard library's inspect): the script imports torch and numpy only, from its own venv
        p = subprocess.run([str(env.python), "-I", str(CORPUS), str(out), configs], stdout=f,
                           stderr=subprocess.STDOUT, env=run_env)
    manifest = out / "manifest.json"
    if p.returncode != 0 or not manifest.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        msg = f"the corpus export failed ({p.returncode}): {tail} (log: {log})"
        raise MatrixError(msg, "export failed")
    write_text(out / "key.txt", key)
    return json.loads(manifest.read_text())


@dataclass
class PackageResult:
    name: str
    exported: bool
    error: str = ""
    aoti_run: str = "not run"  # "pass" or the first failure
    python: str = "not run"
    cases: int = 0
    imports: list[str] = field(default_factory=list)
    entry_points: list[str] = field(default_factory=list)
    cpu_isa: str = ""
    sleef: bool = False

    @property
    def passed(self) -> bool:
        return self.exported and self.aoti_run == "pass" and self.python == "pass"


def plugin_facts(pt2: Path) -> tuple[list[str], list[str], dict[str, Any], bool]:
    """(aoti_torch_* imports, AOTInductor* exports, torch's *_metadata.json, whether it calls Sleef) of the
    package's plugin."""
    from toolchain.elf.reader import ElfError
    from toolchain.verify import elf_members

    imports: set[str] = set()
    exports: set[str] = set()
    sleef = False
    for _label, elf in elf_members(pt2):
        if isinstance(elf, ElfError):
            raise MatrixError(f"{pt2}: {elf}")
        for s in elf.symbols:
            if not s.defined and s.name.startswith("aoti_torch_"):
                imports.add(s.name)
            sleef |= not s.defined and s.name.startswith("Sleef_")
        exports |= {n for n in elf.defined() if n.startswith("AOTInductor")}
    meta: dict[str, Any] = {}
    with zipfile.ZipFile(pt2) as zf:
        for n in zf.namelist():
            if n.endswith(".wrapper_metadata.json") or (n.endswith("_metadata.json") and not meta):
                meta = json.loads(zf.read(n))
    return sorted(imports), sorted(exports), meta, sleef


def _compare(got: list[Any], want: list[Any]) -> str:
    """"pass", or what differs first."""
    import numpy as np

    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {j}: {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "fc":
            if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
                return f"output {j}: max abs difference {float(np.max(np.abs(g - w))):.3g}"
        elif not np.array_equal(g, w):
            return f"output {j}: {int(np.sum(g != w))} elements differ"
    return "pass"


def run_package(name: str, entry: dict[str, Any], folder: Path, host: Path) -> PackageResult:
    """Every case of one exported package through aoti-run and the Python module, against eager."""
    import numpy as np

    from toolchain import runtime

    pt2 = folder / entry["pt2"]
    try:
        imports, exports, meta, sleef = plugin_facts(pt2)
    except MatrixError as exc:
        return PackageResult(name, True, error=str(exc))
    res = PackageResult(name, True, imports=imports, entry_points=exports, cpu_isa=str(meta.get("AOTI_CPU_ISA", "")),
                        sleef=sleef, cases=len(entry["cases"]))
    if name == "vectorised" and not sleef:
        res.error = f"not vectorised: the plugin calls no Sleef function (AOTI_CPU_ISA {res.cpu_isa or 'none'})"
    aoti_run = host / "bin" / "aoti-run"
    lib = host / "lib" / "libaoti_host.so"
    verdicts = {"aoti_run": "pass", "python": "pass"}
    out = folder / f"{name}.aoti-run"
    for k, case in enumerate(entry["cases"]):
        ins = [folder / f"{name}.case{k}.in{i}.npy" for i in range(case["inputs"])]
        want = [np.load(folder / f"{name}.case{k}.out{j}.npy") for j in range(case["outputs"])]
        shutil.rmtree(out, ignore_errors=True)
        args = [str(aoti_run), str(pt2), *[a for i in ins for a in ("-i", str(i))], "-o", str(out), "--quiet"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            why = f"case {k}: aoti-run returned {p.returncode}: {p.stderr.strip()[-300:]}"
        else:
            why = _compare([np.load(out / f"output_{j}.npy") for j in range(case["outputs"])
                            if (out / f"output_{j}.npy").exists()], want)
            why = why if why == "pass" else f"case {k}: {why}"
        if verdicts["aoti_run"] == "pass" and why != "pass":
            verdicts["aoti_run"] = why
        try:
            with runtime.load(pt2, library_path=lib) as prog:
                got = prog.run([np.load(i) for i in ins])
            why = _compare(list(got), want)
            why = why if why == "pass" else f"case {k}: {why}"
        except Exception as exc:  # recorded in the row: any failure of our runtime is the result being measured
            why = f"case {k}: {type(exc).__name__}: {str(exc)[-300:]}"
        if verdicts["python"] == "pass" and why != "pass":
            verdicts["python"] = why
    shutil.rmtree(out, ignore_errors=True)
    res.aoti_run, res.python = verdicts["aoti_run"], verdicts["python"]
    return res


_PROTO = re.compile(r"AOTI_TORCH_EXPORT ([^;{}()]*?\b(aoti_torch_\w+)\s*\()")


def declared_shims(python: Path) -> list[str]:
    """Every aoti_torch_* function torch's own shim headers declare (torch/include/.../aoti_torch/**.h)."""
    p = subprocess.run([str(python), "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                       capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ""})
    base = Path(p.stdout.strip()) / "include" / "torch" / "csrc" / "inductor" / "aoti_torch"
    names: set[str] = set()
    for h in base.rglob("*.h"):
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", h.read_text(errors="replace"), flags=re.S)
        names |= {m.group(2) for m in _PROTO.finditer(re.sub(r"\s+", " ", text))}
    return sorted(names)


@dataclass
class Prepared:
    """A release installed and its corpus exported (or the row saying why not)."""

    version: str
    row: dict[str, Any]
    manifest: dict[str, Any] | None = None
    python: Path | None = None


def prepare(version: str, root: Path) -> Prepared:
    """Install the release and export the corpus with it (the slow part: threads run several at once)."""
    row: dict[str, Any] = {"version": version}
    try:
        env = ensure_env(version, root)
        row.update(torch=env.torch, source=env.source, install_seconds=env.seconds, venv_bytes=env.bytes)
        manifest = export_corpus(env, root / "runs" / version, root)
    except MatrixError as exc:
        row.update(status=exc.status, error=str(exc))
        return Prepared(version, row)
    row.update(torch=manifest["torch"],
               export_seconds=round(sum(m["seconds"] for m in manifest["models"].values()), 1))
    return Prepared(version, row, manifest, env.python)


_OTHER_DEVICES = re.compile(r"aoti_torch_\w*(xpu|mps|sycl)\w*")


def runtime_references(python: Path, declared: list[str]) -> list[str]:
    """The shims the release's plugin runtime code can call: every declared aoti_torch_* name its aoti_runtime
    headers and inductor's aoti_runtime sources mention (the CPU and CUDA paths of model_base.h, model_container.h,
    interface.cpp, ...; XPU and MPS left out). A plugin imports those its configuration compiles in, so this is
    what CUDA plugins and optional features may import, beyond what the corpus measured."""
    p = subprocess.run([str(python), "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                       capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ""})
    torch_dir = Path(p.stdout.strip())
    known = set(declared)
    found: set[str] = set()
    for folder in (torch_dir / "include" / "torch" / "csrc" / "inductor" / "aoti_runtime",
                   torch_dir / "_inductor" / "codegen" / "aoti_runtime"):
        for f in sorted(folder.glob("*")) if folder.is_dir() else []:
            if f.suffix in (".h", ".cpp"):
                found |= set(re.findall(r"\baoti_torch_\w+", f.read_text(errors="replace")))
    return sorted(n for n in found & known if not _OTHER_DEVICES.fullmatch(n))


def measure(p: Prepared, root: Path, host: Path, spec_names: set[str]) -> dict[str, Any]:
    """One row of the record: every package of a prepared release run, its imports read."""
    row = p.row
    if p.manifest is None or p.python is None:
        return row
    folder = root / "runs" / p.version
    results = [run_package(n, e, folder, host) for n, e in sorted(p.manifest["models"].items())]
    results += [PackageResult(n, False, error=err) for n, err in sorted(p.manifest["errors"].items())]
    imports = sorted({s for r in results for s in r.imports})
    row.update(
        status="pass" if results and all(r.passed and not r.error for r in results) else "fail",
        packages={r.name: {"exported": r.exported, "error": r.error, "aoti_run": r.aoti_run, "python": r.python,
                           "cases": r.cases, "imports": r.imports, "entry_points": r.entry_points,
                           "cpu_isa": r.cpu_isa, "sleef": r.sleef} for r in results},
        imports=imports, missing=[s for s in imports if s not in spec_names],
        entry_points=sorted({s for r in results for s in r.entry_points}))
    row["declared"] = declared_shims(p.python)
    refs = runtime_references(p.python, row["declared"])
    row.update(runtime_refs=refs, runtime_refs_missing=[s for s in refs if s not in spec_names])
    return row


def compact(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The record as committed: each release's declared shims only where releases differ (`declares_not`: what
    other measured releases declare and this one does not), so the file stays small and reviewable."""
    declared = [set(r["declared"]) for r in rows if "declared" in r]
    union = set().union(*declared) if declared else set()
    out = []
    for r in rows:
        r = dict(r)
        if "declared" in r:
            r["declared_count"] = len(r["declared"])
            r["declares_not"] = sorted(union - set(r.pop("declared")))
        out.append(r)
    return {"schema": 1, "generated_by": "nox -s torch_versions (python -m toolchain.torch_versions)",
            "tolerance": {"rtol": RTOL, "atol": ATOL}, "releases": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m toolchain.torch_versions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="*", help="releases to measure (default: what pip lists, newest per minor)")
    ap.add_argument("--min", default="2.11", help="the oldest minor release measured (default 2.11)")
    ap.add_argument("--root", type=Path, default=REPO / "build" / "torch-versions")
    ap.add_argument("--host", type=Path, default=REPO / "build" / "cpu-gcc-release" / "dist")
    ap.add_argument("--record", type=Path, default=DEFAULT_RECORD)
    ap.add_argument("--markdown", type=Path, default=DEFAULT_DOC)
    ap.add_argument("--render-only", action="store_true",
                    help="measure nothing: write --markdown from the existing --record (after editing the renderer)")
    ap.add_argument("--jobs", type=int, default=2, help="releases installed and exported at once (default 2)")
    ap.add_argument("--need", type=int, default=3, help="exit 1 unless at least this many releases pass")
    args = ap.parse_args(argv)
    from toolchain.spec import load_spec
    from toolchain.torch_window import Record, render_markdown

    if args.render_only:
        rec = Record.load(args.record)
        if rec is None:
            print(f"error: {args.record} is missing or unreadable: measure first (without --render-only)",
                  file=sys.stderr)
            return 3
        write_text(args.markdown, render_markdown(rec))
        return 0
    if not (args.host / "bin" / "aoti-run").exists():
        print(f"error: {args.host}/bin/aoti-run is missing: build the runtime first (scons -j2)", file=sys.stderr)
        return 3
    try:
        versions = args.versions or pip_versions(args.min)
    except MatrixError as exc:
        print(f"error: {exc}; name the releases with --versions", file=sys.stderr)
        return 3
    spec_names = {s.name for s in load_spec().shims}
    print(f"torch {', '.join(versions)}: installing and exporting the corpus ({args.jobs} at a time) ...", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        prepared = list(pool.map(lambda v: prepare(v, args.root), versions))
    rows = []
    for p in prepared:
        rows.append(measure(p, args.root, args.host, spec_names))
        r = rows[-1]
        print(f"torch {p.version}: {r['status']}" + (f" ({r['error']})" if r.get("error") else ""),
              flush=True)
    record = compact(rows)
    write_text(args.record, json.dumps(record, indent=1, sort_keys=True) + "\n")
    doc = render_markdown(Record.from_json(record))
    write_text(args.markdown, doc)
    print(doc)
    passed = sum(r["status"] == "pass" for r in rows)
    if passed < args.need:
        print(f"error: {passed} release(s) pass, {args.need} needed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
