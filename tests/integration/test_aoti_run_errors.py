"""Each bad input to aoti-run (and `aoti-toolchain run`) gets a clear message and its exit code."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def run(host_build, *args):
    return subprocess.run([str(host_build.aoti_run), *map(str, args)], capture_output=True, text=True)


def toolchain_run(host_build, *args):
    return subprocess.run([sys.executable, "-m", "toolchain", "run", "--library", str(host_build.lib),
                           *map(str, args)], capture_output=True, text=True)


def test_missing_model_file(host_build, tmp_path):
    p = run(host_build, tmp_path / "nope.pt2", "-o", tmp_path / "o")
    assert p.returncode == 3
    assert "nope.pt2" in p.stderr and "no such file" in p.stderr


def test_missing_input_file(host_build, mlp, tmp_path):
    pt2, _ = mlp
    p = run(host_build, pt2, "-i", tmp_path / "missing.npy", "-o", tmp_path / "o")
    assert p.returncode == 3
    assert "missing.npy" in p.stderr and "no such file" in p.stderr


def test_bad_npy(host_build, mlp, tmp_path):
    pt2, _ = mlp
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"this is not numpy")
    p = run(host_build, pt2, "-i", bad, "-o", tmp_path / "o")
    assert p.returncode == 3
    assert "bad.npy" in p.stderr and p.stderr.startswith("aoti-run: ")


def test_wrong_input_count(host_build, mlp, tmp_path):
    pt2, x = mlp
    p = run(host_build, pt2, "-i", x, "-i", x, "-o", tmp_path / "o")
    assert p.returncode == 3
    assert "takes 1 input" in p.stderr and "got 2" in p.stderr


@pytest.mark.parametrize(("array", "named"), [
    pytest.param(np.zeros((4, 16), np.float64), ("float64", "float32"), id="wrong_dtype"),
    pytest.param(np.zeros((4, 15), np.float32), ("[4, 15]", "dimension 1 must be 16"), id="wrong_shape"),
])
def test_input_that_does_not_fit_the_contract(host_build, mlp, tmp_path, array, named):
    """The message names what the file holds and what the model takes."""
    pt2, _ = mlp
    bad = tmp_path / "bad.npy"
    np.save(bad, array)
    p = run(host_build, pt2, "-i", bad, "-o", tmp_path / "o")
    assert p.returncode == 3
    for text in named:
        assert text in p.stderr, p.stderr


def test_plugin_that_fails_to_load_shows_loader_message(host_build, fake_plugin, tmp_path):
    so = fake_plugin("needs_missing_lib_symbol", imports=["some_function_nobody_defines"])
    p = run(host_build, so, "-o", tmp_path / "o")
    assert p.returncode == 4
    assert "dlopen failed" in p.stderr and "undefined symbol: some_function_nobody_defines" in p.stderr


def test_plugin_importing_unknown_shim_is_named(host_build, fake_plugin, tmp_path):
    so = fake_plugin("needs_unknown_shim", imports=["aoti_torch_cpu_made_up_op", "aoti_torch_get_dim"])
    p = run(host_build, so, "-o", tmp_path / "o")
    assert p.returncode == 4
    assert "aoti_torch_cpu_made_up_op" in p.stderr and "does not provide" in p.stderr
    assert "aoti_torch_get_dim," not in p.stderr  # only the missing one is named


def test_not_a_plugin(host_build, fake_plugin, tmp_path):
    so = fake_plugin("no_entry_points", entry_points=[])
    p = run(host_build, so, "-o", tmp_path / "o")
    assert p.returncode == 4
    assert "missing required entry point" in p.stderr


def test_usage_errors(host_build, tmp_path):
    assert run(host_build).returncode == 2
    assert run(host_build, "m.pt2", "--repeat", "zero", "-o", tmp_path).returncode == 2
    p = run(host_build, "m.pt2", "--bogus")
    assert p.returncode == 2 and "--bogus" in p.stderr
    p = run(host_build, "m.pt2", "--warmup", "5", "-o", tmp_path)
    assert p.returncode == 2 and "--warmup needs --repeat" in p.stderr
    p = run(host_build, "m.pt2", "--repeat", "3", "--warmup", "-1", "-o", tmp_path)
    assert p.returncode == 2 and "--warmup wants a positive integer" in p.stderr


def test_repeat_with_warmup_times_only_the_repeats(host_build, export_example, tmp_path, torch):
    pt2, _, inputs = export_example("mlp", "embedded")
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    p = run(host_build, pt2, "-i", x, "-o", tmp_path / "o", "--repeat", "7", "--warmup", "20", "--quiet")
    assert p.returncode == 0, p.stderr
    assert "latency_us: median=" in p.stdout and p.stdout.rstrip().endswith("n=7"), p.stdout


def test_toolchain_run_compare(host_build, export_example, tmp_path, torch):
    pt2, module, inputs = export_example("mlp", "embedded")
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    with torch.no_grad():
        ref = module(*inputs).numpy()
    np.save(tmp_path / "ref.npy", ref)
    ok = toolchain_run(host_build, pt2, "-i", x, "-o", tmp_path / "o", "--compare", tmp_path / "ref.npy")
    assert ok.returncode == 0, ok.stderr
    assert "output_0: max abs error" in ok.stdout
    np.save(tmp_path / "wrong.npy", ref + 1)
    bad = toolchain_run(host_build, pt2, "-i", x, "-o", tmp_path / "o", "--compare", tmp_path / "wrong.npy")
    assert bad.returncode == 6 and "MISMATCH" in bad.stderr


def test_toolchain_run_bad_inputs(host_build, export_example, fake_plugin, tmp_path):
    pt2, _module, _inputs = export_example("mlp", "embedded")
    missing = toolchain_run(host_build, pt2, "-i", tmp_path / "nope.npy", "-o", tmp_path / "o")
    assert missing.returncode == 3 and "nope.npy: no such file" in missing.stderr
    np.save(tmp_path / "shape.npy", np.zeros((4, 15), np.float32))
    shape = toolchain_run(host_build, pt2, "-i", tmp_path / "shape.npy", "-o", tmp_path / "o")
    assert shape.returncode == 3 and "dimension 1 must be 16" in shape.stderr
    so = fake_plugin("py_unknown_shim", imports=["aoti_torch_cpu_made_up_op"])
    load = toolchain_run(host_build, so, "-o", tmp_path / "o")
    assert load.returncode == 4 and "aoti_torch_cpu_made_up_op" in load.stderr
    assert "Traceback" not in load.stderr + missing.stderr + shape.stderr
