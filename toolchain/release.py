"""The release pipeline: `python -m toolchain.release` (what `nox -s release` runs).

1. a clean export of HEAD (`git archive`), so nothing uncommitted or ignored ships;
2. sdist and wheel built from that export (setuptools' PEP 517 backend, no network);
3. the host runtime built from that export with SCons, packed as a tarball;
4. every ELF artifact of the runtime and the example plugins (exported with torch) verified against the
   default profile, the plugins inside the built runtime as host; any error fails the release;
5. dist/SHA256SUMS and dist/release-report.json, written atomically; SHA256SUMS only when the release passes.
Exit codes: 0 released, 1 verification failed, 2 usage, 3 a step failed (the message names it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from toolchain.atomic import write_text
from toolchain.errors import InputError, ToolchainError, UsageError, exit_code

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANT = "cpu-gcc-release"


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


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def build_python(src: Path, out: Path) -> list[Path]:
    """sdist and wheel through setuptools' PEP 517 hooks, one process each (no network, no isolation)."""
    made = []
    for hook in ("build_sdist", "build_wheel"):
        with tempfile.TemporaryDirectory(prefix=f"{hook}-", dir=src.parent) as tmp:
            code = f"import sys; from setuptools import build_meta as b; print(b.{hook}(sys.argv[1]))"
            proc = _run([sys.executable, "-c", code, tmp], hook, cwd=src)
            name = proc.stdout.strip().splitlines()[-1].strip()
            built = Path(tmp) / name
            if not built.is_file():
                raise StepError(f"{hook} reported {name} but wrote no such file", fix="check the build log")
            dest = out / name
            os.replace(built, dest) if os.stat(tmp).st_dev == os.stat(out).st_dev else shutil.move(built, dest)
            made.append(dest)
    return made


def build_runtime(src: Path, build_dir: Path, jobs: int) -> Path:
    scons = shutil.which("scons") or str(Path(sys.executable).with_name("scons"))
    _run([scons, "-C", str(src), "-Q", f"-j{jobs}", f"build_dir={build_dir}"], "scons build of the runtime")
    dist = build_dir / VARIANT / "dist"
    if not (dist / "lib" / "libaoti_host.so").is_file():
        raise StepError(f"the SCons build produced no {dist / 'lib/libaoti_host.so'}", fix="check the build log")
    return dist


def export_examples(names: list[str], out: Path, build_dir: Path) -> list[Path]:
    plugins = []
    for name in names:
        pt2 = out / f"{name}.pt2"
        _run([sys.executable, "-m", "toolchain", "export", f"example:{name}", "-o", str(pt2), "--build-dir",
              str(build_dir)], f"export example:{name}", cwd=REPO_ROOT,
             env={**os.environ, "TMPDIR": str(build_dir / "torch-tmp")})
        plugins.append(pt2)
    return plugins


def release(out: Path, *, examples: list[str], plugins: list[Path], profile: str, jobs: int,
            work: Path | None = None) -> int:
    from toolchain.report.formats import to_json, to_text
    from toolchain.verify import verify_paths

    started = time.time()
    steps: list[dict] = []
    report: dict = {"schema_version": 1, "profile": profile, "steps": steps, "artifacts": [], "verify": []}
    out.mkdir(parents=True, exist_ok=True)
    (out / "SHA256SUMS").unlink(missing_ok=True)  # a stale one must never vouch for this run
    work = work or Path(tempfile.mkdtemp(prefix="aoti-release-"))
    verdict_ok = True

    def step(name: str, fn):
        t0 = time.time()
        print(f"[release] {name} ...", flush=True)
        result = fn()
        steps.append({"step": name, "seconds": round(time.time() - t0, 1)})
        return result

    def check(label: str, paths: list[Path], host: Path | None) -> None:
        nonlocal verdict_ok
        rep = verify_paths(paths, host=host, profile=profile)
        sys.stdout.write(to_text(rep))
        report["verify"].append({"what": label, "report": to_json(rep)})
        if rep.exit_code != 0:
            verdict_ok = False
            raise VerifyFailed(f"{label}: verify {rep.verdict}: {rep.count('error')} error(s)")

    try:
        if plugins:
            step("verify the given plugins", lambda: check("given plugins", plugins, None))
        src = work / "src"
        report["commit"] = step("clean export of HEAD (git archive)", lambda: export_head(REPO_ROOT, src))
        artifacts = step("sdist and wheel", lambda: build_python(src, out))
        dist = step("build the runtime (scons)", lambda: build_runtime(src, work / "build", jobs))
        tarball = out / f"aoti-host-runtime-{report['commit'][:12]}-{VARIANT}.tar.gz"
        with tarfile.open(tarball, "w:gz") as tf:
            tf.add(dist, arcname=f"aoti-host-runtime-{VARIANT}")
        artifacts.append(tarball)
        # The Python runtime's extension module (_aoti_fastrun*.so) is left out: the interpreter that imports it
        # binds its Py* imports, so standalone it has unresolved symbols by design (tests import it).
        elves = sorted(p for p in dist.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)
                       and not p.name.startswith("_aoti_fastrun."))
        step("verify the runtime's ELF artifacts", lambda: check("runtime", elves, None))
        if examples:
            pt2s = step("export the example plugins", lambda: export_examples(examples, work / "plugins",
                                                                              work / "build"))
            step("verify the example plugins in the built runtime",
                 lambda: check("example plugins", pt2s, dist / "lib" / "libaoti_host.so"))
        report["artifacts"] = [{"file": a.name, "sha256": sha256(a), "bytes": a.stat().st_size} for a in artifacts]
    except VerifyFailed as exc:
        report["failed"] = str(exc)
    except (ToolchainError, OSError, subprocess.SubprocessError, tarfile.TarError) as exc:
        report["error"] = str(exc)
        verdict_ok = False
        print(f"[release] error: {exc}", file=sys.stderr)
    report["verdict"] = "pass" if verdict_ok else "fail"
    report["seconds"] = round(time.time() - started, 1)
    write_text(out / "release-report.json", json.dumps(report, indent=2) + "\n")
    if not verdict_ok:
        print(f"[release] FAILED; report: {out / 'release-report.json'} (no SHA256SUMS written)", file=sys.stderr)
        return exit_code("bad_input") if "error" in report else exit_code("failed")
    sums = "".join(f"{a['sha256']}  {a['file']}\n" for a in report["artifacts"])
    write_text(out / "SHA256SUMS", sums)
    print(f"[release] OK: {len(report['artifacts'])} artifacts, {out / 'SHA256SUMS'}, {out / 'release-report.json'}")
    return exit_code("ok")


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
    p.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    args = p.parse_args(argv)
    try:
        names = [n for n in args.examples.split(",") if n]
        unknown = [n for n in names if n not in EXAMPLES]
        if unknown:
            raise UsageError(f"unknown example(s) {', '.join(unknown)}", fix=f"choose from {', '.join(EXAMPLES)}")
        return release(args.out, examples=names, plugins=args.plugin, profile=args.profile, jobs=args.jobs,
                       work=args.work)
    except ToolchainError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
