"""The key names of the package's JSON records live in toolchain/spec/records.toml alone: Python reads them
through toolchain.spec.records, the runtime through the generated aoti_host/package_records.h, and neither
side spells a key itself (tests/integration/test_verify_package.py feeds both every key renamed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from toolchain import codegen
from toolchain.errors import SpecError
from toolchain.spec.records import RECORDS, SPEC, load_records

REPO = Path(__file__).resolve().parents[2]
#: The runtime's readers of the records, and the Python modules that read or write them.
CXX_READERS = ("runtime/src/host/contract.cpp", "runtime/src/host/preflight.cpp", "runtime/src/host/weights.cpp",
               "runtime/src/host/program.cpp")
PY_READERS = ("toolchain/verify/package.py", "toolchain/target.py", "toolchain/export_contract.py",
              "toolchain/contract.py")


def _header(records) -> str:
    env = codegen._environment(codegen.TEMPLATE_DIR)
    return env.get_template("package_records.h.j2").render(template="t", spec_files=["records.toml"], groups=(),
                                                           records=records)


def test_python_and_the_header_name_the_same_keys():
    header = _header(RECORDS)
    for obj in RECORDS.objects.values():
        ns = header[header.index(f"namespace {obj.name} {{"):header.index(f"}}  // namespace {obj.name}\n")]
        consts = dict(re.findall(r'inline constexpr const char\* (k\w+) = "([^"]*)";', ns))
        assert consts == {obj.cxx(i): k for i, k in obj.keys.items()}
        for key_id, key in obj.keys.items():
            assert getattr(getattr(RECORDS, obj.name), key_id) == key
    assert RECORDS.contract_tensor.dtype == "dtype" and RECORDS.constant.data_size == "data_size"
    assert RECORDS.required["constant"] == ("name", "shape", "stride", "offset", "data_size")


def test_a_renamed_key_is_renamed_in_both(tmp_path):
    path = tmp_path / "records.toml"
    path.write_text(SPEC.read_text().replace('data_size = "data_size"', 'data_size = "nbytes"'))
    records = load_records(path)
    assert records.constant.data_size == "nbytes" and "nbytes" in records.required["constant"]
    assert 'inline constexpr const char* kDataSize = "nbytes";  // required' in _header(records)


@pytest.mark.parametrize(("old", "new", "says"), [
    ('inputs = "inputs"', 'inputs = "a\\"b"', "is not a key name"),
    ('outputs = "outputs"', 'outputs = "inputs"', "names one JSON key twice"),
    ('required = ["dtype", "shape"]', 'required = ["dtype", "size"]', "'size' is not an id"),
    ("schema = 1\n", "schema = 2\n", "not 1"),
])
def test_a_bad_table_is_refused_by_name(tmp_path, old, new, says):
    path = tmp_path / "records.toml"
    text = SPEC.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError, match=re.escape(says)):
        load_records(path)


def test_an_unknown_object_is_an_attribute_error_naming_the_objects():
    with pytest.raises(AttributeError, match="no object 'contracts'.*contract_tensor"):
        RECORDS.contracts  # noqa: B018


def test_the_runtime_spells_no_key_itself():
    for rel in CXX_READERS:
        text = (REPO / rel).read_text()
        assert "aoti_host/package_records.h" in text, rel
        literal = re.findall(r'\bget\("[^"]*"\)', text)
        assert literal == [], f"{rel}: reads {literal} by a literal key; use records::<object>::k<Key>"


def test_the_python_readers_spell_no_key_themselves():
    keys = {k for obj in RECORDS.objects.values() for k in obj.keys.values()}
    for rel in PY_READERS:
        tree = ast.parse((REPO / rel).read_text())
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript):
                literal = node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "get", "pop", "setdefault") and node.args:
                literal = node.args[0]
            elif isinstance(node, ast.Dict):
                found += [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in keys]
                continue
            else:
                continue
            if isinstance(literal, ast.Constant) and literal.value in keys:
                found.append(literal.value)
        assert found == [], f"{rel}: spells the record keys {found}; use toolchain.spec.records.RECORDS"
