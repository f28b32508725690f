"""Issue 7: export builds vectorised kernels with link_libtorch=False, and the runtime provides their Sleef."""

from __future__ import annotations

import json
import subprocess
import zipfile

import numpy as np
import pytest

from toolchain import runtime

pytestmark = pytest.mark.slow


def plugin_facts(pt2, tmp_path):
    with zipfile.ZipFile(pt2) as zf:
        names = zf.namelist()
        so = next(n for n in names if n.endswith(".so"))
        meta = json.loads(zf.read(next(n for n in names if n.endswith("_metadata.json"))))
        (tmp_path / "plugin.so").write_bytes(zf.read(so))
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(tmp_path / "plugin.so")], capture_output=True,
                               text=True, check=True).stdout.split()
    return meta, {s for s in undefined if s != "U"}


def test_attention_plugin_is_vectorised_and_matches_eager(host_build, export_example, torch, tmp_path):
    pt2, module, inputs = export_example("attention", "embedded")
    meta, imports = plugin_facts(pt2, tmp_path)
    assert meta["AOTI_CPU_ISA"] not in ("", "INVALID_VEC_ISA"), meta
    assert any(s.startswith("Sleef_") for s in imports), sorted(imports)
    assert "aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu" in imports
    with torch.no_grad():
        expected = module(*inputs).numpy()
    with runtime.load(pt2, library_path=host_build.lib) as prog:
        got = prog.run([inputs[0].numpy()])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.save(tmp_path / "x.npy", inputs[0].numpy())
    p = subprocess.run([str(host_build.aoti_run), str(pt2), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o" / "output_0.npy"), expected, rtol=1e-4, atol=1e-5)


def test_runtime_provides_sleef(host_build):
    """libsleef is in the runtime's DT_NEEDED (linked --no-as-needed), so plugins find Sleef_* globally."""
    for binary in (host_build.lib, host_build.aoti_run):
        dyn = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
        assert "[libsleef.so.3]" in dyn, f"{binary} does not list libsleef"
        assert "[libopenblas.so.0]" in dyn, f"{binary} does not list libopenblas"


def test_scalar_export_still_possible_and_inductor_isa_cache_left_clean(torch, tmp_path):
    from torch._inductor import cpu_vec_isa

    from toolchain import examples
    from toolchain.export import export

    from ..conftest import BUILD_DIR

    module, inputs = examples.get("mlp")
    pt2 = export(module, inputs, tmp_path / "scalar.pt2", build_dir=BUILD_DIR, vectorize=False)
    meta, imports = plugin_facts(pt2, tmp_path)
    assert not any(s.startswith("Sleef_") for s in imports)
    # our export leaves no per-process ISA verdict behind (inductor's probe, built without libtorch,
    # would have cached "no ISA" here and poisoned later default builds in this process)
    assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 0
