"""Issue 7: inputs checked and laid out right, aoti_torch_check failures as errors (real torch plugins).

- a package with a contract: every violation gets its own error; a layout mismatch is converted, or
  refused with --strict; a layout given on the command line must agree with the contract.
- a plugin without a contract (a bare .so exported elsewhere): the runtime turns on the plugin's own
  input checks, so a mismatch fails cleanly instead of computing garbage; `-i x.npy:channels_last` tells
  the runtime the layout the plugin was built for.
- an embedding index out of range: the plugin's aoti_torch_check fails the Run with its message, the
  process survives and the next Run works.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import pytest

from toolchain import runtime
from toolchain.errors import InputError, RunError

pytestmark = pytest.mark.slow


def eager(module, inputs):
    import torch

    with torch.no_grad():
        out = module(*inputs)
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


def aoti_run(host_build, *args):
    return subprocess.run([str(host_build.aoti_run), *map(str, args)], capture_output=True, text=True)


def toolchain_run(host_build, *args):
    return subprocess.run([sys.executable, "-m", "toolchain", "run", "--library", str(host_build.lib),
                           *map(str, args)], capture_output=True, text=True)


def bare_plugin(pt2, dest):
    """The plugin .so of a package, without the package (so without its contract)."""
    with zipfile.ZipFile(pt2) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / "plugin.so"
        path.write_bytes(zf.read(so))
    return path


# ---------------- aoti_torch_check ----------------

def test_embedding_index_out_of_range_fails_the_run_and_the_next_run_works(host_lib, export_example):
    pt2, module, inputs = export_example("embedding", "embedded")
    good = inputs[0].numpy()
    bad = good.copy()
    bad[1, 2] = 50  # the table has 50 rows
    with runtime.load(pt2, library_path=host_lib) as prog:
        with pytest.raises(RunError) as info:
            prog.run([bad])
        msg = str(info.value)
        assert "aoti_torch_check" in msg or "index out of bounds" in msg, msg
        assert "50" in msg, msg
        got = prog.run([good])[0]  # the same program keeps working
    np.testing.assert_allclose(got, eager(module, inputs)[0], rtol=1e-5, atol=1e-5)


def test_aoti_run_exits_5_with_the_plugins_message(host_build, export_example, tmp_path):
    pt2, _module, inputs = export_example("embedding", "embedded")
    bad = inputs[0].numpy().copy()
    bad[0, 0] = -51
    np.save(tmp_path / "bad.npy", bad)
    p = aoti_run(host_build, pt2, "-i", tmp_path / "bad.npy", "-o", tmp_path / "o")
    assert p.returncode == 5, p.stderr
    assert "the run failed" in p.stderr and "index out of bounds" in p.stderr, p.stderr
    assert not (tmp_path / "o" / "output_0.npy").exists()


# ---------------- with a contract ----------------

def test_rank_violation(host_build, export_example, tmp_path):
    pt2, _module, _inputs = export_example("mlp", "embedded")
    np.save(tmp_path / "x.npy", np.zeros((4, 16, 1), np.float32))
    p = aoti_run(host_build, pt2, "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    assert p.returncode == 3
    assert "has rank 3" in p.stderr and "[4, 16]" in p.stderr


def test_dynamic_dimension_range(host_lib, torch, tmp_path):
    from toolchain import examples
    from toolchain.export import export

    from ..conftest import BUILD_DIR

    module, (x,) = examples.get("mlp")
    batch = torch.export.Dim("batch", min=2, max=8)
    pt2 = export(module, (x,), tmp_path / "dyn.pt2", build_dir=BUILD_DIR, dynamic_shapes={"input": {0: batch}})
    with zipfile.ZipFile(pt2) as zf:
        contract = next(n for n in zf.namelist() if n.endswith("aoti_toolchain_contract.json"))
        assert '"max": 8' in zf.read(contract).decode()
    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.inputs[0].shape == (None, 16)
        for n in (2, 5, 8):
            xs = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
            np.testing.assert_allclose(prog.run([xs])[0], eager(module, (torch.from_numpy(xs),))[0],
                                       rtol=1e-5, atol=1e-5)
        for n in (1, 9):
            with pytest.raises(InputError, match="dimension 0 must be 2..8"):
                prog.run([np.zeros((n, 16), np.float32)])


def test_channels_last_package_converts_or_refuses_with_strict(host_build, export_example, tmp_path):
    pt2, module, inputs = export_example("convnet_channels_last", "embedded")
    expected = eager(module, inputs)[0]
    contiguous = np.ascontiguousarray(inputs[0].numpy())
    np.save(tmp_path / "x.npy", contiguous)
    ok = aoti_run(host_build, pt2, "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    assert ok.returncode == 0, ok.stderr
    out = np.load(tmp_path / "o" / "output_0.npy")  # .npy in logical order
    assert out.flags.c_contiguous
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    strict = aoti_run(host_build, pt2, "-i", tmp_path / "x.npy", "-o", tmp_path / "o2", "--strict")
    assert strict.returncode == 3
    assert "channels_last" in strict.stderr and "strict" in strict.stderr
    py_strict = toolchain_run(host_build, pt2, "-i", tmp_path / "x.npy", "-o", tmp_path / "o3", "--strict")
    assert py_strict.returncode == 3 and "strict" in py_strict.stderr and "Traceback" not in py_strict.stderr
    # the layout the contract records may be repeated, not contradicted
    same = aoti_run(host_build, pt2, "-i", f"{tmp_path / 'x.npy'}:channels_last", "-o", tmp_path / "o4")
    assert same.returncode == 0, same.stderr
    other = aoti_run(host_build, pt2, "-i", f"{tmp_path / 'x.npy'}:contiguous", "-o", tmp_path / "o5")
    assert other.returncode == 3 and "contract" in other.stderr
    # inspect tells the user the layout to give (the example's channels-last strides)
    shown = subprocess.run([sys.executable, "-m", "toolchain", "inspect", str(pt2)], capture_output=True, text=True)
    strides = list(inputs[0].stride())
    assert shown.returncode == 0 and f"channels_last (strides {strides} at the example sizes)" in shown.stdout, \
        shown.stdout


def test_outputs_keep_the_plugins_layout(host_lib, export_example):
    pt2, module, inputs = export_example("convnet_channels_last", "embedded")
    expected = eager(module, inputs)[0]
    x = inputs[0].numpy()  # channels-last strides, as exported
    with runtime.load(pt2, library_path=host_lib, strict=True) as prog:
        (y,) = prog.run([x])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    # channels-last: C is the innermost dimension in memory
    assert y.strides[1] == y.itemsize and not y.flags.c_contiguous


# ---------------- without a contract ----------------

def test_bare_plugin_mismatch_fails_cleanly_and_layout_flag_fixes_it(host_build, export_example, tmp_path):
    pt2, module, inputs = export_example("convnet_channels_last", "embedded")
    so = bare_plugin(pt2, tmp_path / "bare")
    expected = eager(module, inputs)[0]
    np.save(tmp_path / "x.npy", np.ascontiguousarray(inputs[0].numpy()))
    wrong = aoti_run(host_build, so, "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    assert wrong.returncode == 3, wrong.stderr
    assert "unmatched stride" in wrong.stderr and ":channels_last" in wrong.stderr
    assert not (tmp_path / "o" / "output_0.npy").exists()
    right = aoti_run(host_build, so, "-i", f"{tmp_path / 'x.npy'}:channels_last", "-o", tmp_path / "o")
    assert right.returncode == 0, right.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), expected, rtol=1e-5, atol=1e-5)
    explicit = aoti_run(host_build, so, "-i", f"{tmp_path / 'x.npy'}:strides=432,1,36,3", "-o", tmp_path / "o6")
    assert explicit.returncode == 0, explicit.stderr
    py = toolchain_run(host_build, so, "-i", f"{tmp_path / 'x.npy'}:channels_last", "-o", tmp_path / "o7")
    assert py.returncode == 0, py.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o7" / "output_0.npy"), expected, rtol=1e-5, atol=1e-5)
    py_wrong = toolchain_run(host_build, so, "-i", tmp_path / "x.npy", "-o", tmp_path / "o8")
    assert py_wrong.returncode == 3 and "unmatched stride" in py_wrong.stderr


def test_bare_plugin_wrong_shape_is_refused(host_build, export_example, tmp_path):
    pt2, _module, _inputs = export_example("mlp", "embedded")
    so = bare_plugin(pt2, tmp_path / "bare")
    np.save(tmp_path / "x.npy", np.zeros((4, 15), np.float32))
    p = aoti_run(host_build, so, "-i", tmp_path / "x.npy", "-o", tmp_path / "o")
    assert p.returncode == 3, p.stderr
    assert "unmatched dim value at 1" in p.stderr and "expected: 16" in p.stderr


def test_bare_plugin_named_without_a_directory_loads_from_the_current_one(host_build, host_lib, export_example,
                                                                         tmp_path, monkeypatch):
    """`aoti-run plugin.so` and `runtime.load("plugin.so")` name the file in the current directory, as every
    command-line tool reads a relative path; dlopen alone would search the library path for it instead."""
    pt2, module, inputs = export_example("mlp", "embedded")
    so = bare_plugin(pt2, tmp_path / "bare")
    np.save(tmp_path / "x.npy", inputs[0].numpy())
    p = subprocess.run([str(host_build.aoti_run), so.name, "-i", tmp_path / "x.npy", "-o", tmp_path / "o"],
                       capture_output=True, text=True, cwd=so.parent)
    assert p.returncode == 0, p.stderr
    expected = eager(module, inputs)[0]
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), expected, rtol=1e-5, atol=1e-5)
    monkeypatch.chdir(so.parent)
    with runtime.load(so.name, library_path=host_lib) as prog:
        np.testing.assert_allclose(prog.run([inputs[0].numpy()])[0], expected, rtol=1e-5, atol=1e-5)


def test_layout_argument_errors(host_build, export_example, tmp_path):
    pt2, _module, _inputs = export_example("mlp", "embedded")
    np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float32))
    p = aoti_run(host_build, pt2, "-i", f"{tmp_path / 'x.npy'}:channels_last", "-o", tmp_path / "o")
    assert p.returncode == 2 and "needs a 4-d" in p.stderr
    p = aoti_run(host_build, pt2, "-i", f"{tmp_path / 'x.npy'}:strides=1", "-o", tmp_path / "o")
    assert p.returncode == 2 and "1 strides for a 2-d array" in p.stderr
    p = toolchain_run(host_build, pt2, "-i", f"{tmp_path / 'x.npy'}:channels_last", "-o", tmp_path / "o")
    assert p.returncode == 3 and "needs a 4-d array" in p.stderr
