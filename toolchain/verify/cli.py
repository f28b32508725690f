"""Subcommands verify, inspect and patch, registered into `aoti-toolchain`'s parser by toolchain/cli.py.
Only argparse here: the work is imported when a command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolchain.verify.profiles import DEFAULT_PROFILE

EXIT_CODES = ("exit codes: 0 pass (warnings allowed unless --strict); 1 failed (an error, or a warning with "
              "--strict); 2 usage error; 3 an input that cannot be read (not-elf, truncated, malformed, missing)")


def cmd_verify(args: argparse.Namespace) -> int:
    from toolchain.atomic import write_text
    from toolchain.verify import verify_paths
    from toolchain.verify.formats import render

    host, source = resolve_host(args.host)
    report = verify_paths(args.files, host=host, profile=args.profile, strict=args.strict, kind=args.kind,
                          host_source=source)
    text = render(report, args.format)
    if args.output:
        write_text(Path(args.output), text)
        print(f"{report.verdict.upper()}: {report.count('error')} error(s), {report.count('warning')} warning(s) "
              f"in {len(report.files)} file(s); {args.format} report -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return report.exit_code


def resolve_host(arg: str | None) -> tuple[Path | None, str]:
    """--host: a path, "none" (standalone), or absent: this project's runtime library (UsageError when it is
    not built). Returns the host and the report's line on where it came from."""
    from toolchain.verify import default_host

    if arg is None:
        return default_host(), "default: this project's runtime library, the host aoti-run and toolchain.runtime load " \
            "plugins in (--host PATH for another, --host none for standalone)"
    if arg == "none":
        return None, "none (--host none): each file checked standalone, as if loaded by a host that provides nothing"
    return Path(arg), "--host"


def _profile_names() -> str:
    from toolchain.verify.profiles import available

    return ", ".join(available())


def cmd_inspect(args: argparse.Namespace) -> int:
    from toolchain.inspect import cmd_inspect as run

    return run(args)


def cmd_patch(args: argparse.Namespace) -> int:
    from toolchain.patch import cmd_patch as run

    return run(args)


def register_commands(sub) -> None:
    v = sub.add_parser("verify", help="prove plugins (and hosts) will load on a target; rule ids, fixes",
                       description="Check plugins, .pt2 packages, hosts and libraries. " + EXIT_CODES)
    v.add_argument("files", nargs="+", metavar="FILE", help="plugin .so, .pt2, host program or shared library")
    v.add_argument("--host", help="the host program or runtime library the plugins will be loaded into (default: "
                   "this project's runtime library, libaoti_host.so; 'none': check each file standalone)")
    v.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"target profile (default {DEFAULT_PROFILE}: this machine); one of {_profile_names()}")
    v.add_argument("--format", choices=("text", "json", "sarif", "junit"), default="text")
    v.add_argument("-o", "--output", help="write the report here (atomically) instead of stdout")
    v.add_argument("--strict", action="store_true", help="warnings fail too")
    v.add_argument("--kind", choices=("auto", "plugin", "host", "library"), default="auto",
                   help="treat every FILE as this kind (default: decided from its symbols)")
    v.set_defaults(func=cmd_verify)

    i = sub.add_parser("inspect", help="kind, arch, DT_NEEDED, RUNPATH, entry points, shims, versions, stack")
    i.add_argument("files", nargs="+", metavar="FILE")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=cmd_inspect)

    p = sub.add_parser("patch", help="repair a plugin (DT_NEEDED, exec stack, RUNPATH), proven before writing",
                       description="Operations are planned first; the result must pass verify and an RTLD_NOW "
                       "dlopen probe in a subprocess, or nothing is written.")
    p.add_argument("plugin", metavar="PLUGIN")
    p.add_argument("--add-needed", action="append", default=[], metavar="LIB",
                   help="append LIB to DT_NEEDED after the existing entries (repeat)")
    p.add_argument("--clear-execstack", action="store_true", help="clear the executable-stack flag")
    p.add_argument("--set-runpath", metavar="P", help="set DT_RUNPATH (removes DT_RPATH), e.g. '$ORIGIN'")
    p.add_argument("--fix", action="store_true", help="apply every repair verify proposes")
    p.add_argument("--host", help="host runtime library/program to verify and probe against")
    p.add_argument("--profile", default=DEFAULT_PROFILE)
    dest = p.add_mutually_exclusive_group()
    dest.add_argument("-o", "--output", metavar="OUT", help="write the patched plugin here")
    dest.add_argument("--in-place", action="store_true", help="replace PLUGIN, keeping PLUGIN.orig")
    p.set_defaults(func=cmd_patch, no_probe=False)
