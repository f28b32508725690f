"""docs/cli.md, the command-line reference, generated from the argparse parsers of `aoti-toolchain`, the
help text of `aoti-run` (runtime/tools/aoti_run.cpp) and the exit-code table (toolchain/spec/exit_codes.toml).

    python -m toolchain.cli_doc            rewrite docs/cli.md
    python -m toolchain.cli_doc --check    exit 1 when docs/cli.md is not current
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from toolchain.atomic import write_or_check
from toolchain.errors import EXIT_CODES, exit_code

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
AOTI_RUN_SOURCE = ROOT / "runtime" / "tools" / "aoti_run.cpp"
EXIT_TABLE_HEADER = "| code | name | meaning | used by |"
WIDTH = "100"  # the help text's line width, fixed so the file doesn't depend on the terminal


def _c_string(source: str, name: str) -> str:
    """The value of `const char NAME[] = "..." "...";` in a C++ source (adjacent literals joined)."""
    m = re.search(r"const char " + re.escape(name) + r"\[\]\s*=\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;", source)
    if m is None:
        msg = f"{AOTI_RUN_SOURCE}: no {name}[] string"
        raise ValueError(msg)
    parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
    return "".join(parts).encode().decode("unicode_escape")


def _helps() -> list[tuple[str, str]]:
    from toolchain.cli import COMMANDS, build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out = [("aoti-toolchain", parser.format_help())]
        out += [(f"aoti-toolchain {name}", subs.choices[name].format_help()) for name in COMMANDS]
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def exit_code_table() -> list[str]:
    lines = [EXIT_TABLE_HEADER, "|---:|---|---|---|"]
    lines += [f"| {e.code} | `{e.name}` | {_cell(e.meaning)} | {_cell(', '.join(e.tools))} |" for e in EXIT_CODES]
    return lines


def render() -> str:
    source = AOTI_RUN_SOURCE.read_text(encoding="utf-8")
    lines = [
        "<!-- GENERATED FILE: do not edit. Sources: the argparse parsers (toolchain/cli/), "
        "runtime/tools/aoti_run.cpp, toolchain/spec/exit_codes.toml; regenerate with "
        "`python -m toolchain.cli_doc`. -->",
        "# Command-line reference",
        "",
        "Two tools: `aoti-toolchain` (Python; `.venv/bin/aoti-toolchain` or `python -m toolchain`) and `aoti-run`",
        "(C++, `build/<variant>/dist/bin/aoti-run`). A code means the same in both (the exit-code table below).",
        "",
    ]
    for title, text in _helps():
        lines += [f"## {title}", "", "```text", text.rstrip(), "```", ""]
    lines += ["## aoti-run", "", "```text", _c_string(source, "kUsageLine").rstrip(),
              _c_string(source, "kHelp").rstrip(), "```", ""]
    lines += ["## Exit codes", "",
              "One table for aoti-run and every `aoti-toolchain` command (`toolchain/spec/exit_codes.toml`, generated",
              "into `aoti_host/exit_codes.h` for aoti-run and read by `toolchain/errors.py`). Only regular files are",
              "read as inputs: a FIFO, device, socket or directory given as a model, weights blob, `.npy` or",
              "reference is refused (exit 3) before anything reads it.", "", *exit_code_table(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    return exit_code("ok" if write_or_check(DOC, render(), check, "python -m toolchain.cli_doc") else "failed")


if __name__ == "__main__":
    sys.exit(main())
