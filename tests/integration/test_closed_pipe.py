"""The tools stop quietly when the reader of their output goes away (`aoti-toolchain inspect --json X | head`):
no BrokenPipeError traceback, the exit code of the table (broken_pipe, 128 + SIGPIPE); the installed `aoti-run`
wrapper leaves the native program to SIGPIPE exactly as a shell would.

The closed pipe is made deterministic: the read end is closed before the program starts, so its first write fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from toolchain.errors import exit_code

EXE = sys.executable  # an ELF file every command can read


def _closed_stdout(cmd: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of `cmd` whose stdout is a pipe nobody reads any more."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    return proc.returncode, proc.stderr


COMMANDS = {
    "inspect-json": ["inspect", "--json", EXE],
    "inspect-text": ["inspect", EXE],
    "verify-text": ["verify", "--host", "none", EXE],
    "verify-json": ["verify", "--host", "none", "--format", "json", EXE],
    "help": ["--help"],
    "run-help": ["run", "--help"],
    "version": ["--version"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_aoti_toolchain_exits_quietly_on_a_closed_pipe(name):
    args = COMMANDS[name]
    normal = subprocess.run([sys.executable, "-m", "toolchain", *args], capture_output=True, text=True, timeout=300)
    assert normal.stdout and "Traceback" not in normal.stderr, normal.stderr  # it does write to stdout
    code, err = _closed_stdout([sys.executable, "-m", "toolchain", *args])
    assert code == exit_code("broken_pipe") == 128 + signal.SIGPIPE, (code, err)
    assert err == "", err  # no traceback, no "Exception ignored" at exit, no message


def test_an_error_message_on_a_closed_pipe_is_quiet_too(tmp_path):
    """stdout and stderr into the same closed pipe (`... 2>&1 | head`): the error can't be shown either."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "toolchain", "inspect", str(tmp_path / "missing.so")], stdout=w,
                              stderr=w, timeout=300)
    finally:
        os.close(w)
    assert proc.returncode == exit_code("broken_pipe")


def test_installed_aoti_run_wrapper_ends_like_the_program_on_a_closed_pipe(host_build):
    """Python ignores SIGPIPE and exec keeps it ignored: the wrapper restores it, so the native program is ended by
    SIGPIPE (a shell shows 141) as when it is run directly, instead of exiting 0 with its output lost."""
    wrapper_cmd = [sys.executable, "-m", "toolchain.cli.aoti_run", "--help"]
    native, native_err = _closed_stdout([str(host_build.aoti_run), "--help"])
    wrapped, wrapped_err = _closed_stdout(wrapper_cmd)
    assert native == -signal.SIGPIPE, (native, native_err)
    assert wrapped == native and wrapped_err == "", (wrapped, wrapped_err)
