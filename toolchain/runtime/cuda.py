"""GPU side of the bundled runtime: device buffers in and out of CUDA programs.

Only imported for programs loaded on "cuda" (or when a device buffer is passed), so CPU plugins run
without cuda-python installed. Allocations, copies and synchronisation go through cuda-python's
`cuda.bindings` (the CUDA runtime API); device outputs are `DeviceArray`s, which other libraries take
without a copy through `__cuda_array_interface__` (torch.as_tensor, cupy.asarray, numba).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.errors import InputError, LoadError, RunError
from toolchain.runtime import _abi, _dlpack
from toolchain.spec import load_abi

CUDA_DEVICE_TYPE = load_abi().constants["device_type"]["cuda"]  # torch's code (toolchain/spec/abi.toml)
# dtypes with a DLPack code (toolchain/runtime/_dlpack.py), which DeviceArray exports without a copy
_DLPACK_NAMES = frozenset(_dlpack._DTYPES.values())


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]  # older cuda-python
        except ImportError as exc:
            msg = "device buffers need cuda-python (the cuda.bindings module), which is not installed"
            raise LoadError(msg, fix="pip install cuda-python (CPU programs do not need it)") from exc
    return cudart


def _check(result: Any, what: str) -> Any:
    """cuda.bindings calls return (err, *values): raise on err, return the values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        cudart = _cudart()
        name = cudart.cudaGetErrorName(err)[1].decode(errors="replace")
        text = cudart.cudaGetErrorString(err)[1].decode(errors="replace")
        msg = f"{what} failed: {name}: {text}"
        raise RunError(msg)
    return rest[0] if len(rest) == 1 else tuple(rest)


def device_count() -> int:
    """Visible CUDA devices; 0 when cuda-python or a driver is missing."""
    try:
        cudart = _cudart()
        err, n = cudart.cudaGetDeviceCount()
    except Exception:
        return 0
    return int(n) if int(err) == 0 else 0


@contextlib.contextmanager
def on_device(index: int, *, required: bool = True) -> Iterator[None]:
    """CUDA device `index` current on this thread for the block, then the caller's device again: what this
    module does for memory of cuda:N runs there (allocations, copies, the legacy stream they order on) and
    leaves the caller's current device as it found it. required=False: without cuda-python the block runs
    on whatever device is current (for callers that worked without it before, e.g. DLPack exports)."""
    try:
        cudart = _cudart()
    except LoadError:
        if required:
            raise
        cudart = None
    if cudart is None:
        yield
        return
    prev = int(_check(cudart.cudaGetDevice(), "cudaGetDevice"))
    if prev != index:
        _check(cudart.cudaSetDevice(index), f"cudaSetDevice({index})")
    try:
        yield
    finally:
        if prev != index:
            cudart.cudaSetDevice(prev)


def current_device() -> int:
    """The calling thread's current CUDA device."""
    return int(_check(_cudart().cudaGetDevice(), "cudaGetDevice"))


def pointer_device(ptr: int) -> int | None:
    """The device whose memory `ptr` points into (cudaPointerGetAttributes), None for host or unknown memory."""
    if not ptr:
        return None
    try:
        cudart = _cudart()
    except LoadError:
        return None
    err, attrs = cudart.cudaPointerGetAttributes(ptr)
    if int(err) != 0:
        return None
    kind = int(attrs.type)
    return int(attrs.device) if kind in (2, 3) else None  # cudaMemoryTypeDevice, cudaMemoryTypeManaged


def synchronize(device: int | None = None) -> None:
    """Waits for every stream of `device` (default: the current device)."""
    cudart = _cudart()
    if device is None:
        _check(cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        return
    with on_device(device):
        _check(cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize")


_Stats = _abi.CudaStats  # aoti_host_cuda_stats, generated from toolchain/spec/c_api.toml


@dataclass(frozen=True)
class CudaStats:
    graph_captures: int
    graph_replays: int
    eager_runs: int
    graphs_disabled_reason: str
    weight_upload_bytes: int
    weight_stage_seconds: float
    weight_upload_seconds: float
    weight_load_seconds: float
    weight_upload_mode: str  # "host", "stage", "pageable" ("" for embedded weights)
    weight_upload_chunks: int
    weight_upload_chunk_bytes: int
    weight_upload_threads: int
    graph_input_copies: int  # inputs replays copied into graph-owned buffers (0: read in place)
    graph_output_copies: int  # outputs replays copied out of graph memory (0 with borrowed outputs)


def stats(library: Any, handle: ctypes.c_void_p) -> CudaStats:
    s = _Stats()
    library.check(library.lib.aoti_host_program_cuda_stats(handle, ctypes.byref(s)), "cuda_stats")
    return CudaStats(s.graph_captures, s.graph_replays, s.eager_runs, (s.graphs_disabled_reason or b"").decode(),
                     s.weight_upload_bytes, s.weight_stage_seconds, s.weight_upload_seconds,
                     s.weight_load_seconds, (s.weight_upload_mode or b"").decode(), s.weight_upload_chunks,
                     s.weight_upload_chunk_bytes, s.weight_upload_threads, s.graph_input_copies,
                     s.graph_output_copies)


class _Release:
    """Frees device memory (calls `fn`) when the last holder goes: the array, or a DLPack consumer's tensor."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __del__(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


class DeviceArray:
    """A strided array in device memory: one we allocated (`from_numpy`, `empty`) or a program output
    (owned tensor handle, freed with the array). DLPack consumers (`torch.from_dlpack`, cupy, JAX) take it
    without a copy (`__dlpack__`); the memory lives until the array and every such view are gone."""

    # the compiled path (runtime/python/fastrun.c) makes program outputs without __init__: by the class's
    # allocator, then ptr, shape, dtype, strides, device and _owner (a capsule freeing the tensor) set
    __slots__ = ("__weakref__", "_owner", "device", "dtype", "ptr", "shape", "strides")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...] | None = None,
                 device: int = 0, *, _free: Any = None) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.strides = tuple(strides) if strides is not None else _contiguous(self.shape)  # in elements
        self.device = device
        self._owner: Any = _Release(_free) if _free is not None else None

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any, device: int = 0) -> DeviceArray:
        cudart = _cudart()
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        with on_device(device):
            ptr = _check(cudart.cudaMalloc(nbytes), f"cudaMalloc on cuda:{device}")
        return cls(int(ptr), shape, np.dtype(dtype), None, device, _free=lambda: cudart.cudaFree(ptr))

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: int = 0) -> DeviceArray:
        a = np.ascontiguousarray(array)
        out = cls.empty(a.shape, a.dtype, device)
        cudart = _cudart()
        if a.nbytes:
            with on_device(device):
                _check(cudart.cudaMemcpy(out.ptr, a.ctypes.data, a.nbytes,
                                         cudart.cudaMemcpyKind.cudaMemcpyHostToDevice), "cudaMemcpy (host to device)")
        return out

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def _span(self) -> int:
        if any(s == 0 for s in self.shape):
            return 0
        return (1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))) * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """A host copy (synchronous; waits for the work queued before it on the legacy stream of the array's
        device, which a program's stream there orders with)."""
        cudart = _cudart()
        span = self._span()
        flat = np.empty(max(1, span // self.dtype.itemsize), self.dtype)
        if span:
            with on_device(self.device):
                _check(cudart.cudaMemcpy(flat.ctypes.data, self.ptr, span,
                                         cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)")
        if span == 0:
            return np.empty(self.shape, self.dtype)
        view = np.lib.stride_tricks.as_strided(flat, self.shape, [s * self.dtype.itemsize for s in self.strides])
        return np.array(view, copy=True)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": tuple(s * self.dtype.itemsize for s in self.strides), "stream": None}

    def __dlpack__(self, *, stream: int | None = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """A DLPack capsule viewing this memory (no copy). The data is ready for work on the legacy default
        stream (stream None or 1: a program's stream orders with it); for any other consumer stream the device
        is synchronised first."""
        if copy:
            msg = "DeviceArray.__dlpack__(copy=True): copy with the consumer instead (it views without a copy)"
            raise BufferError(msg)
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            msg = f"DeviceArray.__dlpack__: the array is on {self.__dlpack_device__()}, asked for {dl_device}"
            raise BufferError(msg)
        if self.ptr == 0:
            msg = "DeviceArray.__dlpack__: the array was freed"
            raise BufferError(msg)
        fast = sys.modules.get("_aoti_fastrun")
        if fast is None:
            msg = "DeviceArray.__dlpack__ needs the runtime's compiled module (_aoti_fastrun); use __cuda_array_interface__"
            raise BufferError(msg)
        if stream not in (None, 1):
            synchronize(self.device)
        # the consumer holds what frees the memory (or, for memory the array does not own, the array)
        owner = self._owner if self._owner is not None else self
        return fast.to_dlpack(owner, self.ptr, self.shape, self.strides, self.dtype, 2, self.device)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)  # kDLCUDA

    def free(self) -> None:
        """Drop this array's hold on the memory: freed now unless a DLPack view of it still lives."""
        self._owner = None
        self.ptr = 0

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return tuple(reversed(out))


def device_view(obj: Any, index: int) -> tuple[int, np.dtype, tuple[int, ...], tuple[int, ...], int]:
    """(pointer, dtype, shape, element strides, device index) of an object with __cuda_array_interface__.

    A DeviceArray gives its own dtype: the interface's typestr of an ml_dtypes bfloat16 is plain void ('<V2')."""
    cai = obj.__cuda_array_interface__
    dtype = obj.dtype if isinstance(obj, DeviceArray) else np.dtype(cai["typestr"])
    shape = tuple(int(s) for s in cai["shape"])
    if cai.get("strides") is None:
        strides = _contiguous(shape)
    else:
        byte_strides = cai["strides"]
        if any(s % dtype.itemsize for s in byte_strides):
            msg = f"input {index}: device strides {byte_strides} are not multiples of the {dtype.itemsize}-byte element"
            raise InputError(msg)
        strides = tuple(s // dtype.itemsize for s in byte_strides)
    ptr = int(cai["data"][0])
    if isinstance(obj, DeviceArray):
        return ptr, dtype, shape, strides, obj.device
    # the interface does not say which device: the driver does (cupy's .device is an object with .id, torch's
    # has .index, numba's arrays have none); the object's own attribute where the driver can't be asked
    device = pointer_device(ptr)
    if device is None:
        attr = getattr(obj, "device", 0)
        device = attr if isinstance(attr, int) else int(getattr(attr, "index", None) or getattr(attr, "id", 0) or 0)
    return ptr, dtype, shape, strides, device


def wrap_output(library: Any, handle: int) -> DeviceArray:
    """A program's device output as a DeviceArray that frees the tensor handle with it."""
    lib = library.lib
    dev = ctypes.c_int32()
    try:
        data, dtype, shape, st = library.tensor_meta(handle)
        library.check(lib.aoti_torch_get_device_index(handle, ctypes.byref(dev)), "reading an output tensor")
    except Exception:
        lib.aoti_torch_delete_tensor_object(handle)
        raise
    h = ctypes.c_void_p(handle)
    return DeviceArray(data, shape, dtype, st, dev.value, _free=lambda: lib.aoti_torch_delete_tensor_object(h))


def to_torch(array: DeviceArray) -> Any:
    """A torch CUDA tensor with `array`'s contents and layout: a view of the same memory through DLPack (no
    copy; the memory lives as long as the tensor) when the compiled module is there, else a device-to-device
    copy into torch's allocator, finished before it returns (`array` is freed). bfloat16 (ml_dtypes) becomes
    torch.bfloat16."""
    import torch

    if "_aoti_fastrun" in sys.modules and array.dtype.name in _DLPACK_NAMES:
        out = torch.from_dlpack(array)
        array.free()  # the tensor holds the memory now
        return out
    cudart = _cudart()
    out = torch.empty_strided(array.shape, array.strides, dtype=getattr(torch, array.dtype.name),
                              device=f"cuda:{array.device}")
    span = array._span()
    if span:
        with on_device(array.device):
            _check(cudart.cudaMemcpy(out.data_ptr(), array.ptr, span,
                                     cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice), "cudaMemcpy (device to device)")
        synchronize(array.device)
    array.free()
    return out
