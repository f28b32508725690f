"""The C API in three places agree: the spec (toolchain/spec/c_api.toml), the header c_api.h and the
generated ctypes module toolchain/runtime/_abi.py (content, and each struct's layout as the C compiler
lays it out)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain import codegen, errors
from toolchain.runtime import _abi
from toolchain.spec import CStruct, load_c_api, load_spec, normalise_type, parse_prototype

ROOT = Path(__file__).resolve().parents[2]
C_API_H = ROOT / "runtime/include/aoti_host/c_api.h"
C_API = load_c_api()


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def _header_structs(text: str) -> dict[str, list[tuple[str, str]]]:
    """typedef struct NAME { TYPE a, b; TYPE c; } NAME; -> {NAME: [(TYPE, a), (TYPE, b), (TYPE, c)]}."""
    out: dict[str, list[tuple[str, str]]] = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, re.S):
        assert m[1] == m[3], m[0]
        fields: list[tuple[str, str]] = []
        for decl in filter(None, (d.strip() for d in m[2].split(";"))):
            first, *more = (p.strip() for p in decl.split(","))
            fm = re.fullmatch(r"(.*?)\s*\b(\w+)", first)
            assert fm is not None, decl
            ctype = normalise_type(fm[1])
            fields += [(ctype, fm[2]), *((ctype, n) for n in more)]
        out[m[1]] = fields
    return out


def test_abi_py_is_generated_from_the_spec():
    """_abi.py is committed (Python imports it from the source tree): it must be what codegen makes now."""
    fresh = codegen.render_abi_py(load_spec(), C_API)
    assert codegen.ABI_PY.read_text() == fresh, "stale: run python -m toolchain.codegen --abi-py and commit it"


def test_header_declares_exactly_the_spec_functions():
    text = _strip_comments(C_API_H.read_text())
    declared = [parse_prototype(re.sub(r"\s+", " ", m[1])).prototype
                for m in re.finditer(r"AOTI_HOST_API\s+([^;]*?);", text, re.S)]
    assert declared == [f.prototype for f in C_API.functions]
    assert len(declared) == 32


def test_header_declares_exactly_the_spec_structs():
    declared = _header_structs(_strip_comments(C_API_H.read_text()))
    spec = {st.name: [(f.type, f.name) for f in st.fields] for st in C_API.structs}
    assert declared == spec
    assert len(spec) == 5


def test_statuses_one_table_for_both_languages(tmp_path):
    codegen.generate(tmp_path)
    header = (tmp_path / "include/aoti_host/status.h").read_text()
    generated = {m[1]: int(m[2]) for m in re.finditer(r"\b(AOTI_HOST_[A-Z_]+) = (\d+)", header)}
    spec = {s.name: s.value for s in C_API.statuses}
    assert generated == spec == errors.RUNTIME_STATUSES == _abi.STATUSES
    assert "AOTI_HOST_" not in _strip_comments(C_API_H.read_text()).split("typedef struct aoti_host_program")[0]
    error_h = (ROOT / "runtime/include/aoti_host/error.h").read_text()
    assert '#include "aoti_host/status.h"' in error_h and "= AOTI_HOST_INTERNAL" in error_h


def test_ctypes_bind_covers_the_api_and_the_shims_it_reads():
    spec = load_spec()
    assert set(_abi.FUNCTIONS) == {f.name for f in C_API.functions} | set(C_API.shims)
    for name in C_API.shims:
        assert spec.shim(name).group == "core"  # exported by every variant
    restype, argtypes = _abi.FUNCTIONS["aoti_host_program_run"]
    assert restype is ctypes.c_int and argtypes[1] is ctypes.POINTER(_abi.TensorView)
    assert _abi.FUNCTIONS["aoti_host_program_free"][0] is None


def test_unknown_c_type_is_refused_with_a_fix():
    with pytest.raises(errors.SpecError, match="has no ctypes mapping") as exc:
        codegen.ctype("struct foo*", ())
    assert "_CTYPES" in str(exc.value)


def _layout_program(structs: tuple[CStruct, ...]) -> str:
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "aoti_host/c_api.h"', "int main(void) {"]
    for st in structs:
        lines.append(f'  printf("{st.name} sizeof %zu align %zu\\n", sizeof({st.name}), _Alignof({st.name}));')
        for f in st.fields:
            lines.append(f'  printf("{st.name}.{f.name} %zu %zu\\n", offsetof({st.name}, {f.name}), '
                         f'sizeof((({st.name}*)0)->{f.name}));')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def _compiled_layout(tmp_path: Path, include: Path) -> dict[str, tuple[int, int]]:
    """{struct: (sizeof, alignof), struct.field: (offsetof, sizeof)} as the C compiler lays them out."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    codegen.generate(tmp_path / "gen")
    src = tmp_path / "layout.c"
    src.write_text(_layout_program(C_API.structs))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{include}", f"-I{tmp_path / 'gen/include'}",
                    "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    layout: dict[str, tuple[int, int]] = {}
    for line in out:
        what, *nums = line.split()
        layout[what] = (int(nums[1]), int(nums[3])) if nums[0] == "sizeof" else (int(nums[0]), int(nums[1]))
    return layout


def _ctypes_layout() -> dict[str, tuple[int, int]]:
    layout: dict[str, tuple[int, int]] = {}
    for name, cls in _abi.STRUCTS.items():
        layout[name] = (ctypes.sizeof(cls), ctypes.alignment(cls))
        for field, _ in cls._fields_:
            desc = getattr(cls, field)
            layout[f"{name}.{field}"] = (desc.offset, desc.size)
    return layout


def test_struct_layouts_match_the_c_compiler(tmp_path):
    """A C program prints sizeof/offsetof of every C API struct and field; ctypes must agree."""
    compiled = _compiled_layout(tmp_path, ROOT / "runtime/include")
    assert len(compiled) == sum(1 + len(st.fields) for st in C_API.structs)
    assert compiled == _ctypes_layout()


def test_the_layout_check_sees_a_header_that_drifted(tmp_path):
    """The comparison is real: a header whose struct reorders two fields lays them out differently."""
    include = tmp_path / "include"
    shutil.copytree(ROOT / "runtime/include", include)
    header = include / "aoti_host/c_api.h"
    text = header.read_text()
    drifted = text.replace("  void* data;\n  int32_t dtype;", "  int32_t dtype;\n  void* data;")
    assert drifted != text
    header.write_text(drifted)
    compiled = _compiled_layout(tmp_path, include)
    assert compiled["aoti_host_tensor_view.data"] != _ctypes_layout()["aoti_host_tensor_view.data"]
