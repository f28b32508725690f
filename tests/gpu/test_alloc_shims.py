"""The allocation shims of CUDA plugins on the GPU, through the C ABI as plugins call them.

aoti_torch_empty_strided_pinned (torch >= 2.14's staging pool under AOTI_COPY_USE_PINNED_ASYNC: two 1-d uint8 CPU
tensors it copies constants through): the memory is page-locked host memory CUDA knows (cudaPointerGetAttributes
says so), an asynchronous copy from it to the device arrives intact, deleting the last handle frees it (CUDA no
longer knows the address), and a device tensor is refused by name.

aoti_torch_cuda_caching_allocator_raw_alloc / _raw_delete (the constants blob of a plugin built with
AOT_INDUCTOR_WEIGHT_USE_CACHING_ALLOCATOR=1): device memory of the current device, usable from another stream at
once, freed by raw_delete; a pointer it never returned is refused.

Needs the GPU machine (AOTI_HOST_LIBRARY: the CUDA build) and cuda-python; skips elsewhere."""

from __future__ import annotations

import ctypes
import os

import pytest

from tests.gpu import gpu_skip_reason

pytestmark = pytest.mark.gpu

_REASON = gpu_skip_reason("AOTI_HOST_LIBRARY")
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

from cuda.bindings import runtime as cudart  # noqa: E402  (after the skip: cuda-python may be missing elsewhere)

H = ctypes.c_void_p
I64 = ctypes.c_int64
I64P = ctypes.POINTER(I64)
UINT8, FLOAT32, CPU, CUDA = 0, 6, 0, 1


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(os.environ["AOTI_HOST_LIBRARY"], mode=ctypes.RTLD_GLOBAL)
    lib.aoti_torch_empty_strided_pinned.argtypes = [I64, I64P, I64P, ctypes.c_int32, ctypes.c_int32,
                                                    ctypes.c_int32, ctypes.POINTER(H)]
    lib.aoti_torch_get_data_ptr.argtypes = [H, ctypes.POINTER(H)]
    lib.aoti_torch_get_device_type.argtypes = [H, ctypes.POINTER(ctypes.c_int32)]
    lib.aoti_torch_new_tensor_handle.argtypes = [H, ctypes.POINTER(H)]
    lib.aoti_torch_delete_tensor_object.argtypes = [H]
    lib.aoti_torch_cuda_caching_allocator_raw_alloc.argtypes = [ctypes.c_uint64, ctypes.POINTER(H)]
    lib.aoti_torch_cuda_caching_allocator_raw_delete.argtypes = [H]
    lib.aoti_host_last_error.restype = ctypes.c_char_p
    return lib


def pinned(lib, sizes, strides, dtype=UINT8, device_type=CPU) -> tuple[int, str]:
    """(handle, "") or (0, the last error) from aoti_torch_empty_strided_pinned."""
    n = len(sizes)
    h = H()
    rc = lib.aoti_torch_empty_strided_pinned(n, (I64 * max(n, 1))(*sizes), (I64 * max(n, 1))(*strides), dtype,
                                             device_type, 0, ctypes.byref(h))
    return (h.value or 0, "") if rc == 0 else (0, (lib.aoti_host_last_error() or b"").decode())


def data_ptr(lib, h: int) -> int:
    p = H()
    assert lib.aoti_torch_get_data_ptr(h, ctypes.byref(p)) == 0
    return p.value or 0


def memory_type(ptr: int):
    err, attrs = cudart.cudaPointerGetAttributes(ptr)
    assert err == cudart.cudaError_t.cudaSuccess, err
    return attrs.type


def check(ret) -> None:
    """A cuda-python call's result: a tuple starting with the error code, or the code alone."""
    err = ret[0] if isinstance(ret, tuple) else ret
    assert err == cudart.cudaError_t.cudaSuccess, err


def test_staging_buffer_is_pinned_host_memory_and_copies_to_the_device_asynchronously(lib):
    nbytes = 64 * 1024 * 1024  # the plugin's default staging buffer
    h, why = pinned(lib, [nbytes], [1])
    assert h, why
    dev_type = ctypes.c_int32(-1)
    assert lib.aoti_torch_get_device_type(h, ctypes.byref(dev_type)) == 0 and dev_type.value == CPU
    host = data_ptr(lib, h)
    assert host and memory_type(host) == cudart.cudaMemoryType.cudaMemoryTypeHost
    pattern = bytes(range(256)) * (nbytes // 256)
    ctypes.memmove(host, pattern, nbytes)
    err, dev = cudart.cudaMalloc(nbytes)
    check(err)
    err, stream = cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking)
    check(err)
    try:
        check(cudart.cudaMemcpyAsync(dev, host, nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, stream))
        check(cudart.cudaStreamSynchronize(stream))
        back = (ctypes.c_uint8 * nbytes)()
        check(cudart.cudaMemcpy(ctypes.addressof(back), dev, nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        assert bytes(back) == pattern
    finally:
        cudart.cudaStreamDestroy(stream)
        cudart.cudaFree(dev)
    assert lib.aoti_torch_delete_tensor_object(h) == 0


def test_memory_is_freed_with_the_last_handle(lib):
    h, why = pinned(lib, [4, 8], [8, 1], FLOAT32)
    assert h, why
    host = data_ptr(lib, h)
    alias = H()
    assert lib.aoti_torch_new_tensor_handle(h, ctypes.byref(alias)) == 0
    assert lib.aoti_torch_delete_tensor_object(h) == 0
    assert memory_type(host) == cudart.cudaMemoryType.cudaMemoryTypeHost  # the alias still holds it
    assert lib.aoti_torch_delete_tensor_object(alias.value) == 0
    assert memory_type(host) == cudart.cudaMemoryType.cudaMemoryTypeUnregistered


def test_empty_tensor_and_bad_arguments(lib):
    h, why = pinned(lib, [0], [1])
    assert h, why
    assert lib.aoti_torch_delete_tensor_object(h) == 0
    h, why = pinned(lib, [16], [1], UINT8, CUDA)
    assert not h and "aoti_torch_empty_strided_pinned" in why and "device_type must be cpu" in why, why
    h, why = pinned(lib, [-1], [1])
    assert not h and "negative size" in why, why


def test_raw_alloc_is_device_memory_usable_from_any_stream_and_raw_delete_frees_it(lib):
    nbytes = 3 * 1024 * 1024 + 5
    p = H()
    assert lib.aoti_torch_cuda_caching_allocator_raw_alloc(nbytes, ctypes.byref(p)) == 0, lib.aoti_host_last_error()
    dev = p.value
    assert dev and memory_type(dev) == cudart.cudaMemoryType.cudaMemoryTypeDevice
    err, current = cudart.cudaGetDevice()
    check(err)
    _, attrs = cudart.cudaPointerGetAttributes(dev)
    assert attrs.device == current
    pattern = bytes((i * 7) % 251 for i in range(nbytes))
    host = (ctypes.c_uint8 * nbytes).from_buffer_copy(pattern)
    check(cudart.cudaMemcpy(dev, ctypes.addressof(host), nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice))
    err, stream = cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking)
    check(err)
    back = (ctypes.c_uint8 * nbytes)()
    try:  # read on a non-blocking stream right after the legacy-stream copy, as a plugin's run reads its constants
        check(cudart.cudaMemcpyAsync(ctypes.addressof(back), dev, nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                     stream))
        check(cudart.cudaStreamSynchronize(stream))
    finally:
        cudart.cudaStreamDestroy(stream)
    assert bytes(back) == pattern
    assert lib.aoti_torch_cuda_caching_allocator_raw_delete(dev) == 0
    assert memory_type(dev) == cudart.cudaMemoryType.cudaMemoryTypeUnregistered


def test_raw_alloc_of_nothing_and_raw_delete_of_a_foreign_pointer(lib):
    p = H(1)
    assert lib.aoti_torch_cuda_caching_allocator_raw_alloc(0, ctypes.byref(p)) == 0 and not p.value
    assert lib.aoti_torch_cuda_caching_allocator_raw_delete(None) == 0
    host = (ctypes.c_uint8 * 64)()
    assert lib.aoti_torch_cuda_caching_allocator_raw_delete(ctypes.addressof(host)) != 0
    why = (lib.aoti_host_last_error() or b"").decode()
    assert "aoti_torch_cuda_caching_allocator_raw_delete" in why and "cudaFree failed" in why, why
