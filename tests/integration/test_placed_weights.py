"""Blob weights placed by the host (runtime/src/host/weights.h): the package's constant layouts, checked against the
plugin, one allocation the program owns, the constants handed over as user-managed; and the plugin's own loader
where the package has no layouts. Real torch 2.13 blob-mode plugins."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from toolchain import export, runtime
from toolchain.errors import ToolchainError

pytestmark = pytest.mark.slow


def eager(module, inputs):
    import torch

    with torch.no_grad():
        return module(*inputs).numpy()


def rewrite(pt2: Path, out: Path, edit, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the package with its constants entry replaced by edit(text) (None drops it), without the
    members whose names end in one of `drop`."""
    with zipfile.ZipFile(pt2) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if drop and info.filename.endswith(drop):
                continue
            data = src.read(info.filename)
            if info.filename.endswith(export.CONSTANTS_ENTRY):
                new = edit(data.decode())
                if new is None:
                    continue
                data = new.encode()
            dst.writestr(info, data)
    return out


def run_logged(host_build, pt2: Path, x: np.ndarray, tmp_path: Path) -> subprocess.CompletedProcess:
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "AOTI_HOST_LOG": "debug"}
    return subprocess.run([str(host_build.aoti_run), str(pt2), "-i", str(tmp_path / "x.npy"), "-o",
                           str(tmp_path / "o")], capture_output=True, text=True, env=env)


def layouts_of(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        name = next(n for n in zf.namelist() if n.endswith(export.CONSTANTS_ENTRY))
        return json.loads(zf.read(name))


def test_export_records_layouts_and_host_places_weights(host_build, export_example, tmp_path):
    pt2, module, inputs = export_example("convnet", "blob")
    doc = layouts_of(pt2)
    assert doc["schema"] == 1 and len(doc["constants"]) >= 2
    first = doc["constants"][0]
    assert first["shape"] == [8, 3, 3, 3] and first["stride"] == [27, 9, 3, 1] and first["data_size"] % 64 == 0
    proc = run_logged(host_build, pt2, inputs[0].numpy(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "placed by the host" in proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), eager(module, inputs), rtol=1e-5, atol=1e-5)


def test_embedded_package_has_no_layouts(export_example):
    pt2, _, _ = export_example("mlp", "embedded")
    with zipfile.ZipFile(pt2) as zf:
        assert not any(n.endswith(export.CONSTANTS_ENTRY) for n in zf.namelist())


def test_package_without_layouts_derives_them_from_its_wrapper(host_build, export_example, tmp_path):
    """Without the layouts entry (a package torch wrote), the host derives them from the generated wrapper."""
    pt2, module, inputs = export_example("mlp", "blob")
    bare = rewrite(pt2, tmp_path / "bare.pt2", lambda text: None)
    proc = run_logged(host_build, bare, inputs[0].numpy(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "constant layouts derived from" in proc.stderr and "placed by the host" in proc.stderr, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), eager(module, inputs), rtol=1e-5, atol=1e-5)


def test_package_without_layouts_or_wrapper_uses_the_plugins_loader(host_build, export_example, tmp_path):
    pt2, module, inputs = export_example("mlp", "blob")
    bare = rewrite(pt2, tmp_path / "bare.pt2", lambda text: None, drop=(".wrapper.cpp",))
    proc = run_logged(host_build, bare, inputs[0].numpy(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "placed by the host" not in proc.stderr and "loaded" in proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), eager(module, inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("what", "edit", "message"), [
    # the data sizes laid end to end no longer fit the blob: refused while reading the layouts
    ("data size", lambda d: d["constants"][0].update(data_size=d["constants"][0]["data_size"] + 64),
     "ends beyond the weights blob"),
    ("name", lambda d: d["constants"][1].update(name="constant_9_weight"), "in the package's layouts"),
    ("count", lambda d: d["constants"].pop(), "constant layouts, the plugin has"),
    ("extent", lambda d: d["constants"][0].update(shape=[64, 64]), "span more than its data_size"),
    ("rank", lambda d: d["constants"][0].update(stride=[1]), "differ in rank"),
    ("schema", lambda d: d.update(schema=7), "schema"),
], ids=["data_size", "name", "count", "extent", "rank", "schema"])
def test_layouts_contradicting_the_plugin_are_refused(host_lib, export_example, tmp_path, what, edit, message):
    pt2, _, inputs = export_example("mlp", "blob")

    def change(text: str) -> str:
        doc = json.loads(text)
        edit(doc)
        return json.dumps(doc)

    bad = rewrite(pt2, tmp_path / "bad.pt2", change)
    with pytest.raises(ToolchainError) as err:
        runtime.load(bad, library_path=host_lib)
    assert message in str(err.value) and "re-export" in str(err.value), f"{what}: {err.value}"


def test_malformed_layouts_entry_is_refused(host_lib, export_example, tmp_path):
    pt2, _, _ = export_example("mlp", "blob")
    bad = rewrite(pt2, tmp_path / "bad.pt2", lambda text: text[: len(text) // 2])
    with pytest.raises(ToolchainError, match="re-export"):
        runtime.load(bad, library_path=host_lib)


def _constants_info(i: int, **fields: str) -> str:
    """Constant `i`'s fields as inductor's generated wrapper sets them in constants_info_ (CUDA, strided)."""
    fields = {**fields, "layout": "static_cast<int32_t>(cached_torch_layout_strided)"}
    return "".join(f"    constants_info_[{i}].{k} = {v};\n" for k, v in fields.items())


WRAPPER = "\n" + _constants_info(
    0, name='"constant_w"', dtype="cached_torch_dtype_float32", device_type="cached_torch_device_type_cuda",
    offset="3", data_size="128", from_folded="false", shape="{2, 3}", stride="{3, 1}") + _constants_info(
    1, name='"constant_s"', dtype="cached_torch_dtype_int64", device_type="cached_torch_device_type_cuda",
    offset="0", data_size="64", from_folded="true", shape="{}", stride="{}")


def test_constant_layouts_parser():
    got = export.constant_layouts(WRAPPER)
    assert got == [
        {"name": "constant_w", "shape": [2, 3], "stride": [3, 1], "offset": 3, "data_size": 128, "device": "cuda",
         "dtype": "float32", "from_folded": False},
        {"name": "constant_s", "shape": [], "stride": [], "offset": 0, "data_size": 64, "device": "cuda",
         "dtype": "int64", "from_folded": True},
    ]
    assert export.constant_layouts(WRAPPER.replace("layout_strided", "layout__mkldnn")) is None
    assert export.constant_layouts(WRAPPER.replace("constants_info_[1]", "constants_info_[2]")) is None
    assert export.constant_layouts("int main() {}") is None
