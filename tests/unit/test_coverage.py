"""docs/ops-coverage.md and toolchain/torch_ops.json stay in sync with the installed torch and shims.toml
(no export: both are read as text)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from toolchain import coverage, torch_ops
from toolchain.errors import InputError, SpecError
from toolchain.spec import load_spec

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@needs_torch
def test_data_matches_the_installed_torch():
    fresh = torch_ops.to_json(coverage.extract())
    assert fresh == torch_ops.to_json(torch_ops.load()), \
        f"toolchain/torch_ops.json is stale for this torch: regenerate with {coverage.REGENERATE}"


def test_markdown_is_current():
    text = coverage.DOC.read_text(encoding="utf-8")
    assert text == coverage.render(torch_ops.load(), coverage.implemented_shims()), \
        f"docs/ops-coverage.md is stale: regenerate with {coverage.REGENERATE}"


def test_every_fallback_shim_we_implement_is_in_torchs_list():
    """A shims.toml op shim (declared in a fallback header) that the data does not know would get no ATen
    op name in verify, inspect and the load error."""
    by_shim = torch_ops.load().by_shim()
    ours = [s.name for s in load_spec().shims if s.header.startswith("generated/") or s.header == "c/shim_cpu.h"]
    assert ours and [n for n in ours if n not in by_shim] == []


def test_shim_to_op():
    assert torch_ops.op_of("aoti_torch_cpu_topk")[0].op == "aten.topk.default"
    op, dev = torch_ops.op_of("aoti_torch_cpu_scatter_reduce_two_out")
    assert (op.op, dev) == ("aten.scatter_reduce.two_out", "cpu")
    op, dev = torch_ops.op_of("aoti_torch_cuda__flash_attention_forward_v2")
    assert (op.label, op.since, dev) == ("aten._flash_attention_forward.default (v2)", "2.12", "cuda")
    assert torch_ops.op_of("aoti_torch_cpu_mkldnn_rnn_layer")[0].op == "aten.mkldnn_rnn_layer.default"
    assert torch_ops.op_of("aoti_torch_cpu_grid_sampler_3d")[0].since == "2.13"
    assert torch_ops.op_of("aoti_torch_empty_strided") is None  # core ABI, no op


def test_totals_count_the_table():
    data = torch_ops.load()
    t = coverage.totals(data, coverage.implemented_shims())
    assert t["cpu"][1] == sum(1 for o in data.ops if "cpu" in o.shims)
    assert 0 < t["cpu"][0] <= t["cpu"][1] and 0 < t["cuda"][0] <= t["cuda"][1]
    doc = coverage.DOC.read_text(encoding="utf-8")
    assert f"| CPU | {t['cpu'][0]} | {t['cpu'][1]} " in doc and f"| CUDA | {t['cuda'][0]} | {t['cuda'][1]} " in doc


@needs_torch
def test_extract_refuses_files_it_cannot_read(tmp_path):
    """A torch whose fallback list is not a literal, or that lacks a header, is named with the file."""
    root = coverage.torch_root()
    fake = tmp_path / "torch"
    shutil.copytree(root / coverage.SHIM_DIR, fake / coverage.SHIM_DIR)
    shutil.copy(root / "version.py", fake / "version.py")
    (tmp_path / "torchgen" / "aoti").mkdir(parents=True)
    ops_py = tmp_path / "torchgen" / "aoti" / "fallback_ops.py"
    shutil.copy(root.parent / "torchgen" / "aoti" / "fallback_ops.py", ops_py)
    assert coverage.extract(fake) == coverage.extract(root)
    ops_py.write_text("inductor_fallback_ops = dict(a=1)\n")
    with pytest.raises(InputError, match="fallback_ops.py: inductor_fallback_ops is not a literal dict"):
        coverage.extract(fake)
    ops_py.write_text('inductor_fallback_ops = {"aten.topk.default": {"since": "2.13"}}\n')
    with pytest.raises(InputError, match="is not TORCH_VERSION_X_Y_Z"):
        coverage.extract(fake)
    (fake / coverage.SHIM_DIR / coverage.HEADERS["cuda"]).unlink()
    with pytest.raises(InputError, match="c_shim_cuda.h: missing from the installed torch"):
        coverage.extract(fake)


def test_data_file_defects_are_named(tmp_path):
    bad = tmp_path / "torch_ops.json"
    bad.write_text('{"schema": 1, "torch": "x", "sources": {}, "ops": [{"op": "aten.x.default"}]}')
    with pytest.raises(SpecError, match=r"torch_ops.json: ops\[0\] is not an object"):
        torch_ops.load(bad)
