"""The parser of `aoti-toolchain` (argparse), built for the command a command line names: imported by
toolchain.cli once the command is known, so that a command whose work starts before parsing (verify's code
scans) starts it before argparse is imported."""

from __future__ import annotations

import argparse
import sys

from toolchain.cli import COMMANDS
from toolchain.errors import UsageError


def _columns() -> int:
    """shutil.get_terminal_size().columns (COLUMNS, else the terminal of sys.__stdout__, else 80), without
    importing shutil (and the zlib/bz2/lzma it imports) on every start."""
    import os

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


class _Formatter(argparse.HelpFormatter):
    """argparse's default help format, its width found as argparse finds it (argparse builds a formatter for
    every argument it registers, and its first one imports shutil for the width)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prefixes "aoti-toolchain: error:", so only a sub-command's name goes in front
        command = self.prog.removeprefix("aoti-toolchain").strip()
        raise UsageError(f"{command}: {message}" if command else message, fix=f"see `{self.prog} --help`")


def version_text() -> str:
    """`aoti-toolchain --version`: the toolchain's version, the runtime library it uses and that runtime's
    build configuration (its manifest.json), the same two lines `aoti-run --version` prints."""
    import toolchain
    from toolchain.hostlib import build_info, find_library

    lines = [f"aoti-toolchain {toolchain.__version__}"]
    lib = find_library()
    info = build_info(lib) if lib is not None else None
    if lib is None or not lib.is_file():
        lines.append("runtime: none found (pip install aoti-toolchain, or scons in a checkout, or set AOTI_HOST_LIBRARY)")
    elif info is None:
        lines.append(f"runtime: {lib} (no manifest.json beside it: build configuration unknown)")
    else:
        if info.get("version") != toolchain.__version__:
            lines.append(f"warning: the runtime is version {info.get('version')}, the toolchain {toolchain.__version__}")
        lines.append(f"runtime: {info.get('build_config', '?')}")
        lines.append(f"library: {lib}")
    return "\n".join(lines)


class _VersionAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(0)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of `aoti-toolchain`: one module per command (toolchain/cli/main_<command>.py) registers its
    sub-parser and runs it; a command's work is imported when it runs. `only`: register that command alone
    (main() does when the command line names one, so `verify` does not import what `export` or `serve`
    need just to build their parsers; anything else, --help included, gets every command)."""
    import importlib

    p = _Parser(prog="aoti-toolchain", description="Build, check, repair and run AOTInductor plugins.")
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="print the version and the runtime's build configuration, then exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # a command `a-b` is registered by main_a.py, with its other `a-*` commands (triton-repo, triton-backend-dir)
    for module in dict.fromkeys(name.split("-")[0] for name in (COMMANDS if only is None else (only,))):
        importlib.import_module(f"toolchain.cli.main_{module}").register(sub)
    return p
