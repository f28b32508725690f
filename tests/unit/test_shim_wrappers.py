"""Op shim wrappers generated from shims.toml (toolchain/shim_wrappers.py MARSHAL, templates/_shim_wrappers.j2): every
op shim says `impl` or `manual`, each C type is marshalled as the table says, and bad rows stop code generation
with the shim's name. That the generated wrappers compile against the kernels and behave is the CPU build's and
tests/integration/test_cpu_fallback_ops.py's to show."""

from __future__ import annotations

import pytest

from toolchain import codegen, shim_wrappers
from toolchain.spec import Shim, load_spec, parse_prototype

SPEC = load_spec()


def shim(prototype: str, group: str = "cpu", **row: object) -> Shim:
    fn = parse_prototype(prototype)
    return Shim(fn.name, fn.returns, fn.params, fn.prototype, group, "generated/c_shim_cpu.h", **row)  # type: ignore[arg-type]


def test_every_op_shim_is_generated_or_says_why_not():
    by_group = shim_wrappers.wrappers(SPEC.shims)
    generated = {w.shim.name for ws in by_group.values() for w in ws}
    for s in SPEC.shims:
        if shim_wrappers.is_op_shim(s):
            assert (s.name in generated) != bool(s.manual), s.name
    # every op is generated: none of them does more than marshal; the manual rows of the op-shim name space are
    # device-level shims (the device guard, the caching allocator) and say so first
    manual = [s for s in SPEC.shims if shim_wrappers.is_op_shim(s) and s.name not in generated]
    assert manual and all(s.manual.startswith("not an op: ") for s in manual), [(s.name, s.manual) for s in manual]


def test_marshalling_by_type():
    w = shim_wrappers._wrapper(shim(
        "AOTITorchError aoti_torch_cpu_x(AtenTensorHandle self, AtenTensorHandle* opt, const int64_t* sizes, "
        "int64_t sizes_len_, const AtenTensorHandle** idx, int64_t idx_len_, int32_t flag, int32_t* dtype, "
        "int64_t n, int64_t* maybe_n, double p, double* scale, const char* reduce, const char** side, "
        "AtenTensorHandle* ret0)", impl="ops::x", impl_args=("3",)))
    assert w.args == ("3", 'tensor_arg(self, "self")', "optional_arg(opt)", 'int_list(sizes, sizes_len_, "sizes")',
                      'optional_list(idx, idx_len_, "idx")', "flag != 0", "dtype", "n", "maybe_n", "p", "scale",
                      'str_arg(reduce, "reduce")', "optional_str(side)")
    assert (w.outputs, w.returns, w.tensor_outputs) == (("ret0",), "ret0", ())


def test_several_outputs_are_out_parameters():
    w = shim_wrappers._wrapper(shim(
        "AOTITorchError aoti_torch_cuda_y(AtenTensorHandle q, AtenTensorHandle* ret0, int64_t* ret1, "
        "AtenTensorHandle* ret2)", group="cuda", impl="cuda::y"))
    assert w.returns == ""
    assert w.tensor_outputs == ("ret0", "ret2")
    assert w.args == ('tensor_arg(q, "q")', "&ret0_t", "ret1", "&ret2_t")


def test_rendered_wrapper_checks_outputs_and_hands_them_over():
    text = codegen.render(SPEC, ("core", "cpu"))["src/shims/cpu_ops.cpp"]
    body = text[text.index("aoti_torch_cpu_sort(AtenTensorHandle"):]
    body = body[:body.index("\n}\n")]
    assert 'guarded("aoti_torch_cpu_sort"' in body
    assert body.index('need(ret1, "ret1")') < body.index("aoti_host::ops::sort(")
    assert "*ret0 = to_handle(ret0_t);" in body and "*ret1 = to_handle(ret1_t);" in body
    assert codegen.render(SPEC, ("core", "cpu"))["src/shims/cuda_ops.cpp"].count("AOTI_HOST_API") == 0


def test_attention_wrappers_take_null_output_pointers():
    """AOTInductor passes nullptr for an output the op's meta says is None (torchgen's ret_pointer_can_be_null
    ops): those wrappers drop that output instead of refusing the call; other wrappers still refuse null."""
    text = codegen.render(SPEC, ("core", "cpu", "cuda"))["src/shims/cuda_ops.cpp"]
    body = text[text.index("aoti_torch_cuda__scaled_dot_product_cudnn_attention(AtenTensorHandle"):]
    body = body[:body.index("\n}\n")]
    assert "need(" not in body
    assert "if (ret2 != nullptr) *ret2 = to_handle(ret2_t); else delete ret2_t;" in body
    assert "ret4 != nullptr ? ret4 : &ret4_v" in body and "int64_t ret4_v = 0;" in body
    w = shim_wrappers._wrapper(shim(
        "AOTITorchError aoti_torch_cuda_y(AtenTensorHandle q, AtenTensorHandle* ret0, int64_t* ret1)",
        group="cuda", impl="cuda::y"))
    assert not w.nullable and w.args == ('tensor_arg(q, "q")', "&ret0_t", "ret1")


@pytest.mark.parametrize(("prototype", "row", "reason"), [
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self, float x)", {"impl": "ops::z"},
     "parameter x has type 'float'"),
    ("AOTITorchError aoti_torch_cpu_z(const int64_t* dims, int64_t n)", {"impl": "ops::z"},
     "not followed by its length 'int64_t dims_len_'"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle* ret0, AtenTensorHandle self)", {"impl": "ops::z"},
     "comes after the outputs"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self, double* ret0)", {"impl": "ops::z"},
     "output ret0 has type 'double*'"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self)", {"impl": "ops::z("}, "is not a C++ function name"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self)", {"impl": "ops::z", "manual": "why"},
     "both impl and manual"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self)", {"impl_args": ("2",)}, "impl_args without impl"),
    ("AOTITorchError aoti_torch_cpu_z(AtenTensorHandle self)", {}, "has neither impl nor manual"),
])
def test_bad_rows_name_the_shim(prototype, row, reason):
    with pytest.raises(shim_wrappers.WrapperError, match="aoti_torch_cpu_z") as err:
        shim_wrappers.wrappers((shim(prototype, **row),))
    assert reason in str(err.value)
    assert err.value.fix


def test_core_shims_need_no_impl():
    assert shim_wrappers.wrappers((shim("AOTITorchError aoti_torch_get_dim(AtenTensorHandle t, int64_t* ret_dim)",
                                  group="core"),)) == {"cpu": [], "cuda": []}


def test_item_shims_are_generated_except_bool():
    text = codegen.render(SPEC, ("core", "cpu"))["include/aoti_host/shims_constants.inc"]
    items = [s.name for s in SPEC.shims if s.name.startswith("aoti_torch_item_")]
    assert len(items) == 8
    for name in items:
        # bool* is not the byte torch stores: aoti_torch_item_bool stays in shims_core.cpp
        assert (f'return item("{name}", tensor, ret_value, ' in text) == (name != "aoti_torch_item_bool"), name
