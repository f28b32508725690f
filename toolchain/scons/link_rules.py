"""Link rules as named checks (in the style of MongoDB's libdeps linter): each has an id; its summary and fix
come from the rule table (toolchain/spec/rules.toml, stage "link").

Checked while SCons reads the build files (an emitter on every Program/SharedLibrary/LoadableModule):
- runtime-without-host-builder: a program or library links the host runtime (its archive or
  libaoti_host.so) without env.AotiHostProgram/env.AotiRuntimeLibrary, so nothing whole-archives and
  exports the shims, and no post-link check runs.
- shim-archive-not-whole-archived: the shim archive is linked as a plain library: the linker keeps only
  the members the program itself references, and plugins fail with `undefined symbol: aoti_torch_...`.
- conflicting-define: a target sets a define that a dependency's usage requirements set differently.
Checked before each link of our builders (an action, so it reads the real inputs, archives and objects,
with nm: the linked binary is checked by the post-link step, toolchain/scons/checks.py):
- duplicate-shim-definition: one shim is defined by two of the objects/libraries of one binary; which one
  a plugin binds to depends on link order. After the link the checks engine looks for the same defect in
  the binary's load scope (toolchain/verify/checks.py check_host).

A target waives a rule with ``AOTI_WAIVE_RULES=["rule-id", ...]`` (for tests of the later checks).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import SCons.Action
import SCons.Script

SHIM_ARCHIVE = "libaoti_host_shims.a"
RUNTIME_NAMES = ("libaoti_host_runtime.a", "libaoti_host.so")


class LinkRuleViolation(Exception):
    pass


def report(rule_id: str, target, detail: str) -> str:
    from toolchain.findings import RULES

    rule = RULES[rule_id]
    return f"scons: error: {target}: {rule.summary}: {detail} [rule {rule.id}]\n  fix: {rule.fix_text()}"


def _waived(env, rule_id: str) -> bool:
    return rule_id in env.get("AOTI_WAIVE_RULES", [])


def _role(item) -> str | None:
    role = getattr(getattr(item, "attributes", None), "aoti_role", None)
    if role:
        return role
    name = os.path.basename(str(item))
    if name in (SHIM_ARCHIVE, "aoti_host_shims"):
        return "shims"
    if name in (*RUNTIME_NAMES, "aoti_host_runtime", "aoti_host"):
        return "runtime"
    return None


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    SCons.Script.Exit(2)


def lint_emitter(target, source, env):
    """Emitter on every link builder: the rules that the build description alone decides."""
    ours = bool(env.get("AOTI_HOST_BUILDER"))
    plain = [*env.Flatten(env.get("LIBS", [])), *env.Flatten(source), *env.Flatten(env.get("AOTI_ARCHIVES", []))]
    for item in plain:
        role = _role(item)
        if role == "shims" and not _waived(env, "shim-archive-not-whole-archived"):
            _fail(report("shim-archive-not-whole-archived", target[0], f"{item} is linked without whole-archive"))
        if role == "runtime" and not ours and not _waived(env, "runtime-without-host-builder"):
            _fail(report("runtime-without-host-builder", target[0], f"links {item}"))
    return target, source


def merge_usage(env, target, usages: list[dict]) -> dict:
    """The overrides that give a target its dependencies' usage requirements (appended, deduplicated)."""
    out: dict[str, list] = {}
    own = _defines(env.get("CPPDEFINES", []))
    for usage in usages:
        for key, values in usage.items():
            if key == "CPPDEFINES":
                merged = out.setdefault(key, list(env.get(key, [])))
                for name, value in _defines(values).items():
                    if name not in own:
                        own[name] = value
                        merged.append((name, value))
                    elif own[name] != value and not _waived(env, "conflicting-define"):
                        _fail(report("conflicting-define", target,
                                     f"{name}={own[name]} here, {name}={value} from a dependency"))
                continue
            merged = out.setdefault(key, [*env.Flatten(env.get(key, []))])
            for v in values:
                if v not in merged:
                    merged.append(v)
    return out


def _defines(cppdefines) -> dict[str, str]:
    out = {}
    items = cppdefines.items() if isinstance(cppdefines, dict) else cppdefines
    for d in items if not isinstance(cppdefines, str) else [cppdefines]:
        if isinstance(d, (tuple, list)):
            out[str(d[0])] = str(d[1]) if len(d) > 1 and d[1] is not None else "1"
        else:
            name, _, value = str(d).partition("=")
            out[name] = value or "1"
    return out


def _defined_shims(path: str, shim_names: set[str]) -> set[str]:
    args = ["nm", "--defined-only", "-g"]
    if path.endswith(".so") or ".so." in os.path.basename(path):
        args.append("-D")
    proc = subprocess.run([*args, path], capture_output=True, text=True)
    found = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] in shim_names and parts[-2] not in ("U", "w", "v"):
            found.add(parts[-1])
    return found


def _duplicate_action(target, source, env):
    from toolchain.scons.checks import spec_shim_names

    if _waived(env, "duplicate-shim-definition"):
        return 0
    shim_names = set(spec_shim_names(env))
    inputs: list[str] = [s.abspath for s in source]
    for item in [*env.Flatten(env.get("AOTI_ARCHIVES", [])), *env.Flatten(env.get("AOTI_WHOLE_ARCHIVE_NODES", [])),
                 *env.Flatten(env.get("LIBS", []))]:
        path = item.abspath if hasattr(item, "abspath") else str(item)
        if os.path.isfile(path):
            inputs.append(path)
    owners: dict[str, list[str]] = {}
    for path in dict.fromkeys(inputs):
        for name in _defined_shims(path, shim_names):
            owners.setdefault(name, []).append(path)
    dups = {n: ps for n, ps in sorted(owners.items()) if len(ps) > 1}
    if not dups:
        return 0
    lines = "\n".join(f"  {n}: " + ", ".join(Path(p).name for p in ps) for n, ps in dups.items())
    print(report("duplicate-shim-definition", target[0], f"{len(dups)} shim(s) defined more than once:\n{lines}"),
          file=sys.stderr)
    return 1


DuplicateShimCheck = SCons.Action.Action(_duplicate_action, "aoti-check: one definition per shim for $TARGET")


def install(env) -> None:
    for var in ("PROGEMITTER", "SHLIBEMITTER", "LDMODULEEMITTER"):
        env.Append(**{var: [lint_emitter]})
