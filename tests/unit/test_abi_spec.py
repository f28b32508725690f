"""ABI facts (toolchain/spec/abi.toml, providers.toml) and what is generated from them for C++ and read by
Python: dtypes, constant getters, scalar_to_tensor shims, package member names, preload providers."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import edited_copy
from toolchain import codegen, export
from toolchain.errors import SpecError
from toolchain.spec import ABI_FILE, SPEC_DIR, load_abi, load_spec
from toolchain.verify import checks
from toolchain.verify import package as verify_package

ROOT = Path(__file__).resolve().parents[2]
ABI = load_abi()
SPEC = load_spec()


def test_dtypes_agree_with_numpy():
    for d in ABI.dtypes:
        if d.numpy:
            dt = np.dtype(d.numpy)
            assert (dt.itemsize, dt.kind) == (d.itemsize, d.numpy_kind), d.name
    from toolchain.runtime import _FROM_CODE, _TO_CODE

    assert {np.dtype(t).name for t in _TO_CODE} == {"uint8", "int8", "int16", "int32", "int64", "float16",
                                                     "float32", "float64", "bool", "bfloat16"}
    assert _FROM_CODE[6] == np.float32 and _FROM_CODE[11] == np.bool_


def test_ml_dtypes_descr_is_what_numpy_save_writes(tmp_path):
    """Kind V dtypes are ml_dtypes types: abi.toml's string is exactly the descr numpy.save writes for an
    array of that type (measured here, with the installed numpy and ml_dtypes), which the .npy readers
    accept, and numpy.load gives back as plain void that .view() makes that type again."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from numpy.lib import format as npy_format

    kinds = [d for d in ABI.dtypes if d.numpy_kind == "V"]
    assert [d.name for d in kinds] == ["bfloat16"]
    for d in kinds:
        t = getattr(ml_dtypes, d.name)
        a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(t)
        np.save(tmp_path / f"{d.name}.npy", a)
        with open(tmp_path / f"{d.name}.npy", "rb") as f:
            assert npy_format.read_magic(f) == (1, 0)
            f.seek(8)
            header = f.read(int.from_bytes(f.read(2), "little")).decode("latin1")
        assert f"'descr': '{d.numpy}'" in header, header
        back = np.load(tmp_path / f"{d.name}.npy")
        assert back.dtype == np.dtype(f"V{d.itemsize}")
        np.testing.assert_array_equal(back.view(t).astype(np.float32), a.astype(np.float32))
        # plain void writes '|V<n>': a different string, which the readers refuse
        np.save(tmp_path / "void.npy", np.zeros(3, f"V{d.itemsize}"))
        assert f"'descr': '{d.numpy}'" not in (tmp_path / "void.npy").read_bytes()[:128].decode("latin1")


def test_dtypes_agree_with_torch(torch):
    """Names and item sizes as torch has them (torch has no public ScalarType number, the codes come from
    c10/core/ScalarType.h and are checked end to end by the models' runs)."""
    for d in ABI.dtypes:
        t = getattr(torch, d.name, None)
        if isinstance(t, torch.dtype):
            assert t.itemsize == d.itemsize, d.name
        for alias in d.aliases:
            assert getattr(torch, alias) == t, alias


def test_contract_names_are_the_runtime_dtypes_and_aliases():
    names = ABI.dtype_names()
    assert verify_package.DTYPES == {n: (d.code, d.itemsize) for n, d in names.items()}
    assert verify_package.DTYPES["float"] == (6, 4) and verify_package.DTYPES["bfloat16"] == (15, 2)
    assert "complex64" not in names and ABI.dtype("torch.half").name == "float16"


def test_generated_dtype_header(tmp_path):
    codegen.generate(tmp_path)
    text = (tmp_path / "include/aoti_host/dtypes.h").read_text()
    rows = re.findall(r'\{(\d+), "(\w+)", (\d+), (true|false), (\'\w\'|0), "([<|]?\w*)"\}', text)
    assert [(int(c), n, int(s), np_) for c, n, s, _, _, np_ in rows] == [
        (d.code, d.name, d.itemsize, d.numpy) for d in ABI.dtypes]
    assert 'inline constexpr int32_t kBfloat16 = 15;' in text and '{"long", 4},' in text


def test_constant_getters_and_scalar_shims_are_generated_not_written_out(tmp_path):
    codegen.generate(tmp_path)
    inc = (tmp_path / "include/aoti_host/shims_constants.inc").read_text()
    constants = [s for s in SPEC.shims_in("core", "cpu") if s.is_constant]
    assert len(constants) == 40
    for s in constants:
        assert f"AOTI_HOST_API int32_t {s.name}(void) {{ return {ABI.constant_value(s.name)}; }}" in inc
    scalars = [s for s in SPEC.shims if s.name.startswith("aoti_torch_scalar_to_tensor_")]
    assert len(scalars) == 11
    for s in scalars:
        assert f"AOTI_HOST_API {s.prototype} {{" in inc
    assert 'static_cast<uint8_t>(value ? 1 : 0), 11,' in inc
    core = (ROOT / "runtime/src/shims/shims_core.cpp").read_text()
    assert not re.search(r"aoti_torch_(dtype|device_type|layout|memory_format)_\w+\(void\) \{ return", core)
    assert "aoti_torch_scalar_to_tensor_float32(" not in core


def test_constant_values_come_from_the_library(host_lib):
    """The built runtime's getters return the spec's values (the generated shims are the ones linked)."""
    import ctypes

    lib = ctypes.CDLL(str(host_lib))
    for s in SPEC.shims_in("core", "cpu"):
        if s.is_constant:
            fn = getattr(lib, s.name)
            fn.restype = ctypes.c_int32
            assert fn() == ABI.constant_value(s.name), s.name


def test_package_names_one_owner():
    p = ABI.package
    assert export.CONTRACT_ENTRY == verify_package.CONTRACT_ENTRY == p.contract_entry
    assert export.CONSTANTS_ENTRY == verify_package.CONSTANTS_ENTRY == p.constants_entry
    assert export.MANIFEST_NAME == p.methods_manifest and verify_package.PLUGIN_DIR == p.plugin_dir
    for path in ("runtime/src/host/method.cpp", "runtime/src/host/weights.h", "runtime/src/host/program.cpp",
                 "toolchain/export.py", "toolchain/verify/package.py"):
        text = (ROOT / path).read_text()
        assert '"extra/aoti_toolchain_' not in text and '"methods.json"' not in text, path
        assert '"/data/aotinductor/"' not in text, path


def test_providers_and_cxx_core_symbols(tmp_path):
    codegen.generate(tmp_path)
    text = (tmp_path / "include/aoti_host/providers.h").read_text()
    for p in SPEC.providers:
        row = f'{{"{p.name}", '
        assert row in text and f"{'true' if p.preload else 'false'}, {'true' if p.name == 'libstdc++' else 'false'}}}" \
            in text.split(row, 1)[1].split("\n", 1)[0], p.name
    assert 'inline constexpr const char* kCxxRuntime = "libstdc++.so.6";' in text
    for sym in ABI.cxx_runtime_core:
        assert f'"{sym}",' in text
    assert checks._cxx_runtime_core() == ABI.cxx_runtime_core
    assert '"libstdc++.so.6"' not in (ROOT / "runtime/src/host/plugin.cpp").read_text()  # the soname comes from the spec
    assert "__cxa_throw" not in (ROOT / "runtime/src/base/elf_scan.cpp").read_text()


def test_provider_notes_reach_verify():
    cudart = next(p for p in SPEC.providers if p.name == "cudart")
    assert checks._provider_hint(cudart) == f"; {cudart.note}" and "link_libtorch=False" in cudart.note
    assert checks._provider_hint(next(p for p in SPEC.providers if p.name == "libm")) == ""


def _abi_copy(tmp_path: Path, old: str, new: str) -> Path:
    return edited_copy(SPEC_DIR / ABI_FILE, tmp_path / ABI_FILE, old, new)


@pytest.mark.parametrize(("old", "new", "message"), [
    ('name = "int8"\ncode = 1', 'name = "int8"\ncode = 2', "codes must run 0, 1, 2"),
    ('numpy = "<f4"', 'numpy = "<f8"', "not a little-endian numpy dtype string of 4 bytes"),
    ('numpy = "<V2"', 'numpy = "|V2"', "'|V2' is not a little-endian numpy dtype string of 2 bytes"),
    ('aliases = ["half"]', 'aliases = ["float"]', "is taken"),
    ("itemsize = 16", "itemsize = 3", "is not 1, 2, 4, 8 or 16"),
    ("cuda = 1", 'cuda = "1"', "must be an integer"),
    ("contract_schema = 2\n", "", "missing required key"),
])
def test_bad_abi_is_refused_naming_file_and_key(tmp_path, old, new, message):
    with pytest.raises(SpecError, match=re.escape(message)) as exc:
        load_abi(_abi_copy(tmp_path, old, new))
    assert str(tmp_path / ABI_FILE) in str(exc.value) and "fix:" in str(exc.value)


def test_a_getter_without_a_value_is_refused(tmp_path):
    spec_dir = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, spec_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    _abi_copy(spec_dir, "jagged = 7\n", "")
    with pytest.raises(SpecError, match="no value for the constant getter aoti_torch_layout_jagged"):
        codegen.generate(tmp_path / "out", spec_dir=spec_dir)
