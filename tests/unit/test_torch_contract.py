"""toolchain.torch_contract on wrapper sources as torch writes them, trimmed to what the parser reads, and on the
variants other torch versions write or leave out: what it can't read it refuses, naming what is missing (the
integration tests run it on real packages: tests/integration/test_torch_packages.py)."""

from __future__ import annotations

import re

import pytest

from toolchain.torch_contract import Underivable, derive


def _check(i: int, arg: str, dtype: str, body: str) -> str:
    return f"""
AOTI_NOINLINE static void check_input_{i}(
    AtenTensorHandle* input_handles
) {{
    ConstantHandle {arg} = ConstantHandle(input_handles[{i}]);
    int32_t {arg}_expected_dtype = aoti_torch_dtype_{dtype}();
    auto {arg}_size = {arg}.sizes();
{body}
}}
"""


def _low(i, arg, d, v):
    return (f'    if ({arg}_size[{d}] < {v}) {{ ss << "input_handles[{i}]: dim value is too small at {d}, "\n'
            f'           << "expected it to be >= {v}, " << "but got: "; }}\n')


def _high(i, arg, d, v):
    return (f'    if ({arg}_size[{d}] > {v}) {{ ss << "input_handles[{i}]: dim value is too large at {d}, "\n'
            f'           << "expected to be <= {v}, " << "but got: "; }}\n')


def _static(arg, d, v):
    return f"    if ({v} != {arg}_size[{d}]) {{ }}\n"


def _stride(arg, d, v):
    return f"    if ({v} != {arg}_stride[{d}]) {{ }}\n"


TWO = (
    '    inputs_info_[0].name = "arg2_1";\n    inputs_info_[1].name = "arg3_1";\n'
    '    out_spec_ = R"([1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": null, '
    '"context": null, "children_spec": []}]}])";\n    outputs_info_[0].name = "output0";\n'
    + _check(0, "arg2_1", "float32", _low(0, "arg2_1", 0, 2) + _high(0, "arg2_1", 0, 128) + _static("arg2_1", 1, 16)
             + _stride("arg2_1", 0, 16) + _stride("arg2_1", 1, 1))
    + _check(1, "arg3_1", "float32", _low(1, "arg3_1", 0, 2) + _high(1, "arg3_1", 0, 128) + _static("arg3_1", 1, 16)
             + _stride("arg3_1", 1, 1))
    + "static bool _check_aoti_runtime_check_inputs_env() { }\n"
    "void AOTInductorModel::run_impl(\n"
    "    auto arg2_1 = std::move(inputs[0]);\n    auto arg3_1 = std::move(inputs[1]);\n"
    "    auto arg2_1_size = arg2_1.sizes();\n    int64_t s54 = arg2_1_size[0];\n    int64_t s77 = s54;\n"
    '    if (_check_aoti_runtime_check_inputs_env()) { assert_size_stride(arg3_1, {s54, 16L}, {16L, 1L}, "input"); }\n'
    "    const int64_t int_array_0[] = {s54, 16L};\n    static constexpr int64_t int_array_1[] = {16L, 1L};\n"
    "    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(2, int_array_0, int_array_1, cached_torch_dtype_float32,"
    " cached_torch_device_type_cpu, this->device_idx_, &buf0_handle));\n"
    "    auto buf1 = std::move(buf0);  // reuse\n    output_handles[0] = buf1.release();\n"
    "} // AOTInductorModel::run_impl\n"
)


def test_shared_symbol_ranges_strides_and_outputs():
    c = derive(TWO).contract
    assert c["symbols"] == [{"name": "s54", "min": 2, "max": 128}]
    dim = {"min": 2, "max": 128, "expr": "s54"}
    assert [t["shape"] for t in c["inputs"]] == [[dim, 16], [dim, 16]]
    assert [t["strides"] for t in c["inputs"]] == [[16, 1], [16, 1]]
    assert c["outputs"] == [{"name": "output0", "dtype": "float32", "shape": [{"expr": "s54", "min": 2, "max": 128}, 16],
                             "strides": [16, 1], "path": [0]}]


def test_without_asserts_a_second_input_keeps_its_range_but_not_the_shared_symbol():
    """Older wrappers (or checks compiled out) assert nothing in run_impl: the second input's dimension is
    recorded by its range alone, which is still what the plugin accepts."""
    src = "\n".join(line for line in TWO.splitlines() if "assert_size_stride" not in line)
    c = derive(src).contract
    assert c["inputs"][1]["shape"] == [{"min": 2, "max": 128}, 16]
    assert c["inputs"][0]["shape"][0]["expr"] == "s54"


def test_outputs_not_allocated_plainly_are_left_undetermined():
    src = TWO.replace("output_handles[0] = buf1.release();", "output_handles[0] = arg2_1.release();")
    assert derive(src).contract["outputs"] is None


@pytest.mark.parametrize(("edit", "why"), [
    (lambda s: s.replace("check_input_1(", "check_input_x("), "no generated check for input(s) [1]"),
    (lambda s: s.replace("aoti_torch_dtype_float32()", "aoti_torch_dtype_complex64()", 1), "dtype complex64"),
    (lambda s: s.replace('inputs_info_[0].name = "arg2_1";\n    inputs_info_[1].name = "arg3_1";\n', ""),
     "names no inputs"),
    (lambda s: s.replace("void AOTInductorModel::run_impl(", "void other("), "no run_impl"),
])
def test_refuses_what_it_cannot_read(edit, why):
    with pytest.raises(Underivable, match=re.escape(why)):
        derive(edit(TWO))


def test_a_layout_checked_only_in_part_and_not_contiguous_is_refused():
    src = TWO.replace(_stride("arg3_1", 1, 1), _stride("arg3_1", 1, 5)).replace(
        '    if (_check_aoti_runtime_check_inputs_env()) { assert_size_stride(arg3_1, {s54, 16L}, {16L, 1L}, "input"); }\n',
        "")
    with pytest.raises(Underivable, match="layout can't be told"):
        derive(src)
