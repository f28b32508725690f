"""The CLI's help formatter finds its width as argparse's own does (shutil.get_terminal_size), without
importing shutil: help texts and usage errors wrap the same."""

from __future__ import annotations

import argparse

import pytest

from toolchain.cli.parser import _Formatter, build_parser


@pytest.mark.parametrize("columns", [None, "", "0", "-3", "abc", "40", "200"])
def test_width_is_argparses(columns, monkeypatch):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _Formatter("aoti-toolchain")._width == argparse.HelpFormatter("aoti-toolchain")._width
    ours = build_parser("verify")
    plain = build_parser("verify")
    for p in (plain, *plain._subparsers._group_actions[0].choices.values()):
        p.formatter_class = argparse.HelpFormatter
    assert ours.format_help() == plain.format_help()
    assert ours._subparsers._group_actions[0].choices["verify"].format_help() == \
        plain._subparsers._group_actions[0].choices["verify"].format_help()
