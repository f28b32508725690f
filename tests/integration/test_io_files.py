"""Inputs and outputs of aoti-run and `aoti-toolchain run`: only regular files are read (a FIFO never blocks,
/dev/zero is never read), reads are bounded by the declared shape, an unusable output is exit 3 with nothing
half-written; both CLIs give each case the same code (the one exit-code table)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from toolchain.errors import EXIT_CODES, exit_code

BAD_INPUT = exit_code("bad_input")
TIMEOUT = 60  # seconds; a blocking read would hit it (the FIFO has no writer, ever)


def aoti_run(host_build, *args):
    return subprocess.run([str(host_build.aoti_run), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def toolchain_run(host_build, *args):
    return subprocess.run([sys.executable, "-m", "toolchain", "run", "--library", str(host_build.lib),
                           *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


CLIS = {"aoti-run": aoti_run, "aoti-toolchain run": toolchain_run}


@pytest.fixture(params=sorted(CLIS))
def cli(request, host_build):
    fn = CLIS[request.param]
    return lambda *args: fn(host_build, *args)


def expect_bad_input(proc, *needles):
    assert proc.returncode == BAD_INPUT, proc.stdout + proc.stderr
    for n in needles:
        assert str(n) in proc.stderr, (n, proc.stderr)
    assert "Traceback" not in proc.stderr


def npy_bytes(header: str, body: bytes, major: int = 1, pad_to: int | None = None) -> bytes:
    """A .npy file laid out by hand: magic, version, header length, header, body."""
    text = header.encode()
    total = pad_to if pad_to is not None else len(text) + 1
    text = text + b" " * (total - len(text) - 1) + b"\n"
    length = struct.pack("<H" if major == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([major, 0]) + length + text + body


@pytest.fixture()
def work(tmp_path):
    """A dummy model (a regular file: inputs and -o are checked before any load), a good input, a FIFO."""
    (tmp_path / "m.pt2").write_bytes(b"not loaded: the inputs are refused first")
    np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float32))
    os.mkfifo(tmp_path / "fifo")  # never opened for writing by anyone
    return tmp_path


# ------------------------------------------------------------------------------------------- inputs

def test_fifo_as_input_returns_at_once(cli, work):
    p = cli(work / "m.pt2", "-i", work / "fifo", "-o", work / "out")
    expect_bad_input(p, work / "fifo", "FIFO")
    assert not (work / "out").exists()


def test_dev_zero_as_input(cli, work):
    p = cli(work / "m.pt2", "-i", "/dev/zero", "-o", work / "out")
    expect_bad_input(p, "/dev/zero", "character device")


def test_directory_as_input(cli, work):
    (work / "d.npy").mkdir()
    p = cli(work / "m.pt2", "-i", work / "d.npy", "-o", work / "out")
    expect_bad_input(p, work / "d.npy", "directory")


@pytest.mark.parametrize("model", ["/dev/null", "fifo"])
def test_device_or_fifo_as_the_program(cli, work, model):
    path = model if model.startswith("/") else work / model
    p = cli(path, "-i", work / "x.npy", "-o", work / "out")
    expect_bad_input(p, path, "character device" if model == "/dev/null" else "FIFO")


def test_fifo_as_weights(cli, work):
    p = cli(work / "m.pt2", "--weights", work / "fifo", "-i", work / "x.npy", "-o", work / "out")
    expect_bad_input(p, work / "fifo", "FIFO")


def test_fifo_as_compare_reference(host_build, work):
    p = toolchain_run(host_build, work / "m.pt2", "-i", work / "x.npy", "-o", work / "out",
                      "--compare", work / "fifo")
    expect_bad_input(p, work / "fifo", "FIFO")


def test_huge_declared_shape_tiny_body(cli, work):
    bad = work / "huge.npy"
    bad.write_bytes(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000), }",
                              b"\0" * 16))
    p = cli(work / "m.pt2", "-i", bad, "-o", work / "out")
    expect_bad_input(p, bad, "40000000000000000")  # the bytes the shape needs, refused before allocating


def test_truncated_body(cli, work):
    bad = work / "cut.npy"
    bad.write_bytes(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 16), }", b"\0" * 255))
    p = cli(work / "m.pt2", "-i", bad, "-o", work / "out")
    expect_bad_input(p, bad, "truncated", "256", "255")


def test_trailing_bytes(cli, work):
    bad = work / "long.npy"
    bad.write_bytes(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 12))
    p = cli(work / "m.pt2", "-i", bad, "-o", work / "out")
    expect_bad_input(p, bad, "4 bytes after the data")


def test_oversized_header(cli, work):
    bad = work / "header.npy"
    bad.write_bytes(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", b"\0" * 4, major=2,
                              pad_to=(2 << 20)))
    p = cli(work / "m.pt2", "-i", bad, "-o", work / "out")
    expect_bad_input(p, bad, "header")


def test_announced_header_larger_than_the_file(cli, work):
    bad = work / "liar.npy"
    bad.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{'descr'")
    p = cli(work / "m.pt2", "-i", bad, "-o", work / "out")
    expect_bad_input(p, bad)


# ------------------------------------------------------------------------------------------ outputs

def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*")) if d.exists() else []


def test_outdir_under_a_regular_file(cli, work):
    # Holds for root too: nobody can create a directory below a regular file.
    (work / "plain").write_text("a file")
    p = cli(work / "m.pt2", "-i", work / "x.npy", "-o", work / "plain" / "out")
    expect_bad_input(p, work / "plain" / "out", "cannot create the output directory")
    assert (work / "plain").read_text() == "a file"


def test_outdir_is_a_fifo_or_a_file(cli, work):
    p = cli(work / "m.pt2", "-i", work / "x.npy", "-o", work / "fifo")
    expect_bad_input(p, work / "fifo", "not a directory")
    p = cli(work / "m.pt2", "-i", work / "x.npy", "-o", work / "x.npy")
    expect_bad_input(p, work / "x.npy", "not a directory")


def test_outdir_is_a_dangling_symlink_into_nowhere_writable(cli, work):
    (work / "plain").write_text("a file")
    (work / "link").symlink_to(work / "plain" / "below")
    p = cli(work / "m.pt2", "-i", work / "x.npy", "-o", work / "link")
    expect_bad_input(p, work / "link")
    assert (work / "plain").read_text() == "a file"


def test_outdir_without_write_permission(cli, work):
    if os.geteuid() == 0:
        pytest.skip("running as root: mode 0500 does not stop root writing (the parent-is-a-file case covers it)")
    locked = work / "locked"
    locked.mkdir(mode=0o500)
    try:
        p = cli(work / "m.pt2", "-i", work / "x.npy", "-o", locked)
        expect_bad_input(p, locked, "not writable")
        assert _leftovers(locked) == []
    finally:
        locked.chmod(0o700)


@pytest.fixture(scope="module")
def mlp(export_example, tmp_path_factory):
    pt2, _module, inputs = export_example("mlp", "embedded")
    d = tmp_path_factory.mktemp("mlp_io")
    np.save(d / "x.npy", inputs[0].numpy())
    return pt2, d / "x.npy"


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_output_file_path_taken_by_a_directory_or_fifo(cli, mlp, tmp_path, kind):
    pt2, x = mlp
    out = tmp_path / "out"
    out.mkdir()
    target = out / "output_0.npy"
    target.mkdir() if kind == "directory" else os.mkfifo(target)
    p = cli(pt2, "-i", x, "-o", out)
    expect_bad_input(p, "output_0.npy", "directory" if kind == "directory" else "FIFO")
    assert _leftovers(out) == ["output_0.npy"]  # nothing half-written beside it, the target untouched
    assert target.is_dir() if kind == "directory" else target.is_fifo()


def test_good_run_still_writes_outputs(cli, mlp, tmp_path):
    pt2, x = mlp
    p = cli(pt2, "-i", x, "-o", tmp_path / "new" / "out")
    assert p.returncode == exit_code("ok"), p.stderr
    assert _leftovers(tmp_path / "new" / "out") == ["output_0.npy"]
    assert np.load(tmp_path / "new" / "out" / "output_0.npy").shape[0] == 4


# ------------------------------------------------------------------------- one code for both CLIs

def test_unknown_method_is_a_usage_error_in_both(cli, mlp, tmp_path):
    pt2, x = mlp
    p = cli(pt2, "--method", "nope", "-i", x, "-o", tmp_path / "o")
    assert p.returncode == exit_code("usage"), p.stderr
    assert "nope" in p.stderr and "forward" in p.stderr


def test_wrong_or_missing_weights_blob_is_bad_input_in_both(cli, export_example, tmp_path):
    pt2, _module, inputs = export_example("mlp", "blob")
    with zipfile.ZipFile(pt2) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        zf.extract(so, tmp_path)
    np.save(tmp_path / "x.npy", inputs[0].numpy())
    (tmp_path / "small.blob").write_bytes(b"\0" * 64)
    missing = cli(tmp_path / so, "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    expect_bad_input(missing, "--weights")
    wrong = cli(tmp_path / so, "--weights", tmp_path / "small.blob", "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    expect_bad_input(wrong, "small.blob", "64 bytes")


def test_aoti_run_help_lists_its_codes_from_the_table(host_build):
    p = subprocess.run([str(host_build.aoti_run), "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == exit_code("ok")
    listed = [int(line.split()[0]) for line in p.stdout.split("Exit codes:\n", 1)[1].splitlines() if line.strip()]
    assert listed == [e.code for e in EXIT_CODES if "aoti-run" in e.tools]
