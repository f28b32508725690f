"""aoti-toolchain patch: repair a plugin (DT_NEEDED, exec stack, RUNPATH, GNU_UNIQUE), proven before writing."""

from __future__ import annotations

from pathlib import Path

from toolchain.errors import UsageError, exit_code
from toolchain.hostlib import find_library
from toolchain.patch import Op, patch_file, probe_library
from toolchain.verify.profiles import DEFAULT_PROFILE


def main(args) -> int:
    ops = [Op("add-needed", lib) for lib in args.add_needed]
    if args.clear_execstack:
        ops.append(Op("clear-execstack"))
    if args.set_runpath is not None:
        ops.append(Op("set-runpath", args.set_runpath))
    if args.rebind_unique:
        ops.append(Op("rebind-unique"))
    if not ops and not args.fix:
        raise UsageError("nothing to do", fix="give --add-needed, --clear-execstack, --set-runpath, --rebind-unique "
                         "or --fix")
    steps, written = patch_file(Path(args.plugin), ops, out=Path(args.output) if args.output else None,
                                in_place=args.in_place, host=args.host, profile=args.profile, use_fix=args.fix,
                                do_probe=not args.no_probe, probe_lib=probe_library(args.host, find_library()))
    if not steps:
        print(f"{args.plugin}: nothing to change" + (f"; copied to {written}" if written else ""))
        return exit_code("ok")
    print(f"{args.plugin}: {'; '.join(map(str, steps))} -> {written} (verified, dlopen probe passed)"
          + (f"; original kept as {args.plugin}.orig" if args.in_place else ""))
    return exit_code("ok")


def register(sub) -> None:
    p = sub.add_parser("patch", help="repair a plugin (DT_NEEDED, exec stack, RUNPATH), proven before writing",
                       description="Operations are planned first; the result must pass verify and an RTLD_NOW "
                       "dlopen probe in a subprocess, or nothing is written.")
    p.add_argument("plugin", metavar="PLUGIN", help="the plugin .so to repair")
    p.add_argument("--add-needed", action="append", default=[], metavar="LIB",
                   help="append LIB to DT_NEEDED after the existing entries (repeat)")
    p.add_argument("--clear-execstack", action="store_true", help="clear the executable-stack flag")
    p.add_argument("--set-runpath", metavar="P", help="set DT_RUNPATH (removes DT_RPATH), e.g. '$ORIGIN'")
    p.add_argument("--rebind-unique", action="store_true",
                   help="make its GNU_UNIQUE symbols GLOBAL where safe, so that dlclose can unload it "
                   "(docs/verify.md, Unloading)")
    p.add_argument("--fix", action="store_true", help="apply every repair verify proposes")
    p.add_argument("--host", help="host runtime library/program to verify and probe against")
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"the target system the result must pass verify for (default {DEFAULT_PROFILE})")
    dest = p.add_mutually_exclusive_group()
    dest.add_argument("-o", "--output", metavar="OUT", help="write the patched plugin here")
    dest.add_argument("--in-place", action="store_true", help="replace PLUGIN, keeping PLUGIN.orig")
    p.set_defaults(func=main, no_probe=False)
