"""The command-line reference (docs/cli.md) is generated from the parsers and current, and every option of
every command has help text (the reference is only as good as the parsers' help)."""

from __future__ import annotations

import argparse

from toolchain import cli_doc
from toolchain.cli import COMMANDS, build_parser


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [("aoti-toolchain", parser)] + [(f"aoti-toolchain {n}", subs.choices[n]) for n in COMMANDS]


def test_every_option_and_argument_has_help():
    missing = [f"{name}: {'/'.join(a.option_strings) or a.dest}"
               for name, p in _parsers() for a in p._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not (a.help or "").strip()]
    assert not missing, "options without help text: " + ", ".join(missing)


def test_every_command_has_a_description_line():
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in subs._choices_actions}
    assert all(helps.get(n) for n in COMMANDS), helps


def test_cli_reference_is_current():
    assert cli_doc.DOC.read_text(encoding="utf-8") == cli_doc.render(), \
        "docs/cli.md is stale: python -m toolchain.cli_doc"
    assert cli_doc.main(["--check"]) == 0


def test_export_help_shows_dynamic_shapes_with_an_example():
    text = dict(cli_doc._helps())["aoti-toolchain export"]
    assert "--dynamic NAME:DIM=MIN..MAX" in text
    assert "--dynamic x:0=1..64" in text and "dynamic_shapes" in text
