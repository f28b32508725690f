"""The C API is one table, toolchain/spec/c_api.toml, and what is rendered from it agrees: the public header
aoti_host/c_api.h (with c_api_types.h), its function table and the ctypes module toolchain/runtime/_abi.py
(content, and each struct's layout as the C compiler lays it out)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain import codegen, errors
from toolchain.runtime import _abi
from toolchain.spec import CStruct, SpecError, load_c_api, load_spec, normalise_type, parse_prototype

ROOT = Path(__file__).resolve().parents[2]
C_API = load_c_api()
C_API_TOML = ROOT / "toolchain/spec/c_api.toml"


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    """A generated include tree: aoti_host/c_api.h, c_api_types.h, status.h, shims.h, ..."""
    out = tmp_path_factory.mktemp("gen")
    codegen.generate(out)
    return out / "include"


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


def test_header_declares_exactly_the_spec_functions(gen):
    text = _strip_comments((gen / "aoti_host/c_api.h").read_text())
    declared = [parse_prototype(re.sub(r"\s+", " ", m[1])).prototype
                for m in re.finditer(r"AOTI_HOST_API\s+([^;]*?);", text, re.S)]
    assert declared == [f.prototype for f in C_API.functions]
    assert len(declared) == 35
    assert "(void);" in text and "()" not in text  # a C prototype without parameters says (void)


def test_header_declares_exactly_the_spec_structs(gen):
    declared = _header_structs(_strip_comments((gen / "aoti_host/c_api_types.h").read_text()))
    spec = {st.name: [(f.type, f.name) for f in st.fields] for st in C_API.structs}
    assert declared == spec
    assert len(spec) == 5


def test_header_carries_the_spec_comments(gen):
    """The header stays readable: each function's doc, each section and each field comment of the spec is in it."""
    text = re.sub(r"\s*\n\s*\*\s*", " ", (gen / "aoti_host/c_api.h").read_text() + (gen / "aoti_host/c_api_types.h").read_text())
    notes = [*C_API.docs.values(), *C_API.sections.values(), *(st.doc for st in C_API.structs),
             *(c for st in C_API.structs for c in st.comments.values())]
    missing = [n for n in notes if n and re.sub(r"\s+", " ", n) not in text]
    assert not missing
    assert len([n for n in notes if n]) > 50


def test_statuses_one_table_for_both_languages(gen):
    header = (gen / "aoti_host/status.h").read_text()
    generated = {m[1]: int(m[2]) for m in re.finditer(r"\b(AOTI_HOST_[A-Z_]+) = (\d+)", header)}
    spec = {s.name: s.value for s in C_API.statuses}
    assert generated == spec == errors.RUNTIME_STATUSES == _abi.STATUSES
    c_api_h = _strip_comments((gen / "aoti_host/c_api.h").read_text())
    assert "enum" not in c_api_h and '#include "aoti_host/status.h"' in c_api_h  # one definition, in status.h
    error_h = (ROOT / "runtime/include/aoti_host/error.h").read_text()
    assert '#include "aoti_host/status.h"' in error_h and "= AOTI_HOST_INTERNAL" in error_h


def _table_program(names: list[str], size: int | None = None) -> str:
    """C that fills an aoti_host_api member by member from the declared functions (a member whose type differs
    from its function's is an incompatible-pointer error under -Werror) and asserts the table's layout."""
    lines = ['#include <stddef.h>', '#include "aoti_host/c_api.h"', '#include "aoti_host/shims.h"',
             "void fill(aoti_host_api* t);", "void fill(aoti_host_api* t) {"]
    lines += [f"  t->{n} = {n};" for n in names]
    lines.append("}")
    if size is not None:
        lines += [f'_Static_assert(sizeof(aoti_host_api) == {size}, "one pointer per entry after two uint32_t");',
                  f'_Static_assert(offsetof(aoti_host_api, {names[0]}) == 8, "the entries follow version and size");',
                  f'_Static_assert(AOTI_HOST_API_VERSION == {C_API.table_version}, "the last [[table]] row");']
    return "\n".join([*lines, ""])


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def test_function_table_members_match_the_declarations(gen, tmp_path):
    names = [n for row in C_API.table for n in row]
    src = tmp_path / "table.c"
    src.write_text(_table_program(names, size=8 + ctypes.sizeof(ctypes.c_void_p) * len(names)))
    subprocess.run([_cc(), "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'runtime/include'}", f"-I{gen}",
                    "-c", "-o", str(tmp_path / "table.o"), str(src)], check=True)
    assert C_API.table_version == _abi.API_VERSION == 2
    assert set(names) == {f.name for f in C_API.functions} - {"aoti_host_get_api"} | set(C_API.shims)


def test_the_table_check_sees_a_member_of_another_type(gen, tmp_path):
    """The compile is a real check: a header whose member takes another type does not compile."""
    include = tmp_path / "include"
    shutil.copytree(gen, include)
    header = include / "aoti_host/c_api.h"
    text = header.read_text()
    drifted = text.replace("int (*aoti_host_program_num_inputs)(const aoti_host_program* program, size_t* out);",
                           "int (*aoti_host_program_num_inputs)(const aoti_host_program* program, int* out);")
    assert drifted != text
    header.write_text(drifted)
    src = tmp_path / "table.c"
    src.write_text(_table_program(["aoti_host_program_num_inputs"]))
    proc = subprocess.run([_cc(), "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'runtime/include'}", f"-I{include}",
                           "-c", "-o", str(tmp_path / "table.o"), str(src)], capture_output=True, text=True)
    assert proc.returncode != 0 and "aoti_host_program_num_inputs" in proc.stderr


def _spec_copy(tmp_path: Path, edit) -> Path:
    text = C_API_TOML.read_text()
    changed = edit(text)
    assert changed != text
    path = tmp_path / "c_api.toml"
    path.write_text(changed)
    return path


def test_a_function_outside_the_table_is_refused(tmp_path):
    path = _spec_copy(tmp_path, lambda t: t.replace(' "aoti_host_program_set_strict",', ''))
    with pytest.raises(SpecError, match="not in the function table: aoti_host_program_set_strict") as exc:
        load_c_api(path)
    assert f"version = {C_API.table_version + 1}" in str(exc.value.fix)


def test_a_table_entry_twice_or_unknown_is_refused(tmp_path):
    later = C_API.table_version + 1
    twice = _spec_copy(tmp_path, lambda t: t + f'\n[[table]]\nversion = {later}\nfunctions = ["aoti_host_version"]\n')
    with pytest.raises(SpecError, match="already in version 1"):
        load_c_api(twice)
    unknown = _spec_copy(tmp_path, lambda t: t + f'\n[[table]]\nversion = {later}\nfunctions = ["aoti_host_versoin"]\n')
    with pytest.raises(SpecError, match="did you mean 'aoti_host_version'"):
        load_c_api(unknown)
    skipped = _spec_copy(tmp_path, lambda t: t.replace("[[table]]\nversion = 1", "[[table]]\nversion = 2"))
    with pytest.raises(SpecError, match="version 2 where 1 comes next"):
        load_c_api(skipped)


def test_a_comment_on_no_field_is_refused(tmp_path):
    path = _spec_copy(tmp_path, lambda t: t.replace('strides = "NULL: contiguous"', 'stride = "NULL: contiguous"'))
    with pytest.raises(SpecError, match="no field 'stride' \\(did you mean 'strides'"):
        load_c_api(path)


def test_a_new_version_appends_to_the_table(tmp_path):
    """A function added in the next version lands after every earlier member: the old members keep their offsets."""
    later = C_API.table_version + 1
    path = _spec_copy(tmp_path, lambda t: t.replace(
        "\n[[table]]\nversion = 1",
        '\n[[function]]\nname = "aoti_host_later"\nprototype = "int aoti_host_later(void)"\n\n[[table]]\nversion = 1')
        + f'\n[[table]]\nversion = {later}\nfunctions = ["aoti_host_later"]\n')
    c_api = load_c_api(path)
    assert c_api.table_version == later and c_api.table[:-1] == C_API.table and c_api.table[-1] == ("aoti_host_later",)
    header = codegen.render(load_spec(), ("core", "cpu"), c_api=c_api)["include/aoti_host/c_api.h"]
    assert f"#define AOTI_HOST_API_VERSION {later}" in header
    members = re.findall(r"\(\*(\w+)\)", header)
    assert members[:-1] == [n for row in C_API.table for n in row] and members[-1] == "aoti_host_later"


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


def _compiled_layout(tmp_path: Path, gen_include: Path) -> dict[str, tuple[int, int]]:
    """{struct: (sizeof, alignof), struct.field: (offsetof, sizeof)} as the C compiler lays them out."""
    src = tmp_path / "layout.c"
    src.write_text(_layout_program(C_API.structs))
    exe = tmp_path / "layout"
    subprocess.run([_cc(), "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'runtime/include'}", f"-I{gen_include}",
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


def test_struct_layouts_match_the_c_compiler(gen, tmp_path):
    """A C program prints sizeof/offsetof of every C API struct and field; ctypes must agree."""
    compiled = _compiled_layout(tmp_path, gen)
    assert len(compiled) == sum(1 + len(st.fields) for st in C_API.structs)
    assert compiled == _ctypes_layout()


def test_the_layout_check_sees_a_header_that_drifted(gen, tmp_path):
    """The comparison is real: a header whose struct reorders two fields lays them out differently."""
    include = tmp_path / "include"
    shutil.copytree(gen, include)
    header = include / "aoti_host/c_api_types.h"
    text = header.read_text()
    drifted = text.replace("  void* data;\n  int32_t dtype;", "  int32_t dtype;\n  void* data;")
    assert drifted != text
    header.write_text(drifted)
    compiled = _compiled_layout(tmp_path, include)
    assert compiled["aoti_host_tensor_view.data"] != _ctypes_layout()["aoti_host_tensor_view.data"]
