"""`aoti-toolchain verify` as a post-link hook of the SCons builders (env["AOTI_POST_LINK_HOOKS"], run by
toolchain/scons/checks.py after its own checks): every binary the build links is verified against
env["AOTI_VERIFY_PROFILE"] (default: this machine); an error fails the build, warnings are printed."""

from __future__ import annotations

import sys
from pathlib import Path


def post_link_verify(path: Path, env) -> int:
    from toolchain.errors import ToolchainError
    from toolchain.verify import verify_paths

    profile = env.get("AOTI_VERIFY_PROFILE", "host") if hasattr(env, "get") else "host"
    try:
        report = verify_paths([path], profile=profile)
    except ToolchainError as exc:
        print(f"aoti-verify: error: {exc}", file=sys.stderr)
        return 1
    for f in report.findings:
        print(f"aoti-verify: {f.severity}: {path}: [{f.rule}] {f.message}\n  fix: {f.fix}", file=sys.stderr)
    print(f"aoti-verify: {path}: {report.verdict} ({report.count('error')} error(s), "
          f"{report.count('warning')} warning(s), profile {profile})")
    return 1 if report.count("error") else 0
