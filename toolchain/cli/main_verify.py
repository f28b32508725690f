"""aoti-toolchain verify: prove plugins (and hosts) will load on a target; rule ids and fixes from the rule
table (toolchain/spec/rules.toml)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolchain.errors import exit_code
from toolchain.verify.profiles import DEFAULT_PROFILE, available


def exit_codes_help() -> str:
    """What each exit status means for verify; the numbers come from the exit-code table
    (toolchain/spec/exit_codes.toml)."""
    return (f"exit codes: {exit_code('ok')} pass (warnings allowed unless --strict); {exit_code('failed')} failed "
            f"(an error, or a warning with --strict); {exit_code('usage')} usage error; {exit_code('bad_input')} an "
            "input that cannot be read (not-elf, truncated, malformed, missing)")


def main(args: argparse.Namespace) -> int:
    from toolchain.verify.scans import start

    # The code scans start first, in forked children: they decode on other CPUs while this process imports
    # the checks, reads the host and the plugins' symbols.
    scans = start(args.files, args.kind)
    try:
        from toolchain.report import render
        from toolchain.verify import verify_paths

        host, source = resolve_host(args.host)
        report = verify_paths(args.files, host=host, profile=args.profile, strict=args.strict, kind=args.kind,
                              host_source=source, background=scans or False)
    finally:
        if scans is not None:
            scans.close()
    text = render(report, args.format)
    if args.output:
        from toolchain.atomic import write_text

        write_text(Path(args.output), text)
        print(f"{report.verdict.upper()}: {report.count('error')} error(s), {report.count('warning')} warning(s) "
              f"in {len(report.files)} file(s); {args.format} report -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return report.exit_code


def resolve_host(arg: str | None) -> tuple[str | None, str]:
    """--host: a path, "none" (standalone), or absent: this project's runtime library (UsageError when it is
    not built). Returns the host and the report's line on where it came from."""
    from toolchain.verify.core import default_host

    if arg is None:
        return str(default_host()), "default: this project's runtime library, the host aoti-run and toolchain.runtime load " \
            "plugins in (--host PATH for another, --host none for standalone)"
    if arg == "none":
        return None, "none (--host none): each file checked standalone, as if loaded by a host that provides nothing"
    return str(Path(arg)), "--host"


FORMATS = ("text", "json", "sarif", "junit")
KINDS = ("auto", "plugin", "host", "library", "python-extension")


def register(sub) -> None:
    v = sub.add_parser("verify", help="prove plugins (and hosts) will load on a target; rule ids, fixes",
                       description="Check plugins, .pt2 packages, hosts and libraries. " + exit_codes_help())
    v.add_argument("files", nargs="+", metavar="FILE", help="plugin .so, .pt2, host program or shared library")
    v.add_argument("--host", help="the host program or runtime library the plugins will be loaded into (default: "
                   "this project's runtime library, libaoti_host.so; 'none': check each file standalone)")
    v.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"target profile (default {DEFAULT_PROFILE}: this machine); one of {', '.join(available())}")
    v.add_argument("--format", default="text", choices=FORMATS,
                   help="report format: text for people, json/sarif/junit for CI tools (default text)")
    v.add_argument("-o", "--output", help="write the report here (atomically) instead of stdout")
    v.add_argument("--strict", action="store_true", help="warnings fail too")
    v.add_argument("--kind", default="auto", choices=KINDS,
                   help="treat every FILE as this kind (default: decided from its symbols)")
    v.set_defaults(func=main)
