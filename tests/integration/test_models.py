"""Real torch 2.13 plugins, exported by the tests, run in our LibTorch-free host and compared with eager."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.helpers import npy_args
from toolchain import runtime

pytestmark = pytest.mark.slow

CASES = [
    ("mlp", "embedded"),
    ("mlp", "blob"),
    ("convnet", "embedded"),
    ("convnet", "blob"),
    ("convnet_channels_last", "embedded"),
    ("embedding", "embedded"),
    ("two_outputs", "embedded"),
]


def eager(module, inputs):
    import torch

    with torch.no_grad():
        out = module(*inputs)
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


@pytest.mark.parametrize(("name", "weights"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_python_runtime_matches_eager(host_lib, export_example, name, weights):
    pt2, module, inputs = export_example(name, weights)
    expected = eager(module, inputs)
    with runtime.load(pt2, library_path=host_lib) as prog:
        assert prog.has_contract
        got = prog.run([x.numpy() for x in inputs])
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "weights"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_aoti_run_matches_eager(host_build, export_example, tmp_path, name, weights):
    pt2, module, inputs = export_example(name, weights)
    args = [str(host_build.aoti_run), str(pt2), *npy_args(inputs, tmp_path)]
    proc = subprocess.run([*args, "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for k, e in enumerate(eager(module, inputs)):
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"output_{k}.npy"), e, rtol=1e-5, atol=1e-5)


def test_blob_plugin_so_with_weights_flag(host_build, export_example, tmp_path):
    """A bare blob-mode plugin needs --weights; with it, it runs; without, a clear error."""
    import zipfile

    pt2, module, inputs = export_example("mlp", "blob")
    with zipfile.ZipFile(pt2) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        blob = next(n for n in zf.namelist() if n.endswith("_weights.blob"))
        zf.extract(so, tmp_path)
        zf.extract(blob, tmp_path)
    np.save(tmp_path / "x.npy", inputs[0].numpy())
    base = [str(host_build.aoti_run), str(tmp_path / so), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o")]
    no_weights = subprocess.run(base, capture_output=True, text=True)
    assert no_weights.returncode == 3  # missing weights are a bad input, as in aoti-toolchain run
    assert "--weights" in no_weights.stderr and "outside the .so" in no_weights.stderr
    ok = subprocess.run([*base, "--weights", str(tmp_path / blob)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), eager(module, inputs)[0], rtol=1e-5, atol=1e-5)


def test_mutated_buffer_state_persists_across_runs(host_lib, export_example, torch):
    pt2, module, inputs = export_example("mutated_buffer", "embedded")
    import copy

    reference = copy.deepcopy(module)  # export must not have touched the state; run eager on a copy
    reference.state.zero_()
    x = inputs[0]
    with runtime.load(pt2, library_path=host_lib) as prog:
        for step in range(3):
            got = prog.run([x.numpy()])[0]
            want = eager(reference, (x,))[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"run {step + 1}")
    assert not np.allclose(eager(reference, (x,))[0], got), "state did not change between runs"


def test_channels_last_input_is_converted(host_lib, export_example):
    """The channels-last plugin fed a contiguous array: the runtime converts the layout, no wrong numbers."""
    pt2, module, inputs = export_example("convnet_channels_last", "embedded")
    contiguous = np.ascontiguousarray(inputs[0].numpy())
    assert contiguous.strides != inputs[0].numpy().strides
    with runtime.load(pt2, library_path=host_lib) as prog:
        got = prog.run([contiguous])[0]
    np.testing.assert_allclose(got, eager(module, inputs)[0], rtol=1e-5, atol=1e-5)
