"""`inspect` says which torch release wrote a plugin and whether this runtime covers its imports: for a package
torch 2.13 wrote itself (no record of ours: inferred against the torch-version matrix's record), for real .so
files shaped like each measured release's plugins (its entry points and the shims all its plugins import), and
for a plugin importing a shim no release declares (named as missing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from toolchain.torch_window import Record


def inspect_json(path) -> dict:
    p = subprocess.run([sys.executable, "-m", "toolchain", "inspect", "--json", str(path)], capture_output=True,
                       text=True, cwd=REPO_ROOT)
    assert p.returncode == 0, p.stderr
    (plugin,) = [f for f in json.loads(p.stdout)["files"] if f["kind"] == "plugin"]
    return plugin


def inspect_text(path) -> str:
    p = subprocess.run([sys.executable, "-m", "toolchain", "inspect", str(path)], capture_output=True, text=True,
                       cwd=REPO_ROOT)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def record() -> Record:
    rec = Record.load()
    assert rec is not None and rec.passing(), "toolchain/torch_versions.json: run nox -s torch_versions"
    return rec


def test_plugins_shaped_like_each_release_are_attributed_to_it(record, fake_plugin):
    for r in record.passing():
        so = fake_plugin(f"like-{r.version}", imports=sorted(r.always_imported), entry_points=sorted(r.entry_points))
        t = inspect_json(so)["torch"]
        assert r.version in t["written_by"] and t["covered"] and t["in_window"], (r.version, t)
        assert t["window"] == record.window()
        text = inspect_text(so)
        assert "written by:   torch " in text and r.version in text, text
        assert "all its aoti_torch_* imports are implemented; supported torch " + record.window() in text, text


def test_an_import_no_release_declares_is_named_as_missing(record, fake_plugin):
    r = record.passing()[-1]
    shim = "aoti_torch_from_a_torch_after_the_window"
    so = fake_plugin("future", imports=[*sorted(r.always_imported), shim], entry_points=sorted(r.entry_points))
    t = inspect_json(so)["torch"]
    assert t["covered"] is False and t["missing_shims"] == [shim]
    assert f"NOT covered: 1 import(s) not implemented: {shim}" in inspect_text(so)


@pytest.mark.slow
def test_a_package_torch_wrote_says_its_release_and_coverage(torch, record, tmp_path):
    from toolchain.export import inductor_configs

    class Stateless(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    ep = torch.export.export(Stateless(), (torch.randn(4, 8),))
    pt2 = tmp_path / "theirs.pt2"
    torch._inductor.aoti_compile_and_package(ep, package_path=str(pt2), inductor_configs=inductor_configs("embedded"))
    t = inspect_json(pt2)["torch"]
    here = torch.__version__.split("+")[0]
    assert here in t["written_by"], (here, t)
    assert t["covered"] and t["missing_shims"] == [] and "inferred" in t["basis"]
    assert t["in_window"] is all(v in {r.version for r in record.passing()} for v in t["written_by"])
