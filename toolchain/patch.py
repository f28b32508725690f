"""`aoti-toolchain patch`: repair what is repairable, proven before anything is written.

Operations are planned first (no-ops dropped, contradictions refused), applied once to a temp file beside
the destination, then the result must pass `verify` (no error) and an RTLD_NOW dlopen probe in a
subprocess; only then is it renamed over the destination. The original is kept (`--in-place` keeps
`PLUGIN.orig`). Patching an already patched file plans nothing and changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from toolchain.atomic import replacing
from toolchain.elf.reader import ElfError, read_elf
from toolchain.elf.resolve import Resolver
from toolchain.errors import InputError, LoadError, UsageError


@dataclass(frozen=True)
class Op:
    kind: str  # add-needed | clear-execstack | set-runpath | rebind-unique
    arg: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.arg}".strip()


class PatchRefused(LoadError):
    """The patched result fails verify or the dlopen probe: nothing was written."""


def plan(path: Path, requested: list[Op]) -> list[Op]:
    """The operations that change something, in a fixed order; refuses contradictory ones."""
    try:
        elf = read_elf(path)
    except ElfError as exc:
        msg = f"cannot patch {path}: {exc}".split("\n  fix: ")[0]
        raise InputError(msg, fix="patch a readable ELF plugin; for a .pt2, patch the .so inside it "
                         "(unzip, patch, zip again)") from None
    runpaths = {op.arg for op in requested if op.kind == "set-runpath"}
    if len(runpaths) > 1:
        msg = f"contradictory operations: set the RUNPATH to {' and '.join(sorted(runpaths))}"
        raise UsageError(msg, fix="give one --set-runpath (or drop --fix's proposal by passing the one you want)")
    out: list[Op] = []
    added: list[str] = []
    for op in requested:
        if op.kind == "add-needed":
            if not op.arg or "\0" in op.arg:
                raise UsageError("--add-needed needs a library name", fix="e.g. --add-needed libstdc++.so.6")
            if op.arg in elf.needed or op.arg in added:
                continue
            if Resolver().find(op.arg, elf, str(path)) is None:
                msg = f"--add-needed {op.arg}: the loader would not find {op.arg} for {path}"
                raise UsageError(msg, fix="install it, give a SONAME from the system, or also --set-runpath")
            added.append(op.arg)
        elif op.kind == "clear-execstack":
            if not elf.exec_stack or any(o.kind == "clear-execstack" for o in out):
                continue
            if elf.gnu_stack is None:
                msg = f"{path}: no PT_GNU_STACK segment: the stack flag cannot be cleared in place"
                raise UsageError(msg, fix="relink with -Wl,-z,noexecstack")
            out.append(op)
        elif op.kind == "set-runpath":
            if ":".join(elf.runpath) == op.arg and not elf.rpath:
                continue
            if not any(o.kind == "set-runpath" for o in out):
                out.append(op)
        elif op.kind == "rebind-unique":
            if any(o.kind == "rebind-unique" for o in out) or not any(
                    s.defined and s.binding == "GNU_UNIQUE" for s in elf.symbols):
                continue
            from toolchain.elf import patcher

            safe, _kept = patcher.unique_split(path.read_bytes(), str(path))
            if safe:  # nothing safe to rebind: nothing to change (docs/verify.md, "Unloading")
                out.append(op)
        else:
            raise UsageError(f"unknown patch operation {op.kind!r}")
    return [Op("add-needed", a) for a in added] + out


def fix_ops(path: Path, host: str | None, profile: str) -> list[Op]:
    """Every repair `verify` proposes for this file."""
    from toolchain.verify import verify_paths

    report = verify_paths([path], host=host, profile=profile)
    ops = []
    for f in report.findings:
        if f.fix_op and f.file == str(path):
            ops.append(Op(f.fix_op[0], f.fix_op[1]))
    return ops


def apply(src: Path, dst: Path, ops: list[Op]) -> None:
    from toolchain.elf import patcher

    needed = [o.arg for o in ops if o.kind == "add-needed"]
    runpath = next((o.arg for o in ops if o.kind == "set-runpath"), None)
    if needed or runpath is not None:
        patcher.apply_lief(src, dst, needed, runpath)
        src = dst
    if any(o.kind == "clear-execstack" for o in ops):
        patcher.clear_execstack(src, dst)
        src = dst
    if any(o.kind == "rebind-unique" for o in ops):
        patcher.rebind_unique(src, dst)
    if not dst.exists():
        shutil.copyfile(src, dst)


def probe_library(host: str | None, default: Path | None) -> Path | None:
    """The shared library the dlopen probe loads RTLD_GLOBAL first (it supplies the shims): the host when it
    is a library, else `default` (the caller's runtime library, e.g. toolchain.hostlib.find_library())."""
    if host is not None:
        h = read_elf(host)
        if not h.is_program:
            return Path(host)
    return default if default is not None and default.is_file() else None


_PROBE = r"""
import ctypes, os, sys
if sys.argv[1]:
    ctypes.CDLL(sys.argv[1], mode=os.RTLD_GLOBAL | os.RTLD_NOW)
try:
    ctypes.CDLL(sys.argv[2], mode=os.RTLD_LOCAL | os.RTLD_NOW)
except OSError as exc:
    print(exc, file=sys.stderr)
    sys.exit(4)
print("loaded")
"""


def probe(path: Path, host_lib: Path | None, timeout: float = 120.0) -> tuple[bool, str]:
    """dlopen(path, RTLD_NOW) in a fresh process (static initializers run; a crash stays there)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(host_lib or ""), str(path)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"the dlopen probe did not finish in {timeout:.0f} s"
    if proc.returncode == 0:
        return True, ""
    why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit status {proc.returncode}"
    return False, why


def patch_file(path: Path, ops: list[Op], *, out: Path | None, in_place: bool, host: str | None = None,
               profile: str = "host", use_fix: bool = False, do_probe: bool = True,
               probe_lib: Path | None = None) -> tuple[list[Op], Path | None]:
    """Plan, apply to a temp file, prove, then rename. Returns (the applied plan, the written file or None).
    The dlopen probe loads `probe_lib` RTLD_GLOBAL first (the library that supplies the shims; see
    probe_library)."""
    from toolchain.report import to_text
    from toolchain.verify import verify_paths

    if out is not None and in_place:
        raise UsageError("-o/--output and --in-place contradict each other", fix="give one of them")
    if out is None and not in_place:
        raise UsageError("no destination", fix="give -o OUT (the original stays as it is) or --in-place "
                         "(the original is kept as PLUGIN.orig)")
    if not path.is_file():
        raise InputError(f"{path}: no such file", fix="check the path")
    if out is not None and out.resolve() == path.resolve():
        raise UsageError(f"-o {out} is the input itself", fix="use --in-place to replace it (keeps PLUGIN.orig)")
    requested = list(ops) + (fix_ops(path, host, profile) if use_fix else [])
    steps = plan(path, requested)
    dest = path if in_place else out
    assert dest is not None
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not steps:
        if out is not None:
            _atomic_copy(path, out)
            return [], out
        return [], None
    with replacing(dest, suffix=".patch") as tmp:
        tmp.unlink()  # apply() writes a new file there
        apply(path, tmp, steps)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        report = verify_paths([tmp], host=host, profile=profile)
        errors = [f for f in report.findings if f.severity == "error" and f.file == str(tmp)]
        if errors:
            msg = (f"{path}: after {', '.join(map(str, steps))} the result still fails verify, so nothing was "
                   f"written:\n{to_text(report)}")
            raise PatchRefused(msg, fix="repair the remaining errors at build time; patch can't")
        if do_probe:
            ok, why = probe(tmp, probe_lib)
            if not ok:
                msg = f"{path}: the patched file does not dlopen (RTLD_NOW) in a fresh process: {why}; nothing written"
                raise PatchRefused(msg, fix="pass --host with the runtime library that supplies its shims")
        if in_place:
            orig = path.with_name(path.name + ".orig")
            if not orig.exists():
                os.link(path, orig) if _same_fs(path, orig) else shutil.copy2(path, orig)
    return steps, dest


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b.parent).st_dev


def _atomic_copy(src: Path, dst: Path) -> None:
    with replacing(dst) as tmp:
        shutil.copy2(src, tmp)
