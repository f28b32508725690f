"""Messages a newcomer meets first: a text file given as .npy, a reference of another shape, a usage error,
--dynamic's syntax, the compiled range read from a plugin's generated input check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolchain.cli import files
from toolchain.cli.main_export import parse_dynamic
from toolchain.errors import CompareError, InputError, UsageError
from toolchain.export import asks_small_sizes
from toolchain.export_contract import compiled_input_ranges

ROOT = Path(__file__).resolve().parents[2]


def test_a_text_file_is_not_a_npy_file(tmp_path):
    f = tmp_path / "x.npy"
    f.write_text("1.0 2.0 3.0\nthis is text\n")
    with pytest.raises(InputError) as exc:
        files.load_npy(f)
    msg = str(exc.value)
    assert "not a .npy file" in msg and "numpy.save" in msg
    assert "pickle" not in msg.replace("pickles are not read", "")  # never suggests allow_pickle


def test_a_reference_of_another_shape_gets_no_tolerance_advice():
    with pytest.raises(CompareError) as exc:
        files.compare([np.zeros((2, 4), np.float32)], [np.zeros((3, 4), np.float32)], 1e-5, 1e-4)
    msg = str(exc.value)
    assert "shape [2, 4], reference [3, 4]" in msg and "shapes differ" in msg
    assert "atol" not in msg and "loosen" not in msg
    with pytest.raises(CompareError) as exc:
        files.compare([np.zeros(4, np.float32)], [np.ones(4, np.float32)], 1e-5, 1e-4)
    assert "loosen" in str(exc.value)


def test_usage_errors_name_the_tool_once():
    p = subprocess.run([sys.executable, "-m", "toolchain", "export", "--weights", "x"], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 2
    assert p.stderr.count("aoti-toolchain") >= 1 and "error: aoti-toolchain" not in p.stderr, p.stderr
    assert p.stderr.startswith("aoti-toolchain: error: export: "), p.stderr


def test_parse_dynamic():
    assert parse_dynamic(["x:0=1..64", "x:1=2..", "mask:0=1..64"]) == {
        "x": {0: (1, 64), 1: (2, None)}, "mask": {0: (1, 64)}}
    for bad in ("x:0", "x=1..64", "x:0=..64", "x:0=64..1", "0x:0=1..2"):
        with pytest.raises(UsageError):
            parse_dynamic([bad])
    with pytest.raises(UsageError, match="given twice"):
        parse_dynamic(["x:0=1..4", "x:0=1..8"])


def test_asks_small_sizes():
    class D:
        def __init__(self, low):
            self.min = low

    assert asks_small_sizes({"x": {0: D(1)}}) and asks_small_sizes([None, {1: D(0)}])
    assert asks_small_sizes({"x": {0: D(None)}})  # no minimum: 0 and 1 are allowed
    assert not asks_small_sizes({"x": {0: D(2)}, "y": None}) and not asks_small_sizes(None)


# What torch 2.13's cpp wrapper writes for Dim("batch", min=1, max=64) traced without size-oblivious reasoning.
WRAPPER = '''
        if (arg0_1_size[0] < 2) {
            std::stringstream ss;
            ss << "input_handles[0]: dim value is too small at 0, "
               << "expected it to be >= 2, " << "but got: "
               << arg0_1_size[0] << "\\\\n";
            throw std::runtime_error(std::move(ss).str());
        }
        if (arg0_1_size[0] > 64) {
            std::stringstream ss;
            ss << "input_handles[0]: dim value is too large at 0, "
               << "expected to be <= 64, " << "but got: "
'''


def test_compiled_input_ranges_from_the_wrapper():
    assert compiled_input_ranges(WRAPPER) == {(0, 0): {"min": 2, "max": 64}}
    assert compiled_input_ranges("no checks here") == {}


def test_progress_lines_and_quiet(capsys):
    from toolchain import progress

    try:
        progress.set_quiet(False)
        with progress.step("compiling"):
            pass
        err = capsys.readouterr().err.splitlines()
        assert err[0] == "aoti-toolchain: compiling ..." and err[1].startswith("aoti-toolchain: compiling: done in ")
        assert err[1].endswith(" s")
        with pytest.raises(ValueError), progress.step("tracing"):
            raise ValueError
        assert "tracing: failed after" in capsys.readouterr().err
        progress.set_quiet(True)
        with progress.step("compiling"):
            progress.note("a note")
        assert capsys.readouterr().err == ""
    finally:
        progress.set_quiet(False)
