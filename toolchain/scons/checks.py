"""The post-link step of every binary our builders link: the checks engine of `aoti-toolchain verify`
(toolchain.verify.check_elf) run once on the parsed binary, then the SCons-only check, then extra hooks.

1. The engine, as a host (env.AotiHostProgram, env.AotiRuntimeLibrary, env.AotiCheckExports): every rule of
   verify against env["AOTI_VERIFY_PROFILE"] (default: this machine), with what the build knows added: the
   shims of the variant's groups must be exported (shim-not-exported), the objects' configuration records
   must agree with each other and with the variant's defines (mixed-config), and RUNPATH entries this
   build's CUDA configuration set are allowed in the build tree (unsafe-runpath becomes a warning there; it
   stays an error for `aoti-toolchain verify` on the shipped binary). env.AotiCheckConfig runs only
   mixed-config.
2. object-without-config-record: an object this link put in carries no record (it needs the SCons nodes).
3. Hooks: callables in ``env["AOTI_POST_LINK_HOOKS"]`` run last, as ``hook(path: Path, env) -> int``
   (non-zero fails the build).
An error fails the build and the binary is removed, so nothing broken lands in dist/. Rule texts come from
the rule table (toolchain/spec/rules.toml). The binary is parsed once (toolchain.elf.reader).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import SCons.Action


def _groups(env) -> tuple[str, ...]:
    from toolchain.codegen import GROUPS_BY_CONFIG

    return GROUPS_BY_CONFIG[bool(env["AOTI_CUDA"])]


def spec_shim_names(env) -> list[str]:
    """The shims the variant's hosts export (its spec groups)."""
    from toolchain.spec import load_spec

    spec = load_spec(Path(env["AOTI_SPEC_DIR"]))
    return [s.name for s in spec.shims_in(*_groups(env))]


def _get(env, key: str, default=None):
    return env.get(key, default) if hasattr(env, "get") else default


def check_linked(path: Path, env, kind: str = "host", rules: str = "all"):
    """Run the checks engine on the linked binary at `path` (parsed once). Returns (FileResult, ElfFile or
    None when it cannot be read). `rules`: "all", or "config" for mixed-config alone."""
    from toolchain.elf.reader import ElfError, read_elf
    from toolchain.findings import FileResult
    from toolchain.spec import SPEC_DIR, load_spec
    from toolchain.verify import check_elf, make_context
    from toolchain.verify.checks import check_mixed_config

    try:
        elf = read_elf(path)
    except ElfError as exc:
        res = FileResult(str(path), "unreadable")
        res.add(exc.rule, str(exc).split("\n  fix: ")[0], fix_variant=exc.fix_variant)
        return res, None
    ctx = make_context(_get(env, "AOTI_VERIFY_PROFILE", "host"))
    spec_dir = _get(env, "AOTI_SPEC_DIR")
    if spec_dir and Path(spec_dir).resolve() != SPEC_DIR.resolve():
        ctx.spec = load_spec(Path(spec_dir))
    if _get(env, "AOTI_CUDA") is not None and _get(env, "AOTI_SPEC_DIR"):
        ctx.shim_groups = _groups(env)
    ctx.expected_config = dict(_get(env, "AOTI_FEATURE_DEFINES") or {}) or None
    ctx.variant = str(_get(env, "AOTI_VARIANT", "?"))
    ctx.build_runpath = frozenset(str(d) for d in ((_get(env, "AOTI_CUDA_USAGE") or {}).get("RPATH") or []))
    if rules == "config":
        res = FileResult(str(path), kind)
        check_mixed_config(elf, str(path), res, ctx)
        return res, elf
    return check_elf(str(path), elf, ctx, kind), elf


def report_linked(path: Path, res, profile: str | None = None) -> int:
    """Print the findings (errors and warnings with their fixes) and, with a profile (the whole engine ran),
    a verdict line; returns the number of errors."""
    errors = sum(1 for f in res.findings if f.severity == "error")
    for f in res.findings:
        print(f"aoti-check: {f.severity}: {path}: [{f.rule}] {f.message}\n  fix: {f.fix}", file=sys.stderr)
    if profile is not None:
        print(f"aoti-check: {path}: {'FAIL' if errors else 'pass'} ({errors} error(s), "
              f"{len(res.findings) - errors} other finding(s), profile {profile})")
    return errors


def post_link_check(path: Path, env, kind: str = "host") -> int:
    """The engine on one linked binary, its findings printed; 1 when it has an error (the binary stays: the
    SCons actions below remove it)."""
    res, _ = check_linked(path, env, kind)
    return 1 if report_linked(path, res, _get(env, "AOTI_VERIFY_PROFILE", "host")) else 0


def _linked_objects(target, source, env) -> list[tuple[str, Any]]:
    """(source file or object path, object node) of every object our link put into the binary."""
    nodes = list(source)
    for archive in env.Flatten(env.get("AOTI_WHOLE_ARCHIVE_NODES", [])):
        nodes.extend(archive.sources)
    out = []
    for node in nodes:
        if not str(node).endswith((".o", ".os", ".obj")):
            continue
        if node.has_builder() and node.sources:
            out.append((node.sources[0].srcnode().abspath, node))
        else:
            out.append((node.abspath, node))
    return out


def _unrecorded_objects(path: Path, elf, target, source, env) -> None:
    """object-without-config-record: warn about objects we linked whose record is not in the binary."""
    from toolchain.elf.config_records import RULE_NO_RECORD, read_config_records, records_of
    from toolchain.findings import RULES

    top = env.Dir("#").abspath
    recorded = {os.path.normpath(os.path.join(top, r.object_name)) for r in records_of(elf)}
    for name, node in _linked_objects(target, source, env):
        if name in recorded:
            continue
        if not node.has_builder() and read_config_records(Path(node.abspath)):
            continue  # a prebuilt object whose record names its source, not the object
        print(f"aoti-check: warning: {path}: {node} has no configuration record [rule {RULE_NO_RECORD}]\n"
              f"  fix: {RULES[RULE_NO_RECORD].fix_text()}", file=sys.stderr)


def _run(target, source, env, rules: str) -> int:
    path = Path(target[0].abspath)
    res, elf = check_linked(path, env, "host", rules)
    if report_linked(path, res, _get(env, "AOTI_VERIFY_PROFILE", "host") if rules == "all" else None):
        path.unlink(missing_ok=True)
        return 1
    if elf is not None:
        _unrecorded_objects(path, elf, target, source, env)
    if rules == "all":
        for hook in env.get("AOTI_POST_LINK_HOOKS", []):
            rc = hook(path, env)
            if rc:
                path.unlink(missing_ok=True)
                return rc
    return 0


def _post_link_action(target, source, env):
    return _run(target, source, env, "all")


def _config_only_action(target, source, env):
    return _run(target, source, env, "config")


PostLinkCheck = SCons.Action.Action(_post_link_action, "aoti-check: $TARGET")
ConfigCheck = SCons.Action.Action(_config_only_action, "aoti-check: configuration records of $TARGET")
