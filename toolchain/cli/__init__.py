"""aoti-toolchain: command-line entry point (`aoti-toolchain ...` or `python -m toolchain ...`).

The parser is toolchain.cli.parser (argparse), built for the command a command line names; each command's
module (toolchain/cli/main_<command>.py) imports its work when it runs."""

from __future__ import annotations

import sys

COMMANDS = ("run", "export", "demo", "verify", "inspect", "patch", "serve", "triton-repo", "triton-backend-dir",
            "contract")


def build_parser(only: str | None = None):
    """toolchain.cli.parser.build_parser: the parser of every command, or of `only`."""
    from toolchain.cli.parser import build_parser as build

    return build(only)


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
    from toolchain import parsed_cache

    parsed_cache.enable_writes()  # the command line keeps the parsed spec tables (toolchain/parsed_cache.py)
    args_in = sys.argv[1:] if argv is None else argv
    command = _command(args_in)
    try:
        code = _run(args_in)
        if argv is None and sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        if not _output_closed():
            raise  # a pipe of the command's own (to a program it runs), not its output: a bug to report
        from toolchain.errors import exit_code

        return exit_code("broken_pipe")
    except SystemExit:  # --help, --version: printed, then argparse exits
        if argv is None and _output_closed():
            from toolchain.errors import exit_code

            return exit_code("broken_pipe")
        raise
    if argv is None and command in _NO_TEARDOWN:
        _exit_without_teardown(code)
    return code


def _output_closed() -> bool:
    """Whether the reader of stdout or stderr went away (`aoti-toolchain inspect --json X | head`): each such
    stream is pointed at /dev/null, so that what is still buffered does not fail again when Python exits, and
    True; False when both are fine (the broken pipe was another one). The recipe of Python's signal module
    documentation ("Note on SIGPIPE"), for the streams whose far end poll() reports gone."""
    import os
    import select

    closed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            if not any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0)):
                continue
            closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no stream (None), no descriptor, or closed
            continue
    return closed


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
    """Parse the command line and run its command."""
    from toolchain.errors import ToolchainError, exit_code

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
