"""verify's checks of files, packages and runtime trees (the API is toolchain.verify's: see there)."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.elf.reader import ElfError, ElfFile, MalformedError, parse_elf, read_elf
from toolchain.elf.resolve import Loaded, Resolver
from toolchain.errors import InputError, UsageError
from toolchain.findings import FileResult, Report
from toolchain.spec import load_spec
from toolchain.verify import checks
from toolchain.verify.profiles import DEFAULT_PROFILE, load_profile

__all__ = ["verify_paths", "verify_buffer", "make_context", "check_elf", "Report", "DEFAULT_PROFILE", "elf_members",
           "default_host", "proxy_ops"]


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def default_host() -> Path:
    """The host a plugin will load in by default: this project's runtime library (toolchain.hostlib finds it
    as toolchain.runtime does). UsageError when there is none: a verdict against no host would differ from
    what loads (Sleef_*, aoti_torch_* and the runtime's preloads come from it)."""
    from toolchain.hostlib import LIBRARY_ENV, find_library

    lib = find_library()
    if lib is not None and not lib.is_file():
        msg = f"${LIBRARY_ENV}={lib}: not a file, so there is no runtime library to assume as the host"
        raise UsageError(msg, fix=f"point {LIBRARY_ENV} at a built libaoti_host.so, unset it to use this checkout's "
                         "build, or pass --host PATH / --host none")
    if lib is None:
        from toolchain.hostlib import REPO_ROOT, candidates

        msg = ("no host given and this project's runtime library is not built (looked for $"
               f"{LIBRARY_ENV} and {', '.join(_short(c, REPO_ROOT) for c in candidates()[:3])}, ...)")
        raise UsageError(msg, fix=f"build it (scons -C {REPO_ROOT}), or pass --host PATH (the host program or "
                         "runtime library the plugin will load in), or --host none to check the plugin standalone")
    return lib


def elf_members(path: str | os.PathLike[str]) -> list[tuple[str, ElfFile | ElfError]]:
    """(name, parsed ELF or the error) for a file, or for each .so inside a .pt2 package (names: the path as
    str(Path(path)) gives it)."""
    path = str(Path(path))
    if not os.path.exists(path):
        msg = f"{path}: no such file"
        raise InputError(msg, fix="check the path")
    if os.path.isdir(path):
        msg = f"{path}: is a directory"
        raise InputError(msg, fix="pass the plugin .so or .pt2 files inside it")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        return _pt2_members(Path(path))
    if magic != b"\x7fELF" and path.lower().endswith(".pt2"):
        from toolchain.pt2 import FIX_NOT_ZIP

        # Named as a package but neither a zip nor an ELF object (a renamed plugin .so is still read as one):
        # the runtime refuses it with the same words and bad input's exit code (runtime/src/host/package.cpp).
        empty = ": the file is empty" if not magic else ""
        return [(path, _PackageMalformed(f"{path}: not a .pt2 package (not a zip archive{empty})",
                                         fix=FIX_NOT_ZIP))]
    try:
        return [(str(path), read_elf(path))]
    except ElfError as exc:
        return [(str(path), exc)]


class _PackageMalformed(MalformedError):
    """A package the runtime would refuse: the malformed rule's fix for packages."""

    fix_variant = "package"


def _pt2_members(path: Path) -> list[tuple[str, ElfFile | ElfError]]:
    """Each .so member of a package, read with the runtime's rules (toolchain.pt2): a package the runtime
    would refuse, or a member whose CRC-32 does not match its bytes, is one 'malformed' finding."""
    from toolchain.elf.reader import NotElfError
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
        return [(str(path), _PackageMalformed(exc.args[0], fix=exc.fix or "re-export the package"))]


def proxy_ops(path: Path) -> dict[str, tuple[str, ...]]:
    """Per .so member label, the ATen ops its plugin calls through torch's proxy executor, as the package's
    <stem>.json (torch's serialized extern nodes) names them; {} where there is none or it is unreadable
    (the missing-shim finding then says so without names)."""
    import json

    from toolchain.pt2 import PackageError, open_package

    out: dict[str, tuple[str, ...]] = {}
    try:
        with open_package(path) as pkg:
            for n in (m for m in pkg.members if m.endswith(".so")):
                sidecar = n[:-3] + ".json"
                if sidecar not in pkg.members:
                    continue
                try:
                    doc = json.loads(pkg.read(sidecar))
                    targets = [str(node["node"]["target"]) for node in doc.get("nodes", [])]
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
                out[f"{path}!{n}"] = tuple(dict.fromkeys(t for t in targets if t))
    except PackageError:
        return {}
    return out


_SPEC_CACHE: dict[tuple, object] = {}


def _spec():
    """load_spec(), re-read only when a spec file changes (a build or release verifies many files)."""
    from toolchain.spec import SPEC_DIR

    key = tuple((p.name, st.st_mtime_ns, st.st_size) for p in sorted(SPEC_DIR.glob("*.toml")) for st in (p.stat(),))
    if key not in _SPEC_CACHE:
        _SPEC_CACHE.clear()
        _SPEC_CACHE[key] = load_spec()
    return _SPEC_CACHE[key]


def verify_paths(paths, host: str | Path | None = None, profile: str = DEFAULT_PROFILE, strict: bool = False,
                 kind: str = "auto", host_source: str | None = None, background=False,
                 check_host: bool = True) -> Report:
    """Verify plugins (and hosts) against a target profile, optionally inside a given host. Every .so member
    of a .pt2 is checked as a plugin, and the package's own entries (contract, constant layouts) as the runtime
    reads them. `host_source` says in the report where the host came from (e.g. "default: this project's
    runtime"). `background`: decode the files' code in forked children while the rest is checked
    (toolchain.verify.scans; the CLI's choice: a library caller's process may hold threads fork cannot copy):
    True starts them here, a BackgroundScans from toolchain.verify.scans.start() uses those already running
    (this call closes them). The report is the same either way. `check_host` False: the host is another
    project's program (Triton's server for its backend), whose global scope binds the files' imports but which
    is not itself checked as a host of the shims."""
    scans = None
    if background is True:
        from toolchain.verify.scans import start

        scans = start(paths, kind)
    elif background:
        scans = background
    try:
        ctx = make_context(profile)
        if scans is not None and ctx.profile.target.cpu_isa is None:  # no CPU rule: nothing to decode
            scans.close()
            scans = None
        return _verify(paths, host, ctx, strict, kind, host_source, scans, check_host)
    finally:
        if scans is not None:
            scans.close()


def _verify(paths, host, ctx: checks.Context, strict: bool, kind: str, host_source: str | None, scans,
            check_host: bool = True) -> Report:
    prof = ctx.profile
    report = Report(profile=prof.to_json(), host=str(host) if host else None, strict=strict,
                    host_source=host_source or ("--host" if host else "none: each file checked standalone"))
    if host is not None:
        hpath = str(Path(host))
        members = elf_members(hpath)
        helf = members[0][1]
        if isinstance(helf, ElfError):
            msg = f"--host {hpath}: cannot be read: {helf}"
            raise InputError(msg, fix="pass the host program or runtime library (e.g. dist/lib/libaoti_host.so)")
        ctx.host = Loaded(hpath, helf, None)
        ctx.host_scope = ctx.resolver.scope(helf, hpath).objects
        if check_host:
            report.files.append(check_elf(hpath, helf, ctx, "host"))
    for p in paths:
        path = str(Path(p))  # the file's label in the report
        if _is_runtime_tree(path):
            report.files.extend(_check_runtime_tree(Path(path), ctx, kind))
            continue
        members = elf_members(path)
        in_package = _is_zip(path) and any(label.startswith(f"{path}!") for label, _ in members)
        if in_package:
            report.files.append(_check_package(Path(path)))
            ctx.proxy_ops.update(proxy_ops(Path(path)))
        for label, elf in members:
            if isinstance(elf, ElfError):
                report.files.append(_unreadable(label, elf))
            else:
                # inside a package every .so is a plugin: the runtime loads it as one
                report.files.append(check_elf(label, elf, ctx, "plugin" if in_package else kind))
        _check_targets(path, in_package, report, prof, members, scans)
        if scans is not None:
            scans.drop(path)  # a scan not asked for (no plugin, wrong-arch) stops holding a CPU
    return report


def _check_targets(path: str, in_package: bool, report: Report, prof, members, scans) -> None:
    """The target rules (cpu-isa-too-new, cuda-*) on the plugins just checked: they read code and GPU images,
    which the ELF reader does not keep (toolchain.verify.target_checks). `scans`: the code scans running in
    the background (toolchain.verify.scans), or None."""
    from toolchain.verify import target_checks

    def scan_of(label: str):
        return None if scans is None else scans.take(label)

    results = {r.path: r for r in report.files if r.kind == "plugin" and r.path.startswith(str(path))}
    if not results:
        return
    if not in_package:
        res = results.get(str(path))
        if res is not None and not any(f.rule == "wrong-arch" for f in res.findings):
            elf = dict(members).get(str(path))  # as parsed for the checks: its DT_NEEDED
            needed = elf.needed if isinstance(elf, ElfFile) else read_elf(path).needed
            target_checks.check_file(path, str(path), res, prof, needed, scan_of(str(path)))
        return
    from toolchain.pt2 import PackageError, open_package

    try:
        with open_package(path) as pkg:
            gpu = {f"{path}!{n}": pkg.read(n) for n in pkg.members if n.endswith(target_checks.GPU_SUFFIXES)}
            for n in pkg.members:
                res = results.get(f"{path}!{n}")
                if res is None or any(f.rule == "wrong-arch" for f in res.findings):
                    continue
                data = pkg.read(n)
                target_checks.check_plugin_target(data, res.path, res, prof, gpu, parse_elf(data, res.path).needed,
                                                  scan_of(res.path))
                gpu = {}  # a package's cubins are counted with its (one) plugin
    except (PackageError, ElfError):
        return  # already reported as malformed by the package and ELF checks


def _is_runtime_tree(path: str) -> bool:
    """A `scons dist` archive (aoti-host-*.tar.gz) or an unpacked one (a folder with manifest.json)."""
    if not os.path.isdir(path) and not os.path.basename(path).startswith("aoti-host-"):
        return False  # neither (toolchain.distpack's tests, without importing it)
    from toolchain.distpack import MANIFEST, is_runtime_archive

    p = Path(path)
    return (p.is_dir() and (p / MANIFEST).is_file()) or is_runtime_archive(p)


def _check_runtime_tree(path: Path, ctx: checks.Context, kind: str) -> list[FileResult]:
    """The tree against its manifest (dist-manifest-mismatch), then every ELF file in it; an archive is
    unpacked into a private temporary folder first (tarfile's data filter: nothing lands outside it)."""
    import tempfile

    from toolchain.distpack import ManifestError, check_tree, safe_extract

    with tempfile.TemporaryDirectory(prefix="aoti-verify-dist-") as tmp:
        res = FileResult(str(path), "package")
        if path.is_dir():
            root = path
        else:
            try:
                root = safe_extract(path, Path(tmp))
            except ManifestError as exc:
                res.add("dist-manifest-mismatch", str(exc))
                return [res]
        manifest, problems = check_tree(root)
        for prob in problems:
            where = prob.path if path.is_dir() else f"{path}!{Path(prob.path).relative_to(root)}" \
                if Path(prob.path).is_relative_to(root) else str(path)
            res.add("dist-manifest-mismatch", f"{where}: {prob.message}")
        out = [res]
        if manifest is None:
            return out
        for rel in sorted(manifest["files"]):
            file = root / rel
            if not file.is_file() or file.is_symlink():
                continue
            with open(file, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            label = str(file)  # the real path: RUNPATH $ORIGIN and DT_NEEDED resolve from it
            try:
                out.append(check_elf(label, read_elf(file), ctx, kind))
            except ElfError as exc:
                out.append(_unreadable(label, exc))
        return out


def _is_zip(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _check_package(path: Path) -> FileResult:
    """The package's entries as the runtime reads them (toolchain.verify.package)."""
    from toolchain.pt2 import open_package
    from toolchain.verify import package

    res = FileResult(str(path), "package")
    try:
        with open_package(path) as pkg:
            findings = package.check_package(path, package.package_members(pkg))
    except package.READ_ERRORS as exc:
        res.add("malformed", f"{path}: not a readable .pt2 (zip): {exc}", fix_variant="package")
        return res
    for f in findings:
        res.add(f.rule, f.message, fix_variant=f.fix_variant)
    return res


def make_context(profile: str = DEFAULT_PROFILE) -> checks.Context:
    """The rules' context: the spec, the profile and a Resolver, which reads the libraries the host profile
    reads too (each file parsed once). Reused across many `verify_buffer` calls (the fuzz test) and by the
    post-link step."""
    resolver = Resolver()
    prof = load_profile(profile, read=resolver.read)
    return checks.Context(spec=_spec(), profile=prof, resolver=resolver)  # type: ignore[arg-type]


def verify_buffer(data: bytes, label: str, ctx: checks.Context, kind: str = "auto") -> FileResult:
    """Verify ELF bytes held in memory; unreadable input becomes a not-elf/truncated/malformed finding."""
    try:
        elf = parse_elf(data, label)
    except ElfError as exc:
        return _unreadable(label, exc)
    return check_elf(label, elf, ctx, kind)


def _unreadable(label: str, exc: ElfError) -> FileResult:
    res = FileResult(label, "unreadable")
    res.add(exc.rule, str(exc).split("\n  fix: ")[0], fix_variant=exc.fix_variant)
    return res


def check_elf(label: str, elf: ElfFile, ctx: checks.Context, kind: str = "auto") -> FileResult:
    """Every rule for one parsed file: the one checks engine, run by verify and by the post-link step."""
    k = checks.classify(elf) if kind == "auto" else kind
    res = FileResult(label, k, machine=f"{elf.machine}/{elf.elf_class}")
    if not checks.check_arch(elf, res, ctx):
        return res
    if k == "plugin" and not checks.check_loadable(elf, res):
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
    if "!" not in label:  # a .pt2 member: plugins carry no records
        checks.check_mixed_config(elf, label, res, ctx)
    return res
