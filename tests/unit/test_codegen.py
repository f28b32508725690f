"""Generated files: from the spec, with a banner, written only when their content changes."""

from __future__ import annotations

import os
import re

from toolchain import codegen
from toolchain.spec import load_spec


def test_every_output_has_the_banner_and_lists_every_shim(tmp_path):
    written = codegen.generate(tmp_path)
    assert {w.path.relative_to(tmp_path).as_posix() for w in written} == set(codegen.OUTPUTS.values())
    spec = load_spec()
    shims = [s.name for s in spec.shims_in("core", "cpu")]
    for w in written:
        text = w.path.read_text()
        assert text.startswith("/* GENERATED FILE: do not edit."), w.path
    header = (tmp_path / "include/aoti_host/shims.h").read_text()
    dynlist = (tmp_path / "link/host.dynlist").read_text()
    link_test = (tmp_path / "src/link_test.c").read_text()
    for name in shims:
        assert re.search(rf"\b{name}\(", header), name
        assert f"  {name};" in dynlist, name
        assert f'"{name}",' in link_test, name
    assert "aoti_torch_cuda_mm_out" not in dynlist  # the CPU variant leaves the cuda group out
    assert "aoti_torch_cuda_mm_out" in (codegen.render(spec, ("core", "cpu", "cuda"))["link/host.dynlist"])
    ops = (tmp_path / "include/aoti_host/fallback_ops.h").read_text()  # the loader's shim -> ATen op table
    assert '{"aoti_torch_cpu_grid_sampler_3d", "aten.grid_sampler_3d.default"},' in ops
    rows = re.findall(r'^    \{"(aoti_torch_\w+)", "', ops, re.M)
    assert len(rows) > 300 and rows == sorted(rows)  # op_of's binary search needs strcmp order
    version = (tmp_path / "link/plugin.version").read_text()
    assert all(f"    {e.name};" in version for e in spec.entry_points)


def test_unchanged_files_are_not_rewritten(tmp_path):
    codegen.generate(tmp_path)
    header = tmp_path / "include/aoti_host/shims.h"
    os.utime(header, (1, 1))
    again = codegen.generate(tmp_path)
    assert not any(w.changed for w in again)
    assert header.stat().st_mtime == 1
    header.write_text("stale")
    assert [w.path.name for w in codegen.generate(tmp_path) if w.changed] == ["shims.h"]
    assert not list(tmp_path.rglob(".*.tmp*")) and not [p for p in tmp_path.rglob(".shims.h.*")]


def test_codegen_cli_reports_a_malformed_spec(tmp_path, capsys):
    spec = tmp_path / "spec"
    spec.mkdir()
    for f in load_spec().sources:
        (spec / f.name).write_text(f.read_text())
    (spec / "shims.toml").write_text((spec / "shims.toml").read_text().replace('group = "cpu"', 'group = "gpu"', 1))
    rc = codegen.main(["--out", str(tmp_path / "out"), "--spec-dir", str(spec)])
    out = capsys.readouterr().out
    assert rc == 3
    assert "shims.toml" in out and "group" in out and "gpu" in out
    assert not (tmp_path / "out").exists()
