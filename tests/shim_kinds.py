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


RETURNS = ("return", "int64 return")


def marshal(kinds: list[str], args, from_torch, keep: list) -> tuple[list, list, list]:
    """A shim call through ctypes, by the kinds of its prototype: (argtypes, arguments, returns). `args` are
    the non-return parameters in order (torch tensors, None for an absent optional, lists for "ints" and
    "indices", Python scalars and strings); tensors become handles through from_torch(t). `returns` are
    (kind, ctypes cell) of the out-parameters in order: a tensor handle (c_void_p) or an int64. Arrays a
    handle points into are appended to `keep` (they must outlive the call)."""
    import ctypes

    handle = ctypes.c_void_p
    p_handle = ctypes.POINTER(handle)
    scalars = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "double": ctypes.c_double, "string": ctypes.c_char_p}
    optional = {"optional int32": ctypes.c_int32, "optional int64": ctypes.c_int64, "optional double": ctypes.c_double}
    assert len(args) == sum(k not in RETURNS for k in kinds), (kinds, len(args))
    argtypes, cargs, rets, it = [], [], [], iter(args)
    for k in kinds:
        if k in RETURNS:
            cell = handle() if k == "return" else ctypes.c_int64()
            argtypes.append(ctypes.POINTER(type(cell)))
            rets.append((k, cell))
            cargs.append(ctypes.byref(cell))
            continue
        a = next(it)
        if k == "tensor":
            argtypes.append(handle)
            cargs.append(from_torch(a))
        elif k == "optional tensor":
            argtypes.append(p_handle)
            cargs.append(None if a is None else ctypes.pointer(handle(from_torch(a))))
        elif k == "ints":
            argtypes += [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
            cargs += [(ctypes.c_int64 * max(len(a), 1))(*a), len(a)]
        elif k == "indices":  # const AtenTensorHandle** + length: a pointer per entry, null for None
            ptrs = [None if t is None else ctypes.pointer(handle(from_torch(t))) for t in a]
            arr = (p_handle * max(len(ptrs), 1))(*ptrs)
            keep.append((arr, ptrs))
            argtypes += [ctypes.POINTER(p_handle), ctypes.c_int64]
            cargs += [arr, len(a)]
        elif k in optional:
            argtypes.append(ctypes.POINTER(optional[k]))
            cargs.append(None if a is None else ctypes.pointer(optional[k](a)))
        elif k == "optional string":
            argtypes.append(ctypes.POINTER(ctypes.c_char_p))
            cargs.append(None if a is None else ctypes.pointer(ctypes.c_char_p(a.encode())))
        elif k == "string":
            argtypes.append(ctypes.c_char_p)
            cargs.append(a.encode())
        else:
            argtypes.append(scalars[k])
            cargs.append(a)
    return argtypes, cargs, rets


class HandleOwner:
    """What a ctypes harness over the runtime library owns: the tensor handles it made or got back, deleted
    by release() (each deletion checked), and the objects their memory lives in, kept alive until then."""

    def __init__(self, lib) -> None:
        self.lib = lib
        self.handles: list[int] = []
        self.keep: list[object] = []

    def check(self, rc: int, what: str) -> None:
        assert rc == 0, f"{what} failed with rc={rc}"

    def release(self) -> None:
        for h in self.handles:
            self.check(self.lib.aoti_torch_delete_tensor_object(h), "delete_tensor_object")
        self.handles.clear()
        self.keep.clear()
