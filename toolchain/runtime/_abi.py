# GENERATED FILE: do not edit. Made by toolchain/codegen.py from templates/_abi.py.j2
# and the spec (toolchain/spec/c_api.toml, toolchain/spec/shims.toml).
# Refresh: python -m toolchain.codegen --abi-py (tests/unit/test_c_api_spec.py fails while it is stale).
"""The host runtime's C API (runtime/include/aoti_host/c_api.h) for ctypes: statuses, structs, prototypes."""

from __future__ import annotations

import ctypes
from typing import Any

# aoti_host_status
AOTI_HOST_OK = 0
AOTI_HOST_INVALID_ARGUMENT = 1
AOTI_HOST_NOT_FOUND = 2
AOTI_HOST_LOAD_FAILED = 3
AOTI_HOST_INVALID_PROGRAM = 4
AOTI_HOST_RUN_FAILED = 5
AOTI_HOST_NOT_SUPPORTED = 6
AOTI_HOST_INTERNAL = 7
STATUSES: dict[str, int] = {
    "AOTI_HOST_OK": 0,
    "AOTI_HOST_INVALID_ARGUMENT": 1,
    "AOTI_HOST_NOT_FOUND": 2,
    "AOTI_HOST_LOAD_FAILED": 3,
    "AOTI_HOST_INVALID_PROGRAM": 4,
    "AOTI_HOST_RUN_FAILED": 5,
    "AOTI_HOST_NOT_SUPPORTED": 6,
    "AOTI_HOST_INTERNAL": 7,
}

#: AOTI_HOST_API_VERSION: the version of the function table aoti_host_get_api() returns (c_api.toml [[table]]).
API_VERSION = 2


class TensorView(ctypes.Structure):
    """aoti_host_tensor_view"""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


class TensorSpec(ctypes.Structure):
    """aoti_host_tensor_spec"""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("min_sizes", ctypes.POINTER(ctypes.c_int64)),
        ("max_sizes", ctypes.POINTER(ctypes.c_int64)),
    ]


class LoadOptions(ctypes.Structure):
    """aoti_host_load_options"""

    _fields_ = [
        ("weights_path", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("num_models", ctypes.c_size_t),
        ("no_weight_sharing", ctypes.c_int32),
    ]


class CudaStats(ctypes.Structure):
    """aoti_host_cuda_stats"""

    _fields_ = [
        ("graph_captures", ctypes.c_uint64),
        ("graph_replays", ctypes.c_uint64),
        ("eager_runs", ctypes.c_uint64),
        ("graphs_disabled_reason", ctypes.c_char_p),
        ("weight_upload_bytes", ctypes.c_uint64),
        ("weight_stage_seconds", ctypes.c_double),
        ("weight_upload_seconds", ctypes.c_double),
        ("weight_load_seconds", ctypes.c_double),
        ("weight_upload_mode", ctypes.c_char_p),
        ("weight_upload_chunks", ctypes.c_uint64),
        ("weight_upload_chunk_bytes", ctypes.c_uint64),
        ("weight_upload_threads", ctypes.c_uint64),
        ("graph_input_copies", ctypes.c_uint64),
        ("graph_output_copies", ctypes.c_uint64),
    ]


class WeightStats(ctypes.Structure):
    """aoti_host_weight_stats"""

    _fields_ = [
        ("constants", ctypes.c_size_t),
        ("shared", ctypes.c_size_t),
        ("shared_bytes", ctypes.c_size_t),
        ("mismatched", ctypes.c_size_t),
        ("host_copy_bytes", ctypes.c_size_t),
        ("device_copy_bytes", ctypes.c_size_t),
        ("state_host_copy_bytes", ctypes.c_size_t),
        ("state_device_copy_bytes", ctypes.c_size_t),
    ]


#: C struct name -> its ctypes structure (tests compare their layout with the C compiler's).
STRUCTS: dict[str, type[ctypes.Structure]] = {
    "aoti_host_tensor_view": TensorView,
    "aoti_host_tensor_spec": TensorSpec,
    "aoti_host_load_options": LoadOptions,
    "aoti_host_cuda_stats": CudaStats,
    "aoti_host_weight_stats": WeightStats,
}

#: function -> (restype, argtypes): the C API's functions and the shims the Python runtime calls.
FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {
    "aoti_host_version": (ctypes.c_char_p, []),
    "aoti_host_last_error": (ctypes.c_char_p, []),
    "aoti_host_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "aoti_host_program_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(LoadOptions), ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_program_free": (None, [ctypes.c_void_p]),
    "aoti_host_program_num_inputs": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_num_outputs": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_has_contract": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_bool)]),
    "aoti_host_program_input_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(TensorSpec)]),
    "aoti_host_program_output_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(TensorSpec)]),
    "aoti_host_program_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(TensorView), ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]),
    "aoti_host_tensor_to_cpu": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_tensor_to_cuda": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_program_set_cuda_graphs": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_bool]),
    "aoti_host_program_set_borrowed_graph_outputs": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_bool]),
    "aoti_host_program_cuda_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(CudaStats)]),
    "aoti_host_program_synchronize": (ctypes.c_int, [ctypes.c_void_p]),
    "aoti_host_program_cuda_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_program_method_cuda_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_program_method_synchronize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "aoti_host_program_num_methods": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_method_name": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p)]),
    "aoti_host_program_find_method": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_method_num_inputs": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_method_num_outputs": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_run_method": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(TensorView), ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]),
    "aoti_host_program_weight_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(WeightStats)]),
    "aoti_host_session_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_session_clone": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_host_session_reset": (ctypes.c_int, [ctypes.c_void_p]),
    "aoti_host_session_free": (None, [ctypes.c_void_p]),
    "aoti_host_program_num_state_tensors": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    "aoti_host_program_set_strict": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_bool]),
    "aoti_host_program_set_input_layout": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
    "aoti_host_get_api": (ctypes.c_void_p, [ctypes.c_uint32]),
    "aoti_torch_get_data_ptr": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "aoti_torch_get_dtype": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]),
    "aoti_torch_get_dim": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    "aoti_torch_get_sizes": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]),
    "aoti_torch_get_strides": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]),
    "aoti_torch_get_device_type": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]),
    "aoti_torch_get_device_index": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]),
    "aoti_torch_delete_tensor_object": (ctypes.c_int32, [ctypes.c_void_p]),
}


def bind(lib: ctypes.CDLL) -> None:
    """Set restype and argtypes of every function in FUNCTIONS on `lib` (AttributeError if one is missing)."""
    for name, (restype, argtypes) in FUNCTIONS.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
