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
    # RUNPATH entries the build itself set (the CUDA toolkit / cuBLAS wheel dirs of the cuda=on variant) are
    # expected in the build tree; they still fail `aoti-toolchain verify` run on the shipped binary.
    usage = env.get("AOTI_CUDA_USAGE") if hasattr(env, "get") else None
    own = {str(d) for d in ((usage or {}).get("RPATH") or [])}
    errors = 0
    for f in report.findings:
        severity = f.severity
        if f.rule == "unsafe-runpath" and f.library in own and severity == "error":
            severity = "warning (set by this build's cuda configuration; fix before shipping)"
        errors += severity == "error"
        print(f"aoti-verify: {severity}: {path}: [{f.rule}] {f.message}\n  fix: {f.fix}", file=sys.stderr)
    print(f"aoti-verify: {path}: {report.verdict if errors or not report.count('error') else 'pass (build tree)'} "
          f"({errors} error(s), {len(report.findings) - errors} other finding(s), profile {profile})")
    return 1 if errors else 0
