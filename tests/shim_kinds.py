"""The argument kinds of the fallback shims, read from their prototypes in toolchain/spec/shims.toml (which
copies torch's generated c_shim_*.h): the test harnesses that call shims through ctypes
(tests/integration/test_cpu_fallback_ops.py, tests/gpu/test_cuda_ops.py) take their signatures from here,
so a prototype has one owner.

A prototype's parameters map to these kinds, in order:
    AtenTensorHandle                        "tensor"
    AtenTensorHandle* retN / other          "return" / "optional tensor"
    const int64_t* X, int64_t X_len_        "ints"
    const AtenTensorHandle** X, int64_t X_len_   "indices" (a pointer per entry, null for None)
    int64_t* retN / other                   "int64 return" / "optional int64"
    int32_t* / double* / const char**       "optional int32" / "optional double" / "optional string"
    const char*                             "string"
    int32_t / int64_t / double              "int32" / "int64" / "double"
"""

from __future__ import annotations

import functools

_SCALARS = {"int32_t": "int32", "int64_t": "int64", "double": "double", "const char*": "string",
            "int32_t*": "optional int32", "double*": "optional double", "const char**": "optional string"}


def kinds_of(params) -> list[str]:
    out: list[str] = []
    skip = False
    for i, p in enumerate(params):
        if skip:
            skip = False
            continue
        nxt = params[i + 1] if i + 1 < len(params) else None
        is_len = nxt is not None and nxt.name == f"{p.name}_len_" and nxt.type == "int64_t"
        if p.type == "AtenTensorHandle":
            out.append("tensor")
        elif p.type == "AtenTensorHandle*":
            out.append("return" if p.name.startswith("ret") else "optional tensor")
        elif p.type == "const int64_t*" and is_len:
            out.append("ints")
            skip = True
        elif p.type == "const AtenTensorHandle**" and is_len:
            out.append("indices")
            skip = True
        elif p.type == "int64_t*":
            out.append("int64 return" if p.name.startswith("ret") else "optional int64")
        elif p.type in _SCALARS:
            out.append(_SCALARS[p.type])
        else:
            raise ValueError(f"parameter {p.type} {p.name}: no kind for it (tests/shim_kinds.py)")
    return out


@functools.cache
def shim_kinds(group: str) -> dict[str, list[str]]:
    """{op: kinds} for the fallback shims `aoti_torch_<group>_<op>` the spec lists (group: cpu or cuda; the
    device's other shims, such as CUDA guards and streams, are not called through these harnesses)."""
    from toolchain.spec import load_spec

    prefix = f"aoti_torch_{group}_"
    return {s.name[len(prefix):]: kinds_of(s.params) for s in load_spec().shims
            if s.group == group and s.name.startswith(prefix) and _is_fallback(s)}


def _is_fallback(shim) -> bool:
    """A fallback op's shim: declared in torch's generated per-device header or its hand-written c/shim_cpu.h."""
    return shim.header.startswith("generated/c_shim_") or shim.header == "c/shim_cpu.h"
