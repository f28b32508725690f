"""export's --cpu-isa choices, their -march and the default come from toolchain/spec/cpu_isa.toml alone."""

from __future__ import annotations

import pytest

from toolchain import target
from toolchain.errors import InputError, SpecError
from toolchain.spec.cpu_isa import SPEC, load_isa_spec


def test_choices_and_march_are_the_spec_levels():
    spec = load_isa_spec()
    assert target.CPU_ISA_CHOICES == ("native", "avx512", "avx2", "x86-64-v2", "x86-64")  # widest first
    assert target.DEFAULT_CPU_ISA == spec.default_export == "avx2"
    for choice, level in spec.exports.items():
        cfg, march = target.cpu_isa_configs(choice, ("avx512", 512))
        assert march == level and cfg["cpp.march"] == level
        assert cfg["cpp.simdlen"] == (spec.vec_bits[level] or 1)
    assert target.cpu_isa_configs("native", None) == ({}, "native")


def test_an_unknown_choice_names_the_spec_choices():
    with pytest.raises(InputError, match="not one of native, avx512, avx2, x86-64-v2, x86-64") as exc:
        target.cpu_isa_configs("avx3", None)
    assert "default avx2" in exc.value.fix


def test_a_renamed_export_changes_the_choices(tmp_path):
    text = SPEC.read_text().replace('export = "avx2"', 'export = "haswell"').replace(
        'default_export = "avx2"', 'default_export = "haswell"')
    (tmp_path / "cpu_isa.toml").write_text(text)
    spec = load_isa_spec(tmp_path / "cpu_isa.toml")
    assert spec.export_choices == ("native", "avx512", "haswell", "x86-64-v2", "x86-64")
    assert spec.march("haswell") == "x86-64-v3" and spec.march("native") == "native"


@pytest.mark.parametrize("default", ["avx3", "native"])
def test_a_default_that_is_no_level_export_is_refused(tmp_path, default):
    (tmp_path / "cpu_isa.toml").write_text(SPEC.read_text().replace('default_export = "avx2"',
                                                                    f'default_export = "{default}"'))
    with pytest.raises(SpecError, match="default_export"):
        load_isa_spec(tmp_path / "cpu_isa.toml")
