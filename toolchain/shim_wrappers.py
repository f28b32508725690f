"""Op shim wrappers (after torchgen's gen_aoti_c_shim.py): a shims.toml row with `impl` gets a wrapper that
marshals each C parameter by its type (MARSHAL), calls the kernel entry the row names and hands the outputs back;
templates/_shim_wrappers.j2 renders them (toolchain/codegen.py). A row that can't have one is a SpecError naming
the shim. The row format and the table are documented in docs/architecture.md ("Shim rows")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolchain.errors import SpecError
from toolchain.spec import Shim


class WrapperError(SpecError):
    """An op shim's row can't give a generated wrapper (or says neither impl nor manual)."""


@dataclass(frozen=True)
class Marshal:
    """How a wrapper hands a C parameter of one type to the kernel: the C++ expression ({n}: the parameter,
    {len}: its `<n>_len_` length parameter, for arrays) and the kernel parameter's C++ type."""

    expr: str
    kernel_type: str
    length: bool = False


#: The marshalling table: C parameter type (normalised, as in shims.toml) -> Marshal. torch's C shims pass
#: bool as int32_t, optional scalars as pointers (null: None), lists as pointer + length.
MARSHAL: dict[str, Marshal] = {
    "AtenTensorHandle": Marshal('tensor_arg({n}, "{n}")', "Tensor&"),
    "AtenTensorHandle*": Marshal("optional_arg({n})", "const Tensor*"),
    "const AtenTensorHandle**": Marshal('optional_list({n}, {len}, "{n}")', "std::vector<const Tensor*>", True),
    "const int64_t*": Marshal('int_list({n}, {len}, "{n}")', "std::vector<int64_t>", True),
    "int64_t": Marshal("{n}", "int64_t"),
    "int64_t*": Marshal("{n}", "const int64_t*"),
    "double": Marshal("{n}", "double"),
    "double*": Marshal("{n}", "const double*"),
    "int32_t": Marshal("{n} != 0", "bool"),
    "int32_t*": Marshal("{n}", "const int32_t*"),
    "const char*": Marshal('str_arg({n}, "{n}")', "std::string"),
    "const char**": Marshal("optional_str({n})", "const char*"),
}
#: Output parameters (named ret<N>), by type -> the kernel's out-parameter type. A kernel whose only output is
#: one tensor returns it (a new owning Tensor*) instead.
OUTPUT_TYPES: dict[str, str] = {"AtenTensorHandle*": "Tensor**", "int64_t*": "int64_t*"}
#: Ops whose shims take null output pointers (torchgen's gen_aoti_c_shim.py, ret_pointer_can_be_null; matched,
#: as there, as a part of the op's name): AOTInductor passes nullptr for an output the op's meta function says is
#: None (the attention ops' cum_seq_q/k, the cuDNN entry's debug mask), and the output is dropped.
NULLABLE_OUTPUT_OPS: tuple[str, ...] = (
    "_functional_sym_constrain_range", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_thhn_fused_lstm_cell_backward_impl", "convolution_backward", "grid_sampler_2d_backward",
    "grid_sampler_3d_backward", "linear_backward",
)
#: The header declaring each device's kernel entries, included by its generated wrappers.
WRAPPER_INCLUDES: dict[str, tuple[str, ...]] = {
    "cpu": ("shims/cpu_kernels.h", "shims/ops/ops.h"), "cuda": ("shims/cuda/ops/ops.h",),
}
_OUTPUT_RE = re.compile(r"^ret\d+$")
_IMPL_RE = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class Wrapper:
    """A generated op wrapper: the shim, the kernel it calls with which arguments, and its outputs."""

    shim: Shim
    impl: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]  # the ret<N> parameters, in order
    tensor_outputs: tuple[str, ...]  # those that are tensors (a Tensor* local each, handed over after the call)
    returns: str  # the one tensor output the kernel returns, or "" when outputs are out-parameters
    nullable: bool = False  # out-parameter pointers may be null (NULLABLE_OUTPUT_OPS): that output is dropped
    int_outputs: tuple[str, ...] = ()  # the int64_t* outputs (a local each stands in for a null pointer)


def is_op_shim(shim: Shim) -> bool:
    """aoti_torch_<device>_<op> shims of the cpu and cuda groups: each needs `impl` or `manual`."""
    return shim.group in WRAPPER_INCLUDES and shim.name.startswith(f"aoti_torch_{shim.group}_")


def _wrapper(s: Shim) -> Wrapper:
    def fail(reason: str, fix: str) -> WrapperError:
        return WrapperError(f"shims.toml: shim {s.name!r}: {reason}", fix=fix)

    if s.group not in WRAPPER_INCLUDES or s.returns != "AOTITorchError":
        raise fail(f"impl is given, but the shim is in group {s.group!r} and returns {s.returns}",
                   "generated wrappers are for op shims of the cpu and cuda groups returning AOTITorchError")
    if not _IMPL_RE.match(s.impl):
        raise fail(f"impl {s.impl!r} is not a C++ function name", 'name the kernel entry, e.g. impl = "ops::sort"')
    args = list(s.impl_args)
    outputs: list[str] = []
    params = list(s.params)
    i = 0
    while i < len(params):
        p = params[i]
        i += 1
        if _OUTPUT_RE.match(p.name):
            if p.type not in OUTPUT_TYPES:
                raise fail(f"output {p.name} has type {p.type!r}, which the marshalling table has no row for",
                           f"outputs may be {', '.join(OUTPUT_TYPES)}; else write the wrapper by hand (manual = ...)")
            outputs.append(p.name)
            continue
        if outputs:
            raise fail(f"parameter {p.name} comes after the outputs", "outputs (ret<N>) come last, as torch's do")
        m = MARSHAL.get(p.type)
        if m is None:
            raise fail(f"parameter {p.name} has type {p.type!r}, which the marshalling table has no row for",
                       "add the type to MARSHAL in toolchain/shim_wrappers.py, or write the wrapper by hand (manual = ...)")
        length = ""
        if m.length:
            nxt = params[i] if i < len(params) else None
            if nxt is None or nxt.type != "int64_t" or nxt.name != f"{p.name}_len_":
                raise fail(f"array parameter {p.name} is not followed by its length 'int64_t {p.name}_len_'",
                           "give the prototype exactly as torch declares it")
            length = nxt.name
            i += 1
        args.append(m.expr.format(n=p.name, len=length))
    types = {p.name: p.type for p in params}
    tensor_outputs = tuple(o for o in outputs if types[o] == "AtenTensorHandle*")
    returns = outputs[0] if len(outputs) == 1 and tensor_outputs else ""
    op = s.name[len(f"aoti_torch_{s.group}_"):]
    nullable = not returns and any(name in op for name in NULLABLE_OUTPUT_OPS)
    int_outputs = tuple(o for o in outputs if o not in tensor_outputs) if nullable else ()
    if not returns:
        args += [f"&{o}_t" if o in tensor_outputs else f"{o} != nullptr ? {o} : &{o}_v" if o in int_outputs else o
                 for o in outputs]
    return Wrapper(s, s.impl, tuple(args), tuple(outputs), () if returns else tensor_outputs, returns, nullable,
                   int_outputs)


def wrappers(shims: tuple[Shim, ...]) -> dict[str, list[Wrapper]]:
    """The generated wrappers per device group; checks every op shim says `impl` or why it is `manual`."""
    out: dict[str, list[Wrapper]] = {g: [] for g in WRAPPER_INCLUDES}
    for s in shims:
        if s.impl and s.manual:
            msg = f"shims.toml: shim {s.name!r}: both impl and manual are given"
            raise WrapperError(msg, fix="keep impl for a generated wrapper, manual (the reason) for a hand-written one")
        if s.impl_args and not s.impl:
            msg = f"shims.toml: shim {s.name!r}: impl_args without impl"
            raise WrapperError(msg, fix="name the kernel entry in impl, or drop impl_args")
        if s.impl:
            w = _wrapper(s)
            out[s.group].append(w)
        elif is_op_shim(s) and not s.manual:
            msg = f"shims.toml: op shim {s.name!r} has neither impl nor manual"
            raise WrapperError(msg, fix='name its kernel entry (impl = "ops::...") so its wrapper is generated, or '
                                        'say why its wrapper is written by hand (manual = "...")')
    return out
