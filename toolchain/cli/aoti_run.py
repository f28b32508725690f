"""`aoti-run` on the user's PATH: the console script of the installed wheel replaces itself (exec) with the
native aoti-run program built with the runtime that toolchain.hostlib finds ($AOTI_HOST_LIBRARY's tree, the
installed wheel's, or this checkout's build), so arguments, output and exit codes are the program's own."""

from __future__ import annotations

import os
import sys

from toolchain.errors import exit_code


def main(argv: list[str] | None = None) -> int:
    from toolchain.hostlib import find_library, find_program

    args = sys.argv[1:] if argv is None else argv
    device = "cpu"
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--device=") else (args[i + 1] if a == "--device" and
                                                                       i + 1 < len(args) else None)
        if value is not None and value.startswith("cuda"):
            device = "cuda"
    prog = find_program("aoti-run", device)
    if prog is None:
        lib = find_library(device)
        where = f"no bin/aoti-run beside {lib}" if lib else "no installed or built runtime"
        print(f"aoti-run: error: {where}\n  fix: pip install aoti-toolchain (a platform wheel), or build the "
              "runtime (scons) in a checkout", file=sys.stderr)
        return exit_code("bad_input")
    sys.stdout.flush()
    # Python ignores SIGPIPE and SIGXFSZ, and exec keeps an ignored signal ignored: give the program the
    # dispositions a shell gives it, so that `aoti-run ... | head` ends it quietly as it ends the program run
    # directly (instead of it writing on into a closed pipe and exiting 0 with its output lost).
    import signal

    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    os.execv(prog, [str(prog), *args])
    return exit_code("failed")  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
