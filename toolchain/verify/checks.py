"""The rules: one function per group of rules, each adding findings (file, symbol/version/entry point,
fix) to a FileResult. Symbols are bound as the loader binds them (toolchain.elf.resolve)."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolchain.elf.reader import ElfFile, Symbol, read_elf
from toolchain.elf.resolve import Loaded, Resolver, expand_origin, is_system_dir
from toolchain.findings import FileResult
from toolchain.spec import Provider, Spec, load_abi
from toolchain.verify.profiles import Profile, parse_version, vstr

if TYPE_CHECKING:
    from toolchain.torch_ops import TorchOp

ENTRIES_API = "AOTInductorModelContainerExtractConstantsMapEntries"
CXX_RUNTIME = "libstdc++.so.6"
_LIBTORCH_RE = re.compile(r"^lib(torch|torch_cpu|torch_cuda|torch_global_deps|c10|c10_cuda)(\.so|[_.-])")
_ARCH = {"x86_64": ("x86_64", 64), "aarch64": ("aarch64", 64), "i386": ("i386", 32)}


@dataclass
class Context:
    """What the checks share across files: spec, profile, resolver, host and build facts."""

    spec: Spec
    profile: Profile
    resolver: Resolver
    host: Loaded | None = None
    host_scope: list[Loaded] | None = None
    # Set by the post-link step of the SCons builders (toolchain/scons/checks.py):
    shim_groups: tuple[str, ...] | None = None  # the shim groups the variant's hosts export
    expected_config: dict[str, str] | None = None  # the variant's feature defines (mixed-config)
    variant: str | None = None
    build_runpath: frozenset[str] = frozenset()  # RUNPATH entries the build set: allowed in the build tree
    # Per package member: the ATen ops its plugin runs through torch's proxy executor (the <stem>.json
    # beside the .so in the package)
    proxy_ops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    interpreter: list[Loaded] | None = None  # interpreter_scope(), read once

    @property
    def shim_names(self) -> set[str]:
        return {s.name for s in self.spec.shims}


def classify(elf: ElfFile) -> str:
    defined = elf.defined()
    if any(n.startswith("AOTInductor") for n in defined):
        return "plugin"
    if any(n.startswith("aoti_torch_") for n in defined):
        return "host"
    if any(n.startswith("PyInit_") for n in defined):
        return "python-extension"
    return "library"


def interpreter_scope(ctx: Context) -> list[Loaded]:
    """What binds a CPython extension module's undefined symbols: the interpreter that imports it (this
    process's executable, and its DT_NEEDED closure, where a shared libpython exports the C API)."""
    if ctx.interpreter is None:
        exe = os.path.realpath(sys.executable)
        ctx.interpreter = ctx.resolver.scope(read_elf(exe), exe).objects
    return ctx.interpreter


def _short(names: list[str], limit: int = 6) -> str:
    s = ", ".join(names[:limit])
    return s + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def check_arch(elf: ElfFile, res: FileResult, ctx: Context) -> bool:
    want, bits = _ARCH.get(ctx.profile.machine, (ctx.profile.machine, 64))
    if elf.machine != want or elf.elf_class != bits:
        res.add("wrong-arch", f"{elf.machine} {elf.elf_class}-bit ELF, but profile {ctx.profile.name} targets {want} "
                f"{bits}-bit", fix_args={"machine": want})
        return False
    if ctx.host is not None and (elf.machine_id, elf.elf_class) != (ctx.host.elf.machine_id, ctx.host.elf.elf_class):
        res.add("wrong-arch", f"{elf.machine} {elf.elf_class}-bit, but the host {ctx.host.path} is "
                f"{ctx.host.elf.machine} {ctx.host.elf.elf_class}-bit", fix_variant="host")
        return False
    return True


DF_1_PIE = 0x08000000


def check_loadable(elf: ElfFile, res: FileResult) -> bool:
    """not-shared-object: dlopen loads only ET_DYN objects that are not position-independent executables
    ("cannot dynamically load executable" / "... position-independent executable"). False stops the checks:
    the rest would be about a file that never loads."""
    if elf.etype == "DYN" and not elf.flags_1 & DF_1_PIE:
        return True
    what = ("a position-independent executable (ET_DYN with DF_1_PIE)" if elf.etype == "DYN"
            else f"an ET_{elf.etype} file" if not elf.etype.startswith("ET_") else f"an {elf.etype} file")
    res.add("not-shared-object", f"is {what}, not a shared object: dlopen refuses to load it as a plugin")
    return False


def check_static(elf: ElfFile, path: str, kind: str, res: FileResult, ctx: Context) -> None:
    """Rules that need only the file itself."""
    if elf.exec_stack:
        why = "no PT_GNU_STACK" if elf.gnu_stack is None else "PT_GNU_STACK is RWE"
        refused = ctx.profile.exec_stack_refused
        res.add("exec-stack", f"asks for an executable stack ({why}); "
                + ("the target's glibc (>= 2.41) refuses to dlopen it" if refused else
                   "glibc 2.41 and later refuse to dlopen it, and it makes every thread stack executable"),
                severity="error" if refused else None, fix_op=("clear-execstack", ""))
    if elf.textrel:
        res.add("textrel", "has text relocations (DT_TEXTREL): code pages are written at load time, which "
                "SELinux and hardened kernels refuse")
    origin = os.path.dirname(os.path.abspath(path))
    for tag, entries in (("RUNPATH", elf.runpath), ("RPATH", elf.rpath)):
        for entry in entries:
            bad = None
            if entry.startswith(("$ORIGIN", "${ORIGIN}")):
                continue
            if not os.path.isabs(entry):
                bad = "a relative path, resolved against the process's working directory"
            elif not is_system_dir(entry):
                bad = "an absolute path outside the system library directories (the build machine's layout)"
            if bad:
                own = entry in ctx.build_runpath
                res.add("unsafe-runpath", f"{tag} entry {entry!r} is {bad}", library=entry,
                        severity="warning" if own else None, fix_variant="build-tree" if own else None,
                        fix_op=("set-runpath", _safe_runpath(elf, origin)))
    if kind == "plugin":
        for lib in elf.needed:
            if _LIBTORCH_RE.match(lib):
                res.add("libtorch-dependency", f"needs {lib}: the plugin was built against LibTorch, which a "
                        "LibTorch-free host does not have", library=lib)
    unique = [s.name for s in elf.symbols if s.defined and s.binding == "GNU_UNIQUE"]
    if (unique or elf.nodelete) and kind != "host":
        why = (f"{len(unique)} GNU_UNIQUE symbol(s) ({_short(unique, 3)}) make the loader mark it NODELETE"
               if unique else "DF_1_NODELETE is set")
        res.add("cannot-unload", f"can never be unloaded: {why}; dlclose returns 0 and the mapping stays",
                symbol=unique[0] if unique else None)
    if kind == "plugin":
        check_plugin_api(elf, res, ctx)


def _safe_runpath(elf: ElfFile, origin: str) -> str:
    keep = [e for e in elf.runpath or elf.rpath if e.startswith(("$ORIGIN", "${ORIGIN}"))]
    return ":".join(keep) or "$ORIGIN"


def check_plugin_api(elf: ElfFile, res: FileResult, ctx: Context) -> None:
    defined = elf.defined()
    exported = {n for n, syms in defined.items() if any(s.visibility in ("DEFAULT", "PROTECTED") for s in syms)}
    for ep in ctx.spec.entry_points:
        if ep.required and ep.name not in exported:
            res.add("missing-entry-point", f"does not export the required entry point {ep.name}",
                    entry_point=ep.name)
    if ENTRIES_API not in exported:
        res.add("no-entries-api", f"does not export {ENTRIES_API} (torch < 2.13): the host reads constants "
                "without it and loses cross-method weight sharing (each method loads its own weights), "
                "mutable-state sessions (NotSupported) and CUDA graphs (their constants can't be checked)",
                entry_point=ENTRIES_API)
    shims = sorted(n for n in defined if n.startswith("aoti_torch_"))
    for name in shims:
        res.add("exports-shim", f"defines {name}: opened RTLD_GLOBAL it would interpose the host's shim for "
                "every plugin loaded after it, and its own calls may bind to a different implementation", symbol=name)


def check_versions(elf: ElfFile, res: FileResult, ctx: Context) -> set[tuple[str, str]]:
    """symbol-version-too-new; returns the (symbol, version) pairs it reported."""
    worst: dict[str, list[Symbol]] = {}
    for s in elf.symbols:
        if s.defined or s.version is None:
            continue
        parsed = parse_version(s.version)
        if parsed is None:
            continue
        fam, ver = parsed
        limit = ctx.profile.max_versions.get(fam)
        if limit is not None and ver > limit:
            worst.setdefault(s.version, []).append(s)
    reported: set[tuple[str, str]] = set()
    for version, syms in sorted(worst.items(), key=lambda kv: parse_version(kv[0])):  # type: ignore[arg-type,return-value]
        fam, ver = parse_version(version)  # type: ignore[misc]
        names = [s.name for s in syms]
        res.add("symbol-version-too-new", f"{names[0]} needs {version}, newer than {fam}_"
                f"{vstr(ctx.profile.max_versions[fam])} of profile {ctx.profile.name}"
                + (f" ({len(names)} symbols need it: {_short(names, 4)})" if len(names) > 1 else ""),
                fix_args={"profile": ctx.profile.name}, symbol=names[0], version=version, library=syms[0].version_file)
        reported.update((n, version) for n in names)
    return reported


def check_libraries(elf: ElfFile, res: FileResult, ctx: Context) -> None:
    if ctx.profile.allowed is None:
        return
    for lib in elf.needed:
        if _LIBTORCH_RE.match(lib) or lib in ctx.profile.allowed:
            continue
        if any(e.startswith(("$ORIGIN", "${ORIGIN}")) for e in (elf.runpath or elf.rpath)):
            continue  # may be bundled beside it; missing-library decides
        if lib in ctx.profile.packages:
            res.add("library-not-allowed", f"needs {lib}, present on {ctx.profile.name} only with "
                    f"{ctx.profile.packages[lib]}", fix_variant="optional-package",
                    fix_args={"package": ctx.profile.packages[lib]}, severity="warning", library=lib)
        else:
            res.add("library-not-allowed", f"needs {lib}, which profile {ctx.profile.name} does not provide",
                    library=lib)


def _provider(name: str, providers: tuple[Provider, ...]) -> Provider | None:
    for p, (prefixes, exact, pattern) in _matchers(providers):
        if name.startswith(prefixes) or name in exact or (pattern is not None and pattern.match(name)):
            return p
    return None


def _is_cxx(prov: Provider | None) -> bool:
    return prov is not None and CXX_RUNTIME in prov.sonames


@functools.cache
def _matchers(providers: tuple[Provider, ...]) -> tuple[tuple[Provider, tuple], ...]:
    """Each provider with its patterns' matcher (_patterns), made once per spec's providers."""
    return tuple((p, _patterns(p.symbol_patterns)) for p in providers)


@functools.cache
def _patterns(patterns: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str], re.Pattern[str] | None]:
    """What any of the fnmatch `patterns` matches (fnmatch.fnmatchcase), as (prefixes, exact names, one regular
    expression or None): "LITERAL*" is a prefix and "LITERAL" an exact name (no regex to compile: most of the
    spec's patterns are such); the rest alternated in fnmatch's translation."""
    prefixes, exact, other = [], set(), []
    for p in patterns:
        body = p[:-1] if p.endswith("*") else p
        if any(c in body for c in "*?["):
            other.append(p)
        elif p.endswith("*"):
            prefixes.append(body)
        else:
            exact.add(p)
    regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in other)) if other else None
    return tuple(prefixes), frozenset(exact), regex


def check_resolution(elf: ElfFile, path: str, kind: str, res: FileResult, ctx: Context,
                     skip: set[tuple[str, str]]) -> None:
    """missing-library, unresolved-symbol, missing-cxx-runtime: bind every undefined symbol."""
    r = ctx.resolver
    # an extension module is loaded into the interpreter, whatever host the other files are checked against
    global_scope = interpreter_scope(ctx) if kind == "python-extension" else ctx.host_scope or []
    already = set()
    for lo in global_scope:
        already.add(os.path.basename(lo.path))
        if lo.elf.soname:
            already.add(lo.elf.soname)
    own = r.scope(elf, path, already)
    for lib, needed_by in own.missing:
        direct = needed_by == path
        res.add("missing-library", f"needs {lib}" + ("" if direct else f" (through {needed_by})")
                + ", which the loader will not find (RUNPATH, ld.so.conf and default directories searched)",
                fix_args={"library": lib}, library=lib)
    own_names = own.names() | already
    listed = set(elf.needed) | own.names()  # what its own DT_NEEDED closure brings
    scope = [*global_scope, *own.objects[1:]]
    cxx_listed = CXX_RUNTIME in elf.needed or CXX_RUNTIME in own.names()
    cxx_missing: list[Symbol] = []
    cxx_from_host: list[Symbol] = []
    for sym in elf.symbols:
        if sym.defined or sym.binding == "WEAK" or (sym.version and (sym.name, sym.version) in skip):
            continue
        found = r.lookup(sym, scope)
        if found is not None:
            from_host = any(found is g for g in global_scope)
            lib = found.elf.soname or os.path.basename(found.path)
            # "needed" when its own DT_NEEDED closure has the library (even if the host's scope binds it first)
            res.note_resolved(lib, "host" if from_host and lib not in listed else "needed")
            if kind == "plugin" and from_host and not cxx_listed and \
                    (found.elf.soname == CXX_RUNTIME or found is global_scope[0]) and \
                    _is_cxx(_provider(sym.name, ctx.spec.providers)):
                cxx_from_host.append(sym)  # from the host's libstdc++ (or its own exported copy), not libc
            continue
        if sym.name.startswith("aoti_torch_") and kind != "host":
            _unresolved_shim(sym, res, ctx)
            continue
        prov = _provider(sym.name, ctx.spec.providers)
        if prov is not None and not any(s in own_names for s in prov.sonames):
            soname, lib_path = _find_provider(prov, elf, path, r)
            if lib_path is not None and _defines(r, lib_path, sym):
                if soname == CXX_RUNTIME:
                    cxx_missing.append(sym)
                    continue
                res.add("unresolved-symbol", f"{_ref(sym)} is defined by {prov.name} ({soname}), which is not in "
                        f"its DT_NEEDED nor in the host's global scope: dlopen fails with `undefined symbol: "
                        f"{sym.name}`" + _provider_hint(prov), fix_variant="provider-not-needed",
                        fix_args={"soname": soname, "file": os.path.basename(path)}, symbol=sym.name, version=sym.version, library=soname, fix_op=("add-needed", soname))
                continue
            if lib_path is None:
                res.add("unresolved-symbol", f"{_ref(sym)} comes from {prov.name} ({', '.join(prov.sonames)}), which "
                        "is neither in its DT_NEEDED nor the host's global scope, nor installed here: dlopen fails "
                        f"with `undefined symbol: {sym.name}`" + _provider_hint(prov),
                        fix_variant="provider-not-installed", fix_args={"provider": prov.name, "soname": soname},
                        symbol=sym.name,
                        version=sym.version, library=soname)
                continue
        where = (f"the interpreter {global_scope[0].path} and " if kind == "python-extension" and global_scope
                 else f"the host {ctx.host.path} and " if ctx.host else "")
        res.add("unresolved-symbol", f"{_ref(sym)}: no object in {where}its DT_NEEDED closure defines it "
                f"(searched {len(scope)} object(s)); dlopen(RTLD_NOW) fails with `undefined symbol: {sym.name}`",
                symbol=sym.name, version=sym.version, library=sym.version_file)
    if kind == "plugin":
        _two_runtimes(elf, res, global_scope, has_host=ctx.host is not None)
        _opened_libraries(elf, res, ctx, global_scope)
    if cxx_missing:
        names = [s.name for s in cxx_missing]
        res.add("missing-cxx-runtime", f"imports {len(names)} C++ runtime symbol(s) ({_short(names)}) without "
                f"{CXX_RUNTIME} in DT_NEEDED; loaded from a host without libstdc++ in its global scope (a C host, "
                f"a static libstdc++) dlopen fails with `undefined symbol: {names[0]}`",
                symbol=names[0], library=CXX_RUNTIME, fix_op=("add-needed", CXX_RUNTIME))
    elif cxx_from_host:
        names = [s.name for s in cxx_from_host]
        res.add("missing-cxx-runtime", f"imports {len(names)} C++ runtime symbol(s) ({_short(names)}) without "
                f"{CXX_RUNTIME} in DT_NEEDED: it loads only because this host has libstdc++ in its global scope",
                severity="warning", symbol=names[0],
                library=CXX_RUNTIME, fix_op=("add-needed", CXX_RUNTIME))


@functools.cache
def _cxx_runtime_core() -> tuple[str, ...]:
    """Symbols defined only by a C++ runtime itself, never by template instantiation in user code
    (toolchain/spec/abi.toml, as elf_scan.cpp)."""
    return load_abi().cxx_runtime_core


def _two_runtimes(elf: ElfFile, res: FileResult, global_scope: list[Loaded], has_host: bool) -> None:
    """Measured with torch 2.11 CUDA plugins on an H200 machine: a plugin that links libstdc++ statically AND exports it (torch 2.11 CUDA plugins
    built with the GPU image's g++) splits in two when the shared libstdc++.so.6 is loaded outside its lookup
    scope (numpy and torch load it RTLD_LOCAL): its GNU_UNIQUE symbols (locale facet ids) bind process-wide to
    that copy, its other std:: references to its own, and std::regex dereferences a null facet. With the
    shared libstdc++ in the host's global scope every reference binds to it: no split."""
    unique = sum(1 for s in elf.symbols if s.defined and s.binding == "GNU_UNIQUE")
    if unique == 0:
        return
    defined = elf.defined()
    own = [n for n in _cxx_runtime_core() if n in defined]
    if not own:
        return
    shared = next((lo for lo in global_scope if lo.elf.soname == CXX_RUNTIME), None)
    if shared is not None:
        return  # the host's global scope has the shared runtime: every std:: reference binds to it
    where = "this host's global scope has no" if has_host else "a host whose global scope has no"
    res.add("two-cxx-runtimes", f"exports its own C++ runtime ({', '.join(own)}; {unique} GNU_UNIQUE symbols): "
            f"in {where} {CXX_RUNTIME} and a process that loads {CXX_RUNTIME} elsewhere (numpy, torch: "
            "RTLD_LOCAL), the GNU_UNIQUE facet ids bind to that copy and the rest to the plugin's: two half "
            "runtimes, which crashed torch 2.11 CUDA plugins in std::regex (null facet)", symbol=own[0], library=CXX_RUNTIME)


def _ref(sym: Symbol) -> str:
    return f"{sym.name}@{sym.version}" if sym.version else sym.name


def _provider_hint(p: Provider) -> str:
    return f"; {p.note}" if p.note else ""  # the provider's note in toolchain/spec/providers.toml


def _find_provider(p: Provider, elf: ElfFile, path: str, r: Resolver) -> tuple[str, str | None]:
    for soname in p.sonames:
        found = r.find(soname, elf, path)
        if found:
            return soname, found
    return p.sonames[0], None


def _defines(r: Resolver, lib_path: str, sym: Symbol) -> bool:
    lib = r.read(lib_path)
    return lib is not None and r.lookup(sym, [Loaded(lib_path, lib, None)]) is not None


# What a plugin imports to run an ATen op that has no C shim (torch's ProxyExecutor, inside libtorch).
PROXY_EXECUTOR = "aoti_torch_proxy_executor_call_function"


def _opened_libraries(elf: ElfFile, res: FileResult, ctx: Context, global_scope: list[Loaded]) -> None:
    """missing-library for a library the host's implementation of an imported shim opens on first use (shims.toml
    `loads`): dlopen from the host searches the host's RUNPATH, LD_LIBRARY_PATH, ld.so.conf and the default
    directories, or finds it already loaded in the host's scope. Needs a host that defines the shim (without
    one, missing-shim or nothing can be said)."""
    if ctx.host is None:
        return
    loads = {s.name: s.loads for s in ctx.spec.shims if s.loads}
    if not loads:
        return
    providers = {p.name: p for p in ctx.spec.providers}
    in_scope = {os.path.basename(lo.path) for lo in global_scope} | {lo.elf.soname for lo in global_scope
                                                                    if lo.elf.soname}
    callers: dict[str, list[str]] = {}  # provider -> the imported shims the host implements with it
    for sym in elf.symbols:
        wanted = loads.get(sym.name)
        if not sym.defined and wanted in providers and ctx.resolver.find_defs(ctx.host, sym.name):
            callers.setdefault(wanted, []).append(sym.name)
    for name, shims in sorted(callers.items()):
        prov = providers[name]
        if any(n in in_scope for n in prov.sonames) or any(
                ctx.resolver.find(n, ctx.host.elf, ctx.host.path) for n in prov.sonames):
            continue
        soname, shims = prov.sonames[0], sorted(shims)
        res.add("missing-library", f"calls {', '.join(shims)}, which the host {ctx.host.path} implements by opening "
                f"{soname} ({prov.name}) on the first call, and the loader will not find it from there (the host's "
                "RUNPATH, LD_LIBRARY_PATH, ld.so.conf and the default directories searched): those calls fail at "
                "run time" + (f"; {prov.note}" if prov.note else ""), fix_variant="opened-at-run",
                fix_args={"library": soname, "shim": shims[0]}, library=soname, symbol=shims[0])


def _unresolved_shim(sym: Symbol, res: FileResult, ctx: Context) -> None:
    """An aoti_torch_* import nothing in the host's scope defines: missing-shim for a fallback op's shim (named
    with its ATen op, toolchain/torch_ops.json), unresolved-symbol for the rest of the shim ABI. Checked
    standalone (no host), a shim counts as provided when shims.toml lists it."""
    from toolchain.torch_ops import op_of  # torch's fallback ops: read only for a shim that does not bind

    if sym.name == PROXY_EXECUTOR:
        ops = ctx.proxy_ops.get(res.path, ())
        named = ", ".join(ops) if ops else "ATen ops that have no C shim"
        res.add("missing-shim", f"calls {named} through torch's proxy executor ({sym.name}), which only a host "
                "that links libtorch provides: the plugin fails to load", fix_variant="proxy-executor",
                fix_args={"op": named, "shim": sym.name}, symbol=sym.name)
        return
    known = op_of(sym.name)
    if known is not None:
        _missing_shim(sym, known[0], known[1], res, ctx)
        return
    if ctx.host is not None:
        res.add("unresolved-symbol", f"imports shim {sym.name}, which the host {ctx.host.path} does not export "
                "(nor anything in its global scope)", fix_variant="shim-not-in-host", symbol=sym.name)
    elif sym.name not in ctx.shim_names:
        res.add("unresolved-symbol", f"imports shim {sym.name}, which the aoti-toolchain host runtime does "
                "not implement (not in toolchain/spec/shims.toml)", fix_variant="shim-unknown", symbol=sym.name)


def _missing_shim(sym: Symbol, op: TorchOp, device: str, res: FileResult, ctx: Context) -> None:
    ours = next((s for s in ctx.spec.shims if s.name == sym.name), None)
    if ours is not None and ctx.host is None:
        return
    host = ctx.host.path if ctx.host is not None else ""
    where = "the device-agnostic" if device == "aten" else f"the {device.upper()}"
    what = f"calls ATen op {op.label} through {where} fallback shim {sym.name} (torch >= {op.since})"
    fields = {"op": op.label, "shim": sym.name}
    if ours is None:
        res.add("missing-shim", f"{what}, which the aoti-toolchain host runtime does not implement (not in "
                "toolchain/spec/shims.toml): the plugin fails to load", fix_args=fields, symbol=sym.name)
    elif ours.group == "cuda":
        res.add("missing-shim", f"{what}, which the host {host} does not export: the runtime implements "
                "it in its CUDA build only", fix_variant="cuda-build", fix_args=fields, symbol=sym.name)
    else:
        res.add("missing-shim", f"{what}, which the host {host} does not export (nor anything in its "
                "global scope)", fix_variant="host-lacks", fix_args=fields, symbol=sym.name)


def check_host(elf: ElfFile, path: str, res: FileResult, ctx: Context) -> None:
    """shim-not-exported and duplicate-shim-definition for a host program or runtime library. The shims it
    must export: the groups of its build variant when the post-link step says so (ctx.shim_groups), else
    core and cpu, and cuda when it defines any cuda shim."""
    defined = elf.defined()
    groups = list(ctx.shim_groups or ("core", "cpu"))
    if ctx.shim_groups is None and any(s.name in defined for s in ctx.spec.shims_in("cuda")):
        groups.append("cuda")
    scope = ctx.resolver.scope(elf, path).objects
    # A program's DT_NEEDED libraries are in the process's global scope, where a plugin loaded later binds:
    # a program linked against libaoti_host.so exports the shims through it (a library's own dependencies
    # are global only when it is loaded RTLD_GLOBAL, so a library must export them itself).
    libs = scope[1:] if elf.interp else []

    def exported_by_needed(name: str) -> bool:
        return any(s.binding in ("GLOBAL", "WEAK") and s.visibility == "DEFAULT" and not s.hidden
                   for lo in libs for s in ctx.resolver.find_defs(lo, name))

    for shim in ctx.spec.shims_in(*groups):
        syms = defined.get(shim.name, [])
        ok = [s for s in syms if s.binding in ("GLOBAL", "WEAK") and s.visibility == "DEFAULT" and not s.hidden]
        if not ok and not syms and exported_by_needed(shim.name):
            continue
        if not ok:
            undef = not syms and any(s.name == shim.name for s in elf.symbols)
            why = ("only an undefined reference in its dynamic symbol table" if undef else
                   "not in its dynamic symbol table" if not syms else
                   f"{syms[0].binding}/{syms[0].visibility}{' hidden version' if syms[0].hidden else ''}")
            res.add("shim-not-exported", f"does not export shim {shim.name} ({why}): a plugin importing it fails "
                    "to load", symbol=shim.name)
    names = [shim.name for shim in ctx.spec.shims]
    # the objects defining any shim at all (most of a scope defines none: their lookups gave {})
    holders = [(lo, defs) for lo in scope if (defs := ctx.resolver.defined_among(lo, names))]
    for shim in ctx.spec.shims:
        providers = [lo for lo, defs in holders if any(s.visibility == "DEFAULT" for s in defs.get(shim.name, ()))]
        if len(providers) > 1:
            names = [lo.path for lo in providers]
            res.add("duplicate-shim-definition", f"{shim.name} is defined by {len(names)} objects in the host's "
                    f"scope ({_short(names, 4)}); plugins bind to the first ({names[0]}), by load order",
                    symbol=shim.name, library=names[1])


def runpath_dirs(elf: ElfFile, path: str) -> list[str]:
    origin = os.path.dirname(os.path.abspath(path))
    return [expand_origin(e, origin) for e in (elf.runpath or elf.rpath)]


def check_mixed_config(elf: ElfFile, path: str, res: FileResult, ctx: Context) -> None:
    """mixed-config: objects of one binary whose configuration records (aoti_host/config.h notes, read by
    toolchain.elf.config_records) disagree, e.g. one compiled with -DCUDA_AVAILABLE=1 and one without; in the
    post-link step also with the defines of the variant that linked it (ctx.expected_config)."""
    from toolchain.elf.config_records import ConfigRecord, find_conflicts, records_of

    records = records_of(elf)
    if ctx.expected_config and records:
        records.insert(0, ConfigRecord(f"<variant {ctx.variant or '?'}>", dict(ctx.expected_config)))
    for c in find_conflicts(records):
        objs = "; ".join(f"{value}: {', '.join(r.object_name for r in recs)}" for value, recs in c.by_value.items())
        res.add("mixed-config", f"objects linked into it were compiled with different {c.key} "
                f"({' vs '.join(c.by_value)}): {objs}; a one-definition-rule break (types and inline functions "
                "differ between them)", symbol=c.key)
