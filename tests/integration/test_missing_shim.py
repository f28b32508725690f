"""A real plain-torch package calling an ATen fallback op the host does not implement (3-d grid sampling):
`verify` fails it with missing-shim and `inspect` lists the op, both naming the ATen op and the shim, and it
fails to load, with the same names, in aoti-run and in the Python module."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import npy_args
from tests.models_corpus import fallback_shims
from toolchain import runtime
from toolchain.errors import LoadError, exit_code

pytestmark = pytest.mark.slow

SHIM = "aoti_torch_cpu_grid_sampler_3d"
OP = "aten.grid_sampler_3d.default"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True)


def test_the_package_calls_the_op(missing_op_package):
    pt2, _ = missing_op_package
    assert SHIM in fallback_shims(pt2)


def test_verify_fails_with_missing_shim(missing_op_package, host_build):
    pt2, _ = missing_op_package
    for host in ([], ["--host", host_build.lib], ["--host", "none"]):
        r = cli("verify", "--format", "json", pt2, *host)
        assert r.returncode == exit_code("failed"), (host, r.stdout, r.stderr)
        findings = json.loads(r.stdout)["findings"]
        (f,) = [x for x in findings if x["rule"] == "missing-shim"]
        assert f["severity"] == "error" and f["symbol"] == SHIM and OP in f["message"] and OP in f["fix"]
        assert not [x for x in findings if x["symbol"] == SHIM and x["rule"] != "missing-shim"]  # reported once
    text = cli("verify", pt2).stdout
    assert "[missing-shim]" in text and OP in text and SHIM in text


def test_inspect_lists_the_ops(missing_op_package):
    pt2, _ = missing_op_package
    r = cli("inspect", "--json", pt2)
    assert r.returncode == 0, r.stderr
    (info,) = [i for i in json.loads(r.stdout)["files"] if i["kind"] == "plugin"]
    assert {"op": OP, "shim": SHIM, "device": "cpu", "since": "2.13", "implemented": False} in info["ops"]
    text = cli("inspect", pt2).stdout
    assert re.search(rf"{re.escape(OP)} +{SHIM} +\(NOT implemented\)", text), text


def test_loading_fails_naming_op_and_shim(missing_op_package, host_build, tmp_path):
    pt2, inputs = missing_op_package
    with pytest.raises(LoadError) as info:
        runtime.load(pt2, library_path=host_build.lib)
    assert f"{SHIM} (ATen op {OP})" in str(info.value) and "does not provide" in str(info.value)
    args = [str(host_build.aoti_run), str(pt2), *npy_args(inputs, tmp_path)]
    (tmp_path / "kept").mkdir()
    proc = subprocess.run([*args, "-o", str(tmp_path / "kept" / "out" / "deeper")], capture_output=True, text=True)
    assert proc.returncode == exit_code("load_failed"), proc.stderr
    assert f"{SHIM} (ATen op {OP})" in proc.stderr and "does not provide" in proc.stderr
    # No trace: the -o directories aoti-run made for the run are gone again; the one that was there stays.
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())
    # The same through aoti-toolchain run (the Python module).
    r = subprocess.run([sys.executable, "-m", "toolchain", "run", str(pt2), *args[2:], "-o", str(tmp_path / "kept" / "py")],
                       capture_output=True, text=True)
    assert r.returncode == exit_code("load_failed"), r.stderr
    assert f"{SHIM} (ATen op {OP})" in r.stderr
    assert not list((tmp_path / "kept").iterdir())


@pytest.fixture(scope="module")
def proxy_op_package(torch, tmp_path_factory):
    """(pt2, inputs): a plain-torch package with an ATen op that has no C shim (bincount), which torch's
    plugin then runs through its proxy executor (aoti_torch_proxy_executor_call_function, inside libtorch)."""
    from tests.conftest import shared_dir, shared_export

    class Counts(torch.nn.Module):
        def forward(self, ids, x):
            return torch.bincount(ids, minlength=10), x * 2

    inputs = (torch.randint(0, 10, (30,)), torch.randn(5, 6))
    return shared_export(shared_dir(tmp_path_factory, "proxy-op") / "counts.pt2", Counts(), inputs), inputs


@pytest.mark.long
def test_proxy_executor_ops_are_named_by_verify_and_refused_at_load(proxy_op_package, host_build, tmp_path):
    pt2, inputs = proxy_op_package
    r = cli("verify", "--format", "json", pt2)
    assert r.returncode == exit_code("failed"), r.stdout + r.stderr
    (f,) = [x for x in json.loads(r.stdout)["findings"] if x["rule"] == "missing-shim"]
    assert f["symbol"] == "aoti_torch_proxy_executor_call_function" and "aten::bincount" in f["message"]
    assert "libtorch" in f["message"] and "aten::bincount" in f["fix"]
    r = cli("inspect", "--json", pt2)
    (info,) = [i for i in json.loads(r.stdout)["files"] if i["kind"] == "plugin"]
    assert {"op": "aten::bincount", "shim": "aoti_torch_proxy_executor_call_function", "device": "proxy executor",
            "since": None, "implemented": False} in info["ops"]
    assert "aten::bincount" in cli("inspect", pt2).stdout
    with pytest.raises(LoadError, match="proxy executor") as info:
        runtime.load(pt2, library_path=host_build.lib)
    assert "libtorch" in str(info.value) and "does not provide" not in str(info.value)
    args = [str(host_build.aoti_run), str(pt2), *npy_args(inputs, tmp_path)]
    proc = subprocess.run([*args, "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == exit_code("load_failed") and "proxy executor" in proc.stderr, proc.stderr
