"""aoti-toolchain: command-line entry point (`aoti-toolchain ...` or `python -m toolchain ...`)."""

from __future__ import annotations

import argparse
import sys

from toolchain.errors import ToolchainError, UsageError, exit_code


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


COMMANDS = ("run", "export", "demo", "verify", "inspect", "patch", "serve")


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
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"toolchain.cli.main_{name}").register(sub)
    return p


def _command(argv: list[str]) -> str | None:
    """The command the arguments name when they start with one (the top-level parser takes only options
    before it, and an option there means the full parser: --help lists every command)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


# Commands that leave nothing for the interpreter's finalization to do (no threads, atexit handlers, child
# processes or open files once they return): run as the program, they end with os._exit once their output is
# flushed, instead of a teardown that frees every module and object one by one (~13 ms of a small plugin's
# verify, against ~1 ms for an empty interpreter).
_NO_TEARDOWN = frozenset({"verify"})


def main(argv: list[str] | None = None) -> int:
    """The `aoti-toolchain` program (argv None: sys.argv, as the console script and `python -m toolchain` call
    it), or one command line run in this process (argv given: it returns the exit code and nothing else)."""
    args_in = sys.argv[1:] if argv is None else argv
    code = _run(args_in)
    if argv is None and _command(args_in) in _NO_TEARDOWN:
        _exit_without_teardown(code)
    return code


def _exit_without_teardown(code: int) -> None:
    """os._exit(code) once stdout and stderr are flushed; returns (the normal exit follows) where a flush
    fails, e.g. a reader that closed the pipe, or a stream is missing (started with it closed: None), so that
    Python reports it as it always does."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        return
    os._exit(code)


def _run(args_in: list[str]) -> int:
    try:
        args = build_parser(_command(args_in)).parse_args(args_in)
        return int(args.func(args))
    except ToolchainError as exc:
        print(f"aoti-toolchain: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        # subprocess is imported by the commands that run programs; until one is, nothing can raise its error
        subprocess = sys.modules.get("subprocess")
        if subprocess is None or not isinstance(exc, subprocess.CalledProcessError):
            raise
        print(f"aoti-toolchain: error: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}", file=sys.stderr)
        return exit_code("failed")
    except KeyboardInterrupt:
        return exit_code("interrupted")
