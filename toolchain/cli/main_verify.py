"""aoti-toolchain verify: prove plugins (and hosts) will load on a target; rule ids and fixes from the rule
table (toolchain/spec/rules.toml)."""

from __future__ import annotations

import sys

from toolchain.verify.profiles import DEFAULT_PROFILE

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

EXIT_CODES = ("exit codes: 0 pass (warnings allowed unless --strict); 1 failed (an error, or a warning with "
              "--strict); 2 usage error; 3 an input that cannot be read (not-elf, truncated, malformed, missing)")


def main(args: argparse.Namespace) -> int:
    from toolchain.verify.scans import start

    # The code scans start first, in children: they decode on other CPUs while this process imports the
    # checks, reads the host and the plugins' symbols.
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
        from pathlib import Path

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
    from toolchain.verify.core import default_host_path

    if arg is None:
        return default_host_path(), "default: this project's runtime library, the host aoti-run and toolchain.runtime load " \
            "plugins in (--host PATH for another, --host none for standalone)"
    if arg == "none":
        return None, "none (--host none): each file checked standalone, as if loaded by a host that provides nothing"
    from toolchain._startup import path_str

    return path_str(arg), "--host"


def _profile_names() -> str:
    from toolchain.verify.profiles import available

    return ", ".join(available())


FORMATS = ("text", "json", "sarif", "junit")
KINDS = ("auto", "plugin", "host", "library", "python-extension")
# verify's options, the one table both readings use: register() gives them to argparse, quick_args() reads the
# common command lines without it. (option strings, dest, default, choices: None for any value, "flag" for
# an option without one, help)
OPTIONS: tuple[tuple[tuple[str, ...], str, object, tuple[str, ...] | str | None, str], ...] = (
    (("--host",), "host", None, None, "the host program or runtime library the plugins will be loaded into (default: "
     "this project's runtime library, libaoti_host.so; 'none': check each file standalone)"),
    (("--profile",), "profile", DEFAULT_PROFILE, None,
     f"target profile (default {DEFAULT_PROFILE}: this machine); one of {{profiles}}"),
    (("--format",), "format", "text", FORMATS,
     "report format: text for people, json/sarif/junit for CI tools (default text)"),
    (("-o", "--output"), "output", None, None, "write the report here (atomically) instead of stdout"),
    (("--strict",), "strict", False, "flag", "warnings fail too"),
    (("--kind",), "kind", "auto", KINDS, "treat every FILE as this kind (default: decided from its symbols)"),
)


def quick_args(argv: list[str]):
    """verify's arguments (`argv`: after "verify") read as argparse reads them, for the command lines this
    reading is sure of: FILEs in one run, the options above as full or unique abbreviated long options,
    --opt=VALUE, -o VALUE / -oVALUE / -o=VALUE, choices checked. Anything else (--help, --, an unknown or
    ambiguous option, a value starting with '-', FILEs on both sides of an option, a value not among the
    choices) gives None: argparse reads it and says what is wrong. The CLI uses it to start the code scans,
    and skip argparse, before anything else is imported (tests/unit/test_cli_prestart.py holds it to argparse)."""
    from types import SimpleNamespace

    by_name = {opt: row for row in OPTIONS for opt in row[0]}
    values: dict[str, object] = {row[1]: row[2] for row in OPTIONS}
    files: list[str] = []
    runs = 0  # runs of FILEs: argparse takes the first one only
    last_was_file = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            runs += not last_was_file
            last_was_file = True
            files.append(arg)
            continue
        last_was_file = False
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name == "--" or (name not in by_name and (" " in arg)):
                return None
            if name not in by_name:
                matches = [o for o in by_name if o.startswith("--") and o.startswith(name)]
                if len(matches) != 1:
                    return None
                name = matches[0]
            explicit = bool(eq)
        else:
            name, value = arg[:2], arg[2:].removeprefix("=")
            if name not in by_name:
                return None
            explicit = len(arg) > 2
        _, dest, _, choices, _ = by_name[name]
        if choices == "flag":
            if explicit:
                return None
            values[dest] = True
            continue
        if not explicit:
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if isinstance(choices, tuple) and value not in choices:
            return None
        values[dest] = value
    if runs != 1:
        return None
    return SimpleNamespace(command="verify", files=files, func=main, **values)


def register(sub) -> None:
    v = sub.add_parser("verify", help="prove plugins (and hosts) will load on a target; rule ids, fixes",
                       description="Check plugins, .pt2 packages, hosts and libraries. " + EXIT_CODES)
    v.add_argument("files", nargs="+", metavar="FILE", help="plugin .so, .pt2, host program or shared library")
    for flags, dest, default, choices, help_text in OPTIONS:
        if choices == "flag":
            v.add_argument(*flags, dest=dest, action="store_true", help=help_text)
        else:
            v.add_argument(*flags, dest=dest, default=default, choices=choices,
                           help=help_text.replace("{profiles}", _profile_names()) if "{profiles}" in help_text
                           else help_text)
    v.set_defaults(func=main)
