"""Post-link checks of every binary our builders link (lief, imported inside the actions only).

1. shim-not-exported: every spec shim of the variant is DEFINED and exported with default visibility.
2. mixed-config: the configuration records of all objects in the binary agree with each other and with
   the variant (toolchain/elf/config_records.py); objects we linked that carry no record are warned about
   (object-without-config-record).
3. Hooks: callables in ``env["AOTI_POST_LINK_HOOKS"]`` run last, as ``hook(path: Path, env) -> int``
   (non-zero fails the build). The integrator connects `aoti-toolchain verify` here (issue 4).
A binary that fails a check is removed, so nothing broken lands in dist/.
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


def _spec_shim_names(env) -> list[str]:
    from toolchain.spec import load_spec

    spec = load_spec(Path(env["AOTI_SPEC_DIR"]))
    return [s.name for s in spec.shims_in(*_groups(env))]


def _fail(path: Path, message: str) -> int:
    print(message, file=sys.stderr)
    path.unlink(missing_ok=True)
    return 1


def check_exports(path: Path, env) -> int:
    from toolchain.elf.exports import missing_exports
    from toolchain.errors import ToolchainError

    try:
        missing = missing_exports(path, _spec_shim_names(env))
    except ToolchainError as exc:
        return _fail(path, f"aoti-check: error: {exc}")
    if not missing:
        return 0
    lines = "\n".join(f"  {m.name}: {m.reason}" for m in missing)
    return _fail(
        path,
        f"aoti-check: {path}: {len(missing)} shim(s) not exported [rule shim-not-exported]:\n{lines}\n"
        "  fix: link the shim archive between -Wl,--whole-archive and -Wl,--no-whole-archive and export "
        "the shims (the generated dynamic list, or --export-dynamic): env.AotiHostProgram does both. A shim "
        "that no source defines must be implemented, or removed from toolchain/spec/shims.toml.",
    )


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


def check_config(path: Path, target, source, env) -> int:
    from toolchain.elf.config_records import (
        RULE_NO_RECORD,
        ConfigRecord,
        find_conflicts,
        format_conflicts,
        read_config_records,
    )
    from toolchain.errors import ToolchainError

    try:
        records = read_config_records(path)
    except ToolchainError as exc:
        return _fail(path, f"aoti-check: error: {exc}")
    expected = dict(env.get("AOTI_FEATURE_DEFINES", {}))
    pseudo = [ConfigRecord(f"<variant {env.get('AOTI_VARIANT', '?')}>", expected)] if expected else []
    conflicts = find_conflicts([*pseudo, *records])
    if conflicts:
        return _fail(path, "aoti-check: " + format_conflicts(path, conflicts, [*pseudo, *records]))
    top = env.Dir("#").abspath
    recorded = {os.path.normpath(os.path.join(top, r.object_name)) for r in records}
    for name, node in _linked_objects(target, source, env):
        if name in recorded:
            continue
        if not node.has_builder() and read_config_records(Path(node.abspath)):
            continue  # a prebuilt object whose record names its source, not the object
        print(f"aoti-check: warning: {path}: {node} has no configuration record [rule {RULE_NO_RECORD}]; "
              "fix: compile it with the builders of this variant, or include aoti_host/config.h in it",
              file=sys.stderr)
    return 0


def _post_link_action(target, source, env):
    path = Path(target[0].abspath)
    for check in (check_exports, lambda p, e: check_config(p, target, source, e)):
        rc = check(path, env)
        if rc:
            return rc
    # Hook for more checks of the linked binary (the integrator wires `aoti-toolchain verify` in here).
    for hook in env.get("AOTI_POST_LINK_HOOKS", []):
        rc = hook(path, env)
        if rc:
            path.unlink(missing_ok=True)
            return rc
    return 0


def _config_only_action(target, source, env):
    return check_config(Path(target[0].abspath), target, source, env)


PostLinkCheck = SCons.Action.Action(_post_link_action, "aoti-check: $TARGET")
ConfigCheck = SCons.Action.Action(_config_only_action, "aoti-check: configuration records of $TARGET")
