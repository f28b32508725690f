"""The spec: the packaged data matches the installed torch headers; malformed copies are rejected."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from toolchain.errors import SpecError
from toolchain.spec import (
    GROUPS,
    HEADERS,
    SPEC_DIR,
    load_spec,
    parse_prototype,
    spec_files,
)

# ----------------------------------------------------------------------------- torch headers


def _torch_include() -> Path | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(next(iter(spec.submodule_search_locations))) / "include/torch/csrc/inductor"
    return inc if inc.is_dir() else None


TORCH_INC = _torch_include()
needs_torch = pytest.mark.skipif(TORCH_INC is None, reason="torch (with its C++ headers) is not installed")


def _normalise(proto: str) -> str:
    p = re.sub(r"\s+", " ", proto).strip()
    p = re.sub(r"\s*\*", "*", p)
    p = re.sub(r"\*(?=\w)", "* ", p)
    p = re.sub(r"\(\s+", "(", p)
    p = re.sub(r"\s+\)", ")", p)
    return re.sub(r"\s+,", ",", p)


def header_decls(path: Path, macro: str) -> dict[str, str]:
    """Name -> normalised prototype of every `macro RET NAME(...);` declaration in a header."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    out: dict[str, str] = {}
    for m in re.finditer(macro + r"\s+([^;{}()]*?\([^;{}()]*\))\s*;", text):
        proto = _normalise(m.group(1))
        name = re.match(r".*?(\w+)\(", proto)
        assert name is not None
        out[name.group(1)] = proto
    return out


# ----------------------------------------------------------------------------- the real spec

SPEC = load_spec()

REQUIRED_SHIMS = [
    # FACTS.md: union of the shims imported by small CPU plugins (24)
    "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda", "aoti_torch_dtype_float32",
    "aoti_torch_layout_strided", "aoti_torch_grad_mode_is_enabled", "aoti_torch_grad_mode_set_enabled",
    "aoti_torch__reinterpret_tensor", "aoti_torch_clone", "aoti_torch_create_tensor_from_blob",
    "aoti_torch_create_tensor_from_blob_v2", "aoti_torch_delete_tensor_object", "aoti_torch_empty_strided",
    "aoti_torch_get_data_ptr", "aoti_torch_get_device_type", "aoti_torch_get_dim", "aoti_torch_get_dtype",
    "aoti_torch_get_numel", "aoti_torch_get_sizes", "aoti_torch_get_strides", "aoti_torch_get_storage_offset",
    "aoti_torch_get_storage_size", "aoti_torch_new_tensor_handle", "aoti_torch_cpu_addmm_out",
    "aoti_torch_cpu_convolution",
    # the brief's additions
    "aoti_torch_get_device_index", "aoti_torch_copy_", "aoti_torch_warn", "aoti_torch_get_size",
    "aoti_torch_get_stride", "aoti_torch_cpu_mm_out", "aoti_torch_cpu_bmm_out", "aoti_torch_check",
    "aoti_torch_assign_tensors_out",
    # CUDA
    "aoti_torch_create_cuda_stream_guard", "aoti_torch_delete_cuda_stream_guard", "aoti_torch_cuda_mm_out",
    "aoti_torch_cuda_addmm_out", "aoti_torch_cuda_convolution", "aoti_torch_get_current_cuda_stream",
]


def test_spec_loads_and_lists_its_sources() -> None:
    assert SPEC.sources == spec_files()
    assert all(p.is_file() and p.parent == SPEC_DIR for p in SPEC.sources)
    assert SPEC.entry_points and SPEC.shims and SPEC.providers


@needs_torch
def test_entry_points_match_interface_h() -> None:
    assert TORCH_INC is not None
    decls = header_decls(TORCH_INC / "aoti_runtime/interface.h", "AOTI_API")
    assert [e.name for e in SPEC.entry_points] == list(decls)
    for e in SPEC.entry_points:
        assert e.prototype == decls[e.name], e.name


def test_entry_point_fields() -> None:
    names = {e.name for e in SPEC.entry_points}
    required = {e.name for e in SPEC.entry_points if e.required}
    assert {"AOTInductorModelContainerCreateWithDevice", "AOTInductorModelContainerDelete",
            "AOTInductorModelContainerRun"} <= required
    assert SPEC.entry_point("AOTInductorModelContainerExtractConstantsMap").deprecated
    entries = SPEC.entry_point("AOTInductorModelContainerExtractConstantsMapEntries")
    assert entries.since in ("2.12", "2.13") and not entries.required  # absent in torch 2.11 plugins
    assert all(re.fullmatch(r"\d+\.\d+", e.since) for e in SPEC.entry_points)
    assert "AOTInductorModelContainerCreate" in names


@needs_torch
def test_every_shim_matches_its_torch_header() -> None:
    assert TORCH_INC is not None
    decls = {h: header_decls(TORCH_INC / "aoti_torch" / (h if "/" in h else f"c/{h}"), "AOTI_TORCH_EXPORT")
             for h in HEADERS}
    for s in SPEC.shims:
        assert s.name in decls[s.header], f"{s.name} not declared in {s.header}"
        assert s.prototype == decls[s.header][s.name], s.name


@needs_torch
def test_every_dtype_device_type_layout_constant_is_in_the_spec() -> None:
    assert TORCH_INC is not None
    decls = header_decls(TORCH_INC / "aoti_torch/c/shim.h", "AOTI_TORCH_EXPORT")
    names = {s.name for s in SPEC.shims}
    for name, proto in decls.items():
        if name.startswith(("aoti_torch_dtype_", "aoti_torch_device_type_", "aoti_torch_layout_")) \
                and proto.endswith("()"):
            assert name in names, name
            assert SPEC.shim(name).is_constant


@pytest.mark.parametrize("name", REQUIRED_SHIMS)
def test_required_shim_present(name: str) -> None:
    shim = SPEC.shim(name)
    if "cuda" in name and "device_type" not in name:
        assert shim.group == "cuda"


def test_groups_headers_and_types_valid() -> None:
    assert {s.group for s in SPEC.shims} == set(GROUPS)
    for s in SPEC.shims:
        assert s.header in HEADERS
        assert s.group != "cpu" or s.name.startswith("aoti_torch_cpu_")
        assert s.returns in SPEC.types and all(p.type in SPEC.types for p in s.params)
        assert not any("c10" in t or "::" in t for t in (s.returns, *(p.type for p in s.params)))
    assert SPEC.shims_in("cpu") == tuple(s for s in SPEC.shims if s.group == "cpu")
    assert len(SPEC.shims_in("core", "cpu", "cuda")) == len(SPEC.shims)
    assert not SPEC.shim("aoti_torch_dtype_element_size").is_constant


def test_providers() -> None:
    by_name = {p.name: p for p in SPEC.providers}
    assert "libstdc++.so.6" in by_name["libstdc++"].sonames
    assert {"libcudart.so.13", "libcudart.so.12"} <= set(by_name["cudart"].sonames)
    sonames = {s for p in SPEC.providers for s in p.sonames}
    assert {"libgcc_s.so.1", "libgomp.so.1", "libsleef.so.3", "libm.so.6"} <= sonames


def test_unknown_lookups_raise_spec_error() -> None:
    with pytest.raises(SpecError, match="aoti_torch_clon"):
        SPEC.shim("aoti_torch_clon")
    with pytest.raises(SpecError, match="AOTInductorNope"):
        SPEC.entry_point("AOTInductorNope")
    with pytest.raises(SpecError, match="gpu"):
        SPEC.shims_in("gpu")


@pytest.mark.parametrize(
    ("text", "ret", "params"),
    [
        ("int32_t f()", "int32_t", ()),
        ("int32_t f(void)", "int32_t", ()),
        ("AOTITorchError  f( const int64_t *sizes_ptr ,AtenTensorHandle*  ret )", "AOTITorchError",
         (("const int64_t*", "sizes_ptr"), ("AtenTensorHandle*", "ret"))),
    ],
)
def test_parse_prototype(text: str, ret: str, params: tuple[tuple[str, str], ...]) -> None:
    fn = parse_prototype(text)
    assert fn.name == "f" and fn.returns == ret
    assert tuple((p.type, p.name) for p in fn.params) == params
    assert parse_prototype(fn.prototype) == fn


# ----------------------------------------------------------------------------- malformed copies


def _broken(tmp_path: Path, file: str, old: str, new: str, count: int = 1) -> Path:
    for src in spec_files():
        shutil.copy(src, tmp_path / src.name)
    target = tmp_path / file
    text = target.read_text()
    assert old in text, old
    target.write_text(text.replace(old, new, count))
    return target


CLONE = 'name = "aoti_torch_clone"\n'
CLONE_PROTO = "AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret)"
EP = 'name = "AOTInductorModelContainerCreate"\n'

MALFORMED = {
    "invalid_toml": ("shims.toml", "schema = 1", "schema = = 1", "(file)", r"invalid TOML.*line \d+"),
    "missing_schema": ("providers.toml", "schema = 1\n", "", "schema", "missing schema"),
    "unknown_schema": ("entry_points.toml", "schema = 1", "schema = 7", "schema", "unknown schema version 7"),
    "unknown_top_key": ("shims.toml", "schema = 1", "schema = 1\ntypo = 2", "typo", "unknown key 'typo'"),
    "unknown_key": ("shims.toml", 'group = "core"', 'grup = "core"', 'shim "aoti_torch_device_type_cpu".grup',
                    "did you mean 'group'"),
    "missing_key": ("entry_points.toml", "required = false\n", "",
                    'entry_point "AOTInductorModelContainerCreate".required', "missing required key"),
    "wrong_type": ("providers.toml", "preload = true", 'preload = "yes"', 'provider "libstdc++".preload',
                   "must be a boolean"),
    "unknown_group": ("shims.toml", CLONE + f'prototype = "{CLONE_PROTO}"\ngroup = "core"',
                      CLONE + f'prototype = "{CLONE_PROTO}"\ngroup = "gpu"', 'shim "aoti_torch_clone".group',
                      "unknown group 'gpu'"),
    "unknown_header": ("shims.toml", 'header = "shim.h"', 'header = "shim2.h"',
                       'shim "aoti_torch_device_type_cpu".header', "unknown header"),
    "duplicate_name": ("shims.toml", 'name = "aoti_torch_dtype_float16"', 'name = "aoti_torch_dtype_bfloat16"',
                       'shim "aoti_torch_dtype_bfloat16".name', "duplicate name"),
    "unparsable": ("shims.toml", CLONE_PROTO, CLONE_PROTO + ";", 'shim "aoti_torch_clone".prototype',
                   "unparsable prototype"),
    "name_mismatch": ("shims.toml", CLONE_PROTO, CLONE_PROTO.replace("clone", "clone2"),
                      'shim "aoti_torch_clone".prototype', "declares 'aoti_torch_clone2' but name is"),
    "type_not_listed": ("shims.toml", CLONE_PROTO, CLONE_PROTO.replace("AtenTensorHandle self", "c10::Half self"),
                        'shim "aoti_torch_clone".prototype', "not in the top-level types list"),
    "bad_version": ("entry_points.toml", 'since = "2.2"', 'since = "unknown"',
                    'entry_point "AOTInductorModelContainerCreate".since', "not like '2.13'"),
    "bad_version_patch": ("entry_points.toml", 'since = "2.2"', 'since = "2.2.0"',
                          'entry_point "AOTInductorModelContainerCreate".since', "not like '2.13'"),
    "nameless_row": ("shims.toml", 'name = "aoti_torch_device_type_cpu"\n', "", "shim[0].name",
                     "missing required key"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_spec_is_rejected(tmp_path: Path, case: str) -> None:
    file, old, new, key, reason = MALFORMED[case]
    target = _broken(tmp_path, file, old, new)
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    message = str(info.value)
    assert str(target) in message
    assert key in message
    assert re.search(reason, message), message
    assert info.value.fix
    assert info.value.exit_code == 3


def test_missing_file(tmp_path: Path) -> None:
    for src in spec_files():
        shutil.copy(src, tmp_path / src.name)
    (tmp_path / "providers.toml").unlink()
    with pytest.raises(SpecError, match="providers.toml.*not found"):
        load_spec(tmp_path)
