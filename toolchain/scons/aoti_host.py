"""SCons tool: build hosts that load AOTInductor plugins, with the link rules enforced and checked.

Adds to an Environment:
- ``env.AotiCodegen()``: the generated header/lists/link test, from the spec and templates/.
- ``env.AotiHostProgram(target, sources, libs=[...])``: a program that loads plugins. The shim archive
  is linked between --whole-archive/--no-whole-archive and the generated dynamic list exports the shims.
- ``env.AotiInstalledRuntime(root=None)``: the runtime of an installed wheel (or an unpacked `scons dist`
  archive) as a dependency: ``env.AotiHostProgram("myhost", ["main.cpp"], libs=[env.AotiInstalledRuntime()])``
  links it (-laoti_host, a $ORIGIN-relative RUNPATH) with the same link rules and post-link checks.
- ``env.AotiRuntimeLibrary(target, libs=[...])``: the shared runtime library, shims whole-archived,
  exports limited by the generated version script.
- ``env.AotiLibrary(target, sources, public={...}, deps=[...])``: a static library with usage requirements
  (defines, include paths, libraries) that its consumers receive instead of repeating them.
- Link rules with ids and fix-its (link_rules.py) while reading the build files and before each link; after
  every link the post-link checks (checks.py: exports, one configuration) fail the build and remove the
  binary so nothing broken lands in dist/.
Heavy imports (lief, jinja2) happen only inside actions, so a null build stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Script

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# SCons restores sys.path after reading the SConscripts; actions import toolchain.* later, which works
# once the package itself is in sys.modules.
import toolchain  # noqa: E402,F401
from toolchain.scons.checks import ConfigCheck, PostLinkCheck  # noqa: E402
from toolchain.scons.link_rules import DuplicateShimCheck, install, merge_usage  # noqa: E402


def _groups(env) -> tuple[str, ...]:
    from toolchain.codegen import GROUPS_BY_CONFIG

    return GROUPS_BY_CONFIG[bool(env["AOTI_CUDA"])]


def _codegen_action(target, source, env):
    from toolchain.codegen import generate
    from toolchain.errors import ToolchainError

    try:
        written = generate(Path(env.Dir("$AOTI_GEN_DIR").abspath), cuda=bool(env["AOTI_CUDA"]),
                           spec_dir=Path(env["AOTI_SPEC_DIR"]))
    except ToolchainError as exc:
        print(f"aoti-codegen: error: {exc}", file=sys.stderr)
        return 1
    changed = [w.path.name for w in written if w.changed]
    if changed:
        print(f"aoti-codegen: wrote {', '.join(changed)}")
    return 0


def _whole_archive(env, archives) -> list[str]:
    if not env.Flatten(archives):
        return []
    return ["-Wl,--whole-archive", *[a.abspath for a in env.Flatten(archives)], "-Wl,--no-whole-archive"]


# The link lines of our builders: plain archives, then the whole-archived ones, then system libraries.
_LINKCOM = "$LINK -o $TARGET $LINKFLAGS $__RPATH $SOURCES $AOTI_ARCHIVES $AOTI_WHOLE_ARCHIVE $_LIBDIRFLAGS $_LIBFLAGS"
_SHLINKCOM = ("$SHLINK -o $TARGET $SHLINKFLAGS $__SHLIBVERSIONFLAGS $__RPATH $SOURCES $AOTI_ARCHIVES "
              "$AOTI_WHOLE_ARCHIVE $_LIBDIRFLAGS $_LIBFLAGS")
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu")


def _usage_of(node) -> list[dict]:
    """The usage requirements a dependency hands to its consumers (its own, then its dependencies')."""
    attrs = getattr(node, "attributes", None)
    return list(getattr(attrs, "aoti_usage", None) or [])


def _usage_overrides(env, target, libs) -> dict:
    usages = [u for lib in env.Flatten(list(libs)) for u in _usage_of(lib)]
    return merge_usage(env, target, usages) if usages else {}


def _objects(env, sources, overrides: dict, shared: bool) -> list:
    """Compile the sources of a target with its dependencies' usage requirements; pass objects through."""
    build = env.SharedObject if shared else env.Object
    out = []
    for src in env.Flatten(list(sources)):
        if str(src).endswith(_SOURCE_SUFFIXES):
            objs = build(src, **overrides)
            if env.get("AOTI_TOOLCHAIN_ID"):
                # CacheDir safety across machines: the compiler's identity is part of every object's signature.
                env.Depends(objs, env.Value(env["AOTI_TOOLCHAIN_ID"]))
            out.extend(objs)
        else:
            out.append(src)
    return out


def _tag(nodes, role: str, usage: list[dict]):
    for node in nodes:
        node.attributes.aoti_role = role
        node.attributes.aoti_usage = usage
    return nodes


def AotiLibrary(env, target, sources, public=None, private=None, deps=(), role="library", shared_objects=True):
    """A static library with usage requirements: ``public`` (CPPDEFINES, CPPPATH, LIBS, LIBPATH, RPATH) is
    what it and every consumer compile and link with; ``private`` only its own sources; ``deps`` hand theirs
    on, transitively."""
    usage = [*([dict(public)] if public else []), *[u for d in env.Flatten(list(deps)) for u in _usage_of(d)]]
    overrides = merge_usage(env, target, [*usage, *([dict(private)] if private else [])])
    lib = env.StaticLibrary(target, _objects(env, sources, overrides, shared_objects))
    return _tag(lib, role, usage)


def _link_overrides(env, overrides: dict, kw: dict) -> dict:
    """LIBS/LIBPATH/RPATH from the usage requirements, after the ones the caller passes (which kw loses)."""
    out = {}
    for key in ("LIBS", "LIBPATH", "RPATH"):
        if key in overrides or key in kw:
            mine = env.Flatten(kw.pop(key, env.get(key, [])))
            out[key] = [*mine, *[v for v in overrides.get(key, []) if v not in mine]]
    return out


def _export_flags(env) -> list[str]:
    if env.get("AOTI_EXPORT", "shims") == "all":
        return ["-Wl,--export-dynamic"]
    return [f"-Wl,--dynamic-list={env.File('$AOTI_GEN_DIR/link/host.dynlist').abspath}"]


def AotiHostProgram(env, target, source, libs=(), **kw):
    """A program that loads plugins: its sources get the usage requirements of ``libs`` and of the shims;
    the shim archive is whole-archived and the shims exported (the generated dynamic list, or
    --export-dynamic with export=all); then the link rules and the post-link checks run."""
    shims = env.Flatten(env.get("AOTI_SHIM_ARCHIVE", []))
    deps = env.Flatten(list(libs))
    # An installed runtime (env.AotiInstalledRuntime) is linked as -laoti_host through its usage
    # requirements; it exports the shims itself, so the program needs no shim archive or dynamic list.
    installed = [d for d in deps if _role_of(d) == "installed-runtime"]
    archives = [d for d in deps if d not in installed]
    if not shims and not installed:
        raise SCons.Errors.UserError(f"AotiHostProgram {target}: no runtime to link: pass libs=[runtime] of a "
                                     "runtime build, or libs=[env.AotiInstalledRuntime()] for the installed one")
    overrides = _usage_overrides(env, target, [*deps, *shims])
    link_overrides = _link_overrides(env, overrides, kw)
    rpath = [_origin_rpath(env, target, lib) for lib in installed]
    prog = env.Program(
        target,
        _objects(env, source, overrides, shared=False),
        LINKCOM=_LINKCOM,
        LINKFLAGS=[*env.get("LINKFLAGS", []), *(_export_flags(env) if shims else []), *rpath],
        AOTI_ARCHIVES=[a.abspath for a in archives],
        AOTI_WHOLE_ARCHIVE=_whole_archive(env, shims),
        AOTI_WHOLE_ARCHIVE_NODES=shims,
        AOTI_HOST_BUILDER=1,
        **link_overrides,
        **kw,
    )
    if shims and env.get("AOTI_EXPORT", "shims") != "all":
        env.Depends(prog, env.File("$AOTI_GEN_DIR/link/host.dynlist"))
    env.Depends(prog, [*deps, *shims])
    env.AddPreAction(prog, DuplicateShimCheck)
    env.AddPostAction(prog, PostLinkCheck)
    return prog


def _role_of(node) -> str | None:
    return getattr(getattr(node, "attributes", None), "aoti_role", None)


def _origin_rpath(env, target, lib) -> str:
    """-rpath $ORIGIN/<path from the program's folder to the installed runtime's lib/>: the program finds
    the runtime where it was built against without a build-machine path in RUNPATH (verify's unsafe-runpath)."""
    import os

    out_dir = os.path.dirname(env.File(env.subst(str(target))).abspath)
    rel = os.path.relpath(os.path.dirname(lib.abspath), out_dir)
    return "-Wl,-rpath,'$$ORIGIN" + ("" if rel == "." else "/" + rel) + "'"


def AotiInstalledRuntime(env, root=None):
    """The runtime an installed aoti-toolchain wheel carries (or ``root``: an unpacked `scons dist` archive)
    as a dependency for ``env.AotiHostProgram(target, sources, libs=[env.AotiInstalledRuntime()])``: its
    headers, feature defines and -laoti_host are the program's usage requirements; the program gets a
    $ORIGIN-relative RUNPATH to it, and the same post-link checks as the runtime's own programs."""
    from toolchain.hostlib import build_info, find_library

    lib = Path(root) / "lib" / "libaoti_host.so" if root is not None else find_library()
    if lib is None or not lib.is_file():
        raise SCons.Errors.UserError(
            f"AotiInstalledRuntime: no runtime library at {lib or 'any installed or built location'}: "
            "pip install aoti-toolchain, or pass root= an unpacked aoti-host-<version>-<variant> folder")
    info = build_info(lib) or {}
    defines = {str(k): str(v) for k, v in (info.get("feature_defines") or {"CUDA_AVAILABLE": "0"}).items()}
    tree = lib.parent.parent
    env.SetDefault(AOTI_FEATURE_DEFINES=defines, AOTI_VARIANT=str(info.get("variant", "installed")))
    env["AOTI_CUDA"] = defines.get("CUDA_AVAILABLE") == "1"
    node = env.File(str(lib))
    usage = {"CPPPATH": [str(tree / "include")], "CPPDEFINES": list(defines.items()), "LIBS": ["aoti_host"],
             "LIBPATH": [str(lib.parent)]}
    node.attributes.aoti_role = "installed-runtime"
    node.attributes.aoti_usage = [usage]
    return node


def AotiRuntimeLibrary(env, target, source=(), libs=(), **kw):
    """The shared runtime library: every archive whole-archived, exports set by the version script. Its
    consumers get the archives' usage requirements."""
    archives = [*env.Flatten(list(libs)), *env.Flatten(env["AOTI_SHIM_ARCHIVE"])]
    overrides = _usage_overrides(env, target, archives)
    link_overrides = _link_overrides(env, overrides, kw)
    version_script = env.File("$AOTI_GEN_DIR/link/runtime.version")
    lib = env.SharedLibrary(
        target,
        _objects(env, source, overrides, shared=True),
        SHLINKCOM=_SHLINKCOM,
        SHLINKFLAGS=[*env.get("SHLINKFLAGS", []), f"-Wl,--version-script={version_script.abspath}", "-Wl,-z,defs"],
        AOTI_ARCHIVES=[],
        AOTI_WHOLE_ARCHIVE=_whole_archive(env, archives),
        AOTI_WHOLE_ARCHIVE_NODES=archives,
        AOTI_HOST_BUILDER=1,
        **link_overrides,
        **kw,
    )
    env.Depends(lib, [version_script, *archives])
    env.AddPreAction(lib, DuplicateShimCheck)
    env.AddPostAction(lib, PostLinkCheck)
    return _tag(lib, "runtime", [u for a in archives for u in _usage_of(a)])


def AotiSharedObjects(env, sources, deps=()):
    """Shared objects compiled with the usage requirements of ``deps`` (e.g. a test plugin's sources)."""
    return _objects(env, sources, _usage_overrides(env, "objects", deps), shared=True)


def AotiCheckExports(env, target):
    """Attach the post-link checks (exports, configuration records) to a binary built some other way."""
    env.AddPostAction(target, PostLinkCheck)
    return target


def AotiCheckConfig(env, target):
    """Attach only the configuration-record check (mixed-config) to any linked binary."""
    env.AddPostAction(target, ConfigCheck)
    return target


def AotiCodegen(env):
    from toolchain.codegen import OUTPUTS, template_files
    from toolchain.errors import EXIT_CODES_FILE

    spec_dir = Path(env["AOTI_SPEC_DIR"])
    targets = [f"$AOTI_GEN_DIR/{rel}" for rel in OUTPUTS.values()]
    sources = [*sorted(spec_dir.glob("*.toml")), *template_files(),
               REPO_ROOT / "toolchain" / "codegen.py", REPO_ROOT / "toolchain" / "shim_wrappers.py",
               REPO_ROOT / "toolchain" / "spec" / "__init__.py",
               REPO_ROOT / "toolchain" / "errors.py", EXIT_CODES_FILE,
               REPO_ROOT / "toolchain" / "torch_ops.py", REPO_ROOT / "toolchain" / "torch_ops.json"]
    nodes = env.Command(targets, list(dict.fromkeys(str(Path(s).resolve()) for s in sources)),
                        SCons.Action.Action(_codegen_action, "aoti-codegen: $AOTI_GEN_DIR"))
    # Which groups are generated depends on the configuration, not only on file contents.
    env.Depends(nodes, env.Value(repr(_groups(env))))
    # SCons deletes targets before rebuilding them; keep them so codegen can leave unchanged files as they
    # are and nothing that includes them rebuilds.
    env.Precious(nodes)
    return nodes


def generate(env):
    env.SetDefault(AOTI_CUDA=False, AOTI_SPEC_DIR=str(REPO_ROOT / "toolchain" / "spec"))
    env.AddMethod(AotiCodegen)
    env.AddMethod(AotiCheckExports)
    env.AddMethod(AotiCheckConfig)
    env.AddMethod(AotiHostProgram)
    env.AddMethod(AotiInstalledRuntime)
    env.AddMethod(AotiRuntimeLibrary)
    env.AddMethod(AotiLibrary)
    env.AddMethod(AotiSharedObjects)
    install(env)


def exists(env):
    return True
