"""SCons tool: build hosts that load AOTInductor plugins, with the link rules enforced and checked.

Adds to an Environment:
- ``env.AotiCodegen()``: the generated header/lists/link test, from the spec and templates/.
- ``env.AotiHostProgram(target, sources, libs=[...])``: a program that loads plugins. The shim archive
  is linked between --whole-archive/--no-whole-archive and the generated dynamic list exports the shims.
- ``env.AotiRuntimeLibrary(target, libs=[...])``: the shared runtime library, shims whole-archived,
  exports limited by the generated version script.
- After every such link, a post-link check (lief) fails the build, listing every spec shim the
  binary does not export, and removes the binary so nothing broken lands in dist/.
Heavy imports (lief, jinja2) happen only inside actions, so a null build stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Script

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# SCons restores sys.path after reading the SConscripts; actions import toolchain.* later, which works
# once the package itself is in sys.modules.
import toolchain  # noqa: E402,F401
from toolchain.scons.checks import ConfigCheck, PostLinkCheck  # noqa: E402


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
    return ["-Wl,--whole-archive", *[a.abspath for a in env.Flatten(archives)], "-Wl,--no-whole-archive"]


# The link lines of our builders: plain archives, then the whole-archived ones, then system libraries.
_LINKCOM = "$LINK -o $TARGET $LINKFLAGS $__RPATH $SOURCES $AOTI_ARCHIVES $AOTI_WHOLE_ARCHIVE $_LIBDIRFLAGS $_LIBFLAGS"
_SHLINKCOM = ("$SHLINK -o $TARGET $SHLINKFLAGS $__SHLIBVERSIONFLAGS $__RPATH $SOURCES $AOTI_ARCHIVES "
              "$AOTI_WHOLE_ARCHIVE $_LIBDIRFLAGS $_LIBFLAGS")


def AotiHostProgram(env, target, source, libs=(), **kw):
    """A program that loads plugins: shims whole-archived, shims exported through the dynamic list."""
    shims = env.Flatten(env["AOTI_SHIM_ARCHIVE"])
    archives = env.Flatten(list(libs))
    dynlist = env.File("$AOTI_GEN_DIR/link/host.dynlist")
    prog = env.Program(
        target,
        source,
        LINKCOM=_LINKCOM,
        LINKFLAGS=[*env.get("LINKFLAGS", []), f"-Wl,--dynamic-list={dynlist.abspath}"],
        AOTI_ARCHIVES=[a.abspath for a in archives],
        AOTI_WHOLE_ARCHIVE=_whole_archive(env, shims),
        AOTI_WHOLE_ARCHIVE_NODES=shims,
        **kw,
    )
    env.Depends(prog, [dynlist, *archives, *shims])
    env.AddPostAction(prog, PostLinkCheck)
    return prog


def AotiRuntimeLibrary(env, target, source=(), libs=(), **kw):
    """The shared runtime library: every archive whole-archived, exports set by the version script."""
    archives = [*env.Flatten(list(libs)), *env.Flatten(env["AOTI_SHIM_ARCHIVE"])]
    version_script = env.File("$AOTI_GEN_DIR/link/runtime.version")
    lib = env.SharedLibrary(
        target,
        list(source),
        SHLINKCOM=_SHLINKCOM,
        SHLINKFLAGS=[*env.get("SHLINKFLAGS", []), f"-Wl,--version-script={version_script.abspath}", "-Wl,-z,defs"],
        AOTI_ARCHIVES=[],
        AOTI_WHOLE_ARCHIVE=_whole_archive(env, archives),
        AOTI_WHOLE_ARCHIVE_NODES=archives,
        **kw,
    )
    env.Depends(lib, [version_script, *archives])
    env.AddPostAction(lib, PostLinkCheck)
    return lib


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

    spec_dir = Path(env["AOTI_SPEC_DIR"])
    targets = [f"$AOTI_GEN_DIR/{rel}" for rel in OUTPUTS.values()]
    sources = [*sorted(spec_dir.glob("*.toml")), *template_files(),
               REPO_ROOT / "toolchain" / "codegen.py", REPO_ROOT / "toolchain" / "spec" / "__init__.py"]
    nodes = env.Command(targets, [str(s) for s in sources],
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
    env.AddMethod(AotiRuntimeLibrary)


def exists(env):
    return True
