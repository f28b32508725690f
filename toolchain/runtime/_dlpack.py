"""Reading any DLPack producer (torch, JAX, cupy, ... tensors: objects with `__dlpack__`) without a copy.

The capsule's DLTensor gives pointer, dtype, shape, strides and device; the capsule is kept alive with the
view and never consumed (not renamed), so its own destructor calls the producer's deleter when it goes. That
covers the dtypes numpy lacks (bfloat16) and device memory alike. Layouts from dlpack/dlpack.h (v1.0): the
legacy `DLManagedTensor` ("dltensor") and the versioned `DLManagedTensorVersioned` ("dltensor_versioned").
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from toolchain.errors import InputError
from toolchain.spec import load_abi

# DLDeviceType
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST)  # memory the CPU can read (pinned host memory included)

# DLDataTypeCode (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6) and bits -> torch's dtype name
_DTYPES: dict[tuple[int, int], str] = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16", (6, 8): "bool",
}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class View:
    """A DLPack tensor as the runtime's TensorView needs it; `capsule` keeps the memory alive."""

    ptr: int
    dtype: str  # torch's name: "bfloat16", ...
    code: int  # torch's ScalarType code (toolchain/spec/abi.toml)
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    device_type: int  # DLDeviceType
    device_id: int
    capsule: Any

    @property
    def on_host(self) -> bool:
        return self.device_type in _HOST_DEVICES


_ABI_DTYPES: dict[str, Any] = {}


def _abi_dtype(name: str) -> Any:
    """abi.toml's dtype of that name, read once per process (load_abi parses the file on every call)."""
    d = _ABI_DTYPES.get(name)
    if d is None:
        d = load_abi().dtype(name)
        assert d is not None, name  # every name in _DTYPES is in abi.toml
        _ABI_DTYPES[name] = d
    return d


def is_producer(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")


def device_of(obj: Any) -> tuple[int, int]:
    """(DLDeviceType, device id) without exporting anything."""
    dev_type, dev_id = obj.__dlpack_device__()
    return int(dev_type), int(dev_id)


def view(obj: Any, what: str, *, stream: int | None = None) -> View:
    """The DLTensor `obj.__dlpack__()` exports. `stream`: the CUDA stream the consumer will use (1: the legacy
    default stream), so the producer orders its pending work before it; None for host memory."""
    kwargs: dict[str, Any] = {} if stream is None else {"stream": stream}
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:  # a producer older than DLPack 1.0 (no max_version keyword)
            capsule = obj.__dlpack__(**kwargs)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        msg = f"{what}: cannot export it through DLPack: {exc}"
        raise InputError(msg, fix="pass a plain tensor (e.g. tensor.detach().contiguous()) or a numpy array") from exc
    name = _capsule_name(capsule)
    if name == b"dltensor_versioned":
        managed = _ManagedVersioned.from_address(_capsule_pointer(capsule, name))
        if managed.version.major > 1:
            msg = f"{what}: DLPack version {managed.version.major}.{managed.version.minor} is newer than this reader (1.x)"
            raise InputError(msg, fix="pass a numpy array, or upgrade aoti-toolchain")
        t = managed.dl_tensor
    elif name == b"dltensor":
        t = _Managed.from_address(_capsule_pointer(capsule, name)).dl_tensor
    else:
        msg = f"{what}: __dlpack__ returned a capsule named {name!r}, not a DLPack tensor"
        raise InputError(msg, fix="pass a numpy array or a torch tensor")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        msg = f"{what}: DLPack dtype (code {code}, {bits} bits, {lanes} lanes) is not supported"
        raise InputError(msg, fix="use float16/32/64, bfloat16, int8-64, uint8 or bool")
    d = _abi_dtype(dtype)
    if t.ndim < 0:
        msg = f"{what}: DLPack tensor with ndim {t.ndim}"
        raise InputError(msg, fix="pass a plain tensor")
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    if t.strides:
        strides = tuple(int(t.strides[k]) for k in range(t.ndim))
    else:  # NULL strides: compact row-major
        acc, rev = 1, []
        for n in reversed(shape):
            rev.append(acc)
            acc *= max(n, 1)
        strides = tuple(reversed(rev))
    if t.byte_offset % d.itemsize:
        msg = f"{what}: DLPack byte_offset {t.byte_offset} is not a multiple of the {d.itemsize}-byte element"
        raise InputError(msg, fix="pass a contiguous copy (tensor.contiguous())")
    ptr = (t.data or 0) + int(t.byte_offset)
    return View(ptr, d.name, d.code, d.itemsize, shape, strides, int(t.device.device_type), int(t.device.device_id),
                capsule)
