"""Prove before shipping that a plugin will load in a given host on a given target.

API: ``verify_paths(paths, host=None, profile="host", strict=False) -> Report``; ``report.exit_code``.
The SCons build, the release pipeline and ``aoti-toolchain verify`` all go through it.
"""

from __future__ import annotations

from pathlib import Path

from toolchain.elf.reader import ElfError, ElfFile, parse_elf, read_elf
from toolchain.elf.resolve import Loaded, Resolver
from toolchain.errors import InputError
from toolchain.spec import load_spec
from toolchain.verify import checks
from toolchain.verify.profiles import DEFAULT_PROFILE, load_profile
from toolchain.verify.report import FileResult, Report

__all__ = ["verify_paths", "verify_buffer", "make_context", "Report", "DEFAULT_PROFILE", "elf_members"]


def elf_members(path: Path) -> list[tuple[str, ElfFile | ElfError]]:
    """(name, parsed ELF or the error) for a file, or for each .so inside a .pt2 package."""
    if not path.exists():
        msg = f"{path}: no such file"
        raise InputError(msg, fix="check the path")
    if path.is_dir():
        msg = f"{path}: is a directory"
        raise InputError(msg, fix="pass the plugin .so or .pt2 files inside it")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        return _pt2_members(path)
    try:
        return [(str(path), read_elf(path))]
    except ElfError as exc:
        return [(str(path), exc)]


def _pt2_members(path: Path) -> list[tuple[str, ElfFile | ElfError]]:
    """Each .so member of a package, read with the runtime's rules (toolchain.pt2): a package the runtime
    would refuse, or a member whose CRC-32 does not match its bytes, is one 'malformed' finding."""
    from toolchain.elf.reader import MalformedError, NotElfError
    from toolchain.pt2 import PackageError, open_package

    try:
        with open_package(path) as pkg:
            names = [n for n in pkg.members if n.endswith(".so")]
            if not names:
                return [(str(path), NotElfError(f"{path}: a zip without any .so member: not a .pt2 with a plugin",
                                                fix="pass a .pt2 written by aoti_compile_and_package"))]
            out: list[tuple[str, ElfFile | ElfError]] = []
            for n in names:
                label = f"{path}!{n}"
                data = pkg.read(n)
                try:
                    out.append((label, parse_elf(data, label)))
                except ElfError as exc:
                    out.append((label, exc))
            return out
    except PackageError as exc:
        return [(str(path), MalformedError(exc.args[0], fix=exc.fix or "re-export the package"))]


_SPEC_CACHE: dict[tuple, object] = {}


def _spec():
    """load_spec(), re-read only when a spec file changes (a build or release verifies many files)."""
    from toolchain.spec import SPEC_DIR

    key = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(SPEC_DIR.glob("*.toml")))
    if key not in _SPEC_CACHE:
        _SPEC_CACHE.clear()
        _SPEC_CACHE[key] = load_spec()
    return _SPEC_CACHE[key]


def verify_paths(paths, host: str | Path | None = None, profile: str = DEFAULT_PROFILE, strict: bool = False,
                 kind: str = "auto") -> Report:
    """Verify plugins (and hosts) against a target profile, optionally inside a given host."""
    prof = load_profile(profile)
    ctx = checks.Context(spec=_spec(), profile=prof, resolver=Resolver())  # type: ignore[arg-type]
    report = Report(profile=prof.to_json(), host=str(host) if host else None, strict=strict)
    if host is not None:
        hpath = Path(host)
        members = elf_members(hpath)
        helf = members[0][1]
        if isinstance(helf, ElfError):
            msg = f"--host {hpath}: cannot be read: {helf}"
            raise InputError(msg, fix="pass the host program or runtime library (e.g. dist/lib/libaoti_host.so)")
        ctx.host = Loaded(str(hpath), helf, None)
        ctx.host_scope = ctx.resolver.scope(helf, str(hpath)).objects
        report.files.append(_check_one(str(hpath), helf, ctx, "host"))
    for p in paths:
        for label, elf in elf_members(Path(p)):
            if isinstance(elf, ElfError):
                res = FileResult(label, "unreadable")
                res.add(elf.rule, str(elf).split("\n  fix: ")[0], elf.fix or "rebuild or copy the file again")
                report.files.append(res)
            else:
                report.files.append(_check_one(label, elf, ctx, kind))
    return report


def make_context(profile: str = DEFAULT_PROFILE) -> checks.Context:
    """A context to reuse across many `verify_buffer` calls (the fuzz test: libraries are read once)."""
    return checks.Context(spec=_spec(), profile=load_profile(profile), resolver=Resolver())  # type: ignore[arg-type]


def verify_buffer(data: bytes, label: str, ctx: checks.Context, kind: str = "auto") -> FileResult:
    """Verify ELF bytes held in memory; unreadable input becomes a not-elf/truncated/malformed finding."""
    try:
        elf = parse_elf(data, label)
    except ElfError as exc:
        res = FileResult(label, "unreadable")
        res.add(exc.rule, str(exc).split("\n  fix: ")[0], exc.fix or "rebuild or copy the file again")
        return res
    return _check_one(label, elf, ctx, kind)


def _check_one(label: str, elf: ElfFile, ctx: checks.Context, kind: str) -> FileResult:
    k = checks.classify(elf) if kind == "auto" else kind
    res = FileResult(label, k, machine=f"{elf.machine}/{elf.elf_class}")
    if not checks.check_arch(elf, res, ctx):
        return res
    checks.check_static(elf, label, k, res, ctx)
    reported = checks.check_versions(elf, res, ctx)
    checks.check_libraries(elf, res, ctx)
    if ctx.host is not None and k == "host" and label == ctx.host.path:
        saved, ctx.host, ctx.host_scope = (ctx.host, ctx.host_scope), None, None
        try:
            checks.check_resolution(elf, label, k, res, ctx, reported)
        finally:
            ctx.host, ctx.host_scope = saved
    else:
        checks.check_resolution(elf, label, k, res, ctx, reported)
    if k == "host":
        checks.check_host(elf, label, res, ctx)
    checks.check_mixed_config(label, res)
    return res
