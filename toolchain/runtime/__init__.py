"""The bundled Python runtime: ctypes over the built host library (libaoti_host.so), numpy in and out.

    from toolchain import runtime
    prog = runtime.load("model.pt2")
    outputs = prog.run([x])          # numpy arrays in, numpy arrays out
    outputs = prog.run([t], output_type="torch")   # torch tensors (or any DLPack producer) in, torch out

bfloat16 is numpy's `ml_dtypes.bfloat16` (the JAX project's numpy dtypes): bf16 inputs may be torch tensors,
any DLPack producer, or numpy arrays of that dtype, and bf16 outputs come back as such arrays.

    prog = runtime.load("methods/")  # a directory or methods.json: one .pt2 per method, weights shared
    prog.run([x], method="embed")
    with prog.session() as s:        # its own copy of the model's mutable buffers
        s.run([x]); s.reset(); t = s.clone()

    gpu = runtime.load("model_cuda.pt2", device="cuda", cuda_graphs=True)
    outs = gpu.run([x_numpy_or_device_buffer], device_outputs=True)   # DeviceArray outputs

CUDA programs need the CUDA build of the library (scons cuda=on) and, for device buffers,
cuda-python; see toolchain/runtime/cuda.py. CPU programs need neither.

The library is opened RTLD_GLOBAL before any plugin: plugins bind their `aoti_torch_*` imports from
the global scope, and ctypes' default (RTLD_LOCAL) would hide them.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from toolchain import contract as _contract
from toolchain.errors import InputError, LoadError, RunError, error_for_status
from toolchain.hostlib import LIBRARY_ENV, REPO_ROOT, default_library
from toolchain.runtime import _abi, _dlpack
from toolchain.runtime.device import parse_device
from toolchain.spec import Dtype, load_abi

_Self = TypeVar("_Self", bound="_Owned")

ml_dtypes: Any
try:
    import ml_dtypes  # bfloat16 for numpy; a dependency, but float32 programs run without it
except ImportError:  # pragma: no cover - exercised only where ml_dtypes is absent
    ml_dtypes = None


def numpy_dtype(d: Dtype) -> np.dtype[Any] | None:
    """numpy's dtype for a spec dtype: kind V ("<V2") is the ml_dtypes type of that name (bfloat16), None
    when ml_dtypes is missing or numpy has no such dtype."""
    if not d.numpy:
        return None
    if d.numpy_kind == "V":
        return np.dtype(getattr(ml_dtypes, d.name)) if ml_dtypes is not None else None
    return np.dtype(d.numpy)


# torch ScalarType codes <-> numpy dtypes (toolchain/spec/abi.toml: the runtime's dtypes that numpy has)
_TO_CODE: dict[np.dtype[Any], int] = {}
for _d in load_abi().dtypes:
    _dt = numpy_dtype(_d) if _d.runtime else None
    if _dt is not None:
        _TO_CODE[_dt] = _d.code
_FROM_CODE: dict[int, np.dtype[Any]] = {v: k for k, v in _TO_CODE.items()}
OUTPUT_TYPES = ("numpy", "torch")


def _missing_dtype(code: int) -> str:
    d = load_abi().dtypes[code] if 0 <= code < len(load_abi().dtypes) else None
    if d is not None and d.numpy_kind == "V":
        return f"{d.name} needs ml_dtypes (pip install ml_dtypes) for numpy"
    return f"dtype code {code} ({d.name if d else 'unknown'}) has no numpy equivalent"


def to_torch(array: np.ndarray) -> Any:
    """A torch tensor sharing `array`'s memory and layout; an ml_dtypes bfloat16 array becomes torch.bfloat16."""
    import torch

    if ml_dtypes is not None and array.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(obj: Any) -> np.ndarray:
    """A numpy copy of a host array: a numpy array as it is, a torch tensor or any DLPack producer in host
    memory (bfloat16 as ml_dtypes.bfloat16). Layout kept."""
    if isinstance(obj, np.ndarray) or not _dlpack.is_producer(obj):
        return np.asarray(obj)
    v = _dlpack.view(obj, "array")
    if not v.on_host:
        msg = f"array: in device memory (DLPack device type {v.device_type}); copy it to the host first"
        raise InputError(msg, fix="tensor.cpu()")
    dtype = _FROM_CODE.get(v.code)
    if dtype is None:
        raise InputError(f"array: {_missing_dtype(v.code)}", fix="pip install ml_dtypes")
    return _host_copy(v.ptr, dtype, v.shape, v.strides)


def _host_copy(data: int, dtype: np.dtype, shape: tuple[int, ...], elem_strides: tuple[int, ...]) -> np.ndarray:
    """A numpy copy of the strided host memory at `data` (its layout preserved)."""
    if any(s == 0 for s in shape):
        return np.empty(shape, dtype)
    # span of memory the view touches, then a strided view of it, copied (layout preserved)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, elem_strides, strict=True))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, elem_strides, strict=True))
    count = hi - lo + 1
    buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(data + lo * dtype.itemsize)
    flat = np.frombuffer(memoryview(buf), dtype=dtype, count=count)
    view = np.lib.stride_tricks.as_strided(flat[-lo:], shape, [s * dtype.itemsize for s in elem_strides])
    return np.array(view, order="K", copy=True)

# The C API's structs, generated from toolchain/spec/c_api.toml (_abi.py)
_View = _abi.TensorView
_Spec = _abi.TensorSpec
_Options = _abi.LoadOptions
_WeightStats = _abi.WeightStats


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None  # None marks a dynamic dimension


class Library:
    """The loaded host runtime library with typed entry points."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_library()
        if not self.path.exists():
            msg = f"{self.path}: the host runtime library is not built"
            raise LoadError(msg, fix=f"run `scons` in {REPO_ROOT}, or set {LIBRARY_ENV}=/path/to/libaoti_host.so")
        try:
            lib = ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        except OSError as exc:
            msg = f"{self.path}: cannot load the host runtime library: {exc}"
            raise LoadError(msg) from exc
        self.lib = lib
        _abi.bind(lib)  # every C API function and the shims read here, typed from the spec
        self.fast = _bind_fast_path(self)  # the compiled per-call module, or None
        self.fast_run = self.fast.run if self.fast is not None else None
        self._fast_cuda = False  # bind_cuda done

    @property
    def version(self) -> str:
        return self.lib.aoti_host_version().decode()

    def fast_cuda(self) -> Any:
        """The compiled module with its CUDA side bound (device inputs and DeviceArray outputs), or None."""
        if self.fast is None:
            return None
        if not self._fast_cuda:
            from toolchain.runtime import cuda as _cuda

            self.fast.bind_cuda(_cuda.CUDA_DEVICE_TYPE, _cuda.DeviceArray)
            self._fast_cuda = True
        return self.fast

    def check(self, status: int, what: str) -> None:
        if status != 0:
            msg = self.lib.aoti_host_last_error().decode(errors="replace")
            raise error_for_status(status)(msg or f"{what} failed with status {status}")

    def tensor_meta(self, handle: int) -> tuple[int, np.dtype, tuple[int, ...], tuple[int, ...]]:
        """(data pointer, numpy dtype, shape, element strides) of a tensor handle; RunError for a dtype
        numpy has no equivalent of (the handle is not freed here)."""
        lib = self.lib
        data, code, ndim = ctypes.c_void_p(), ctypes.c_int32(), ctypes.c_int64()
        sizes, strides = ctypes.POINTER(ctypes.c_int64)(), ctypes.POINTER(ctypes.c_int64)()
        for rc in (lib.aoti_torch_get_data_ptr(handle, ctypes.byref(data)),
                   lib.aoti_torch_get_dtype(handle, ctypes.byref(code)),
                   lib.aoti_torch_get_dim(handle, ctypes.byref(ndim)),
                   lib.aoti_torch_get_sizes(handle, ctypes.byref(sizes)),
                   lib.aoti_torch_get_strides(handle, ctypes.byref(strides))):
            self.check(rc, "reading an output tensor")
        dtype = _FROM_CODE.get(code.value)
        if dtype is None:
            msg = f"output: {_missing_dtype(code.value)}"
            raise RunError(msg)
        return (data.value or 0, dtype, tuple(sizes[i] for i in range(ndim.value)),
                tuple(strides[i] for i in range(ndim.value)))

    def take_output(self, handle: int) -> np.ndarray:
        """A numpy array viewing an output tensor without a copy (its own layout kept); the array owns the
        handle, freed when the last view of it goes. A device output: its host copy."""
        lib = self.lib
        device_type = ctypes.c_int32()
        self.check(lib.aoti_torch_get_device_type(handle, ctypes.byref(device_type)), "reading an output tensor")
        if device_type.value != 0:  # a device output: its host copy, then free both
            host = ctypes.c_void_p()
            try:
                self.check(lib.aoti_host_tensor_to_cpu(handle, ctypes.byref(host)), "copying an output to the host")
            finally:
                lib.aoti_torch_delete_tensor_object(handle)
            return self.take_output(host.value or 0)
        try:
            data, dtype, shape, elem_strides = self.tensor_meta(handle)
        except BaseException:
            lib.aoti_torch_delete_tensor_object(handle)
            raise
        return _output_array(_HandleOwner(lib.aoti_torch_delete_tensor_object, handle), data, dtype, shape,
                             elem_strides)


class _HandleOwner:
    """An output tensor handle, freed when the last numpy array viewing it (its base) goes."""

    __slots__ = ("__array_interface__", "_free", "_handle")
    __array_interface__: dict[str, Any]

    def __init__(self, free: Any, handle: int) -> None:
        self._free, self._handle = free, handle

    def __del__(self) -> None:
        self._free(self._handle)


def _output_array(owner: _HandleOwner, data: int, dtype: np.dtype, shape: tuple[int, ...],
                  elem_strides: tuple[int, ...]) -> np.ndarray:
    """numpy's view of an output's memory, owned by `owner` (ctypes path; the C path does the same)."""
    owner.__array_interface__ = {"version": 3, "data": (data, False), "typestr": dtype.str, "shape": shape,
                                 "strides": tuple(s * dtype.itemsize for s in elem_strides)}
    arr = np.asarray(owner)
    return arr if arr.dtype == dtype else arr.view(dtype)  # ml_dtypes' bfloat16 exports as "<V2"


_FAST_MODULE = "_aoti_fastrun"
_fast_bound_to: Path | None = None


def _bind_fast_path(library: Library) -> Any:
    """The compiled per-call path (runtime/python/fastrun.c) built with `library`, bound to its C API function
    table; None when it is not built (or cannot be imported here), when AOTI_HOST_PYTHON_FAST=0, or when the
    process already bound it to another library (it holds one table). LoadError when the library is older than
    the module (its table lacks the version the module was built for): a stale build."""
    global _fast_bound_to
    if os.environ.get("AOTI_HOST_PYTHON_FAST", "1") == "0":
        return None
    if _fast_bound_to is not None:
        return sys.modules[_FAST_MODULE] if _fast_bound_to == library.path.resolve() else None
    import importlib.machinery
    import importlib.util

    from toolchain import hostlib

    name = f"{_FAST_MODULE}.abi3.so"  # the stable ABI: one build for every CPython >= 3.10
    # next to the library; in a build's python/ beside its dist/ (build/<variant>/{dist/lib,python}); or, for
    # the installed wheels' own runtime (built with it, so of the same C API), in this package
    lib_dir = library.path.resolve().parent
    places = [lib_dir / name, lib_dir.parent.parent / "python" / name]
    if any(lib_dir.parent == t.resolve() for t in hostlib.installed_trees()):
        places.append(Path(__file__).resolve().parent / name)
    path = next((p for p in places if p.is_file()), None)
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location(_FAST_MODULE, path,
                                                  loader=importlib.machinery.ExtensionFileLoader(_FAST_MODULE,
                                                                                                 str(path)))
    if spec is None or spec.loader is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:  # built for another numpy or Python: the ctypes path serves
        return None
    table = library.lib.aoti_host_get_api(module.API_VERSION)
    if not table:
        msg = f"{library.path}: {library.lib.aoti_host_last_error().decode(errors='replace')} (the Python module {path})"
        raise LoadError(msg, fix="rebuild the runtime and its Python module together (scons), or set "
                                 "AOTI_HOST_PYTHON_FAST=0 to run through ctypes alone")
    module.bind(table, {code: dt for code, dt in _FROM_CODE.items()},
                {key: _dlpack._abi_dtype(name).code for key, name in _dlpack._DTYPES.items()})
    sys.modules[_FAST_MODULE] = module
    _fast_bound_to = library.path.resolve()
    return module


class _Owned:
    """A native handle freed by close(): explicitly, at the end of a with-block, or when collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Program(_Owned):
    """A plugin loaded in the host runtime. Use `load()`."""

    def __init__(self, library: Library, handle: int, path: Path, device: str = "cpu") -> None:
        self._lib = library
        self._handle = ctypes.c_void_p(handle)
        self.path = path
        self.device = device
        n = ctypes.c_size_t()
        library.check(library.lib.aoti_host_program_num_inputs(self._handle, ctypes.byref(n)), "num_inputs")
        self.num_inputs = n.value
        library.check(library.lib.aoti_host_program_num_outputs(self._handle, ctypes.byref(n)), "num_outputs")
        self.num_outputs = n.value
        flag = ctypes.c_bool()
        library.check(library.lib.aoti_host_program_has_contract(self._handle, ctypes.byref(flag)), "has_contract")
        self.has_contract = flag.value
        self.inputs = tuple(self._spec("input", i) for i in range(self.num_inputs))
        self.outputs = tuple(self._spec("output", i) for i in range(self.num_outputs))
        library.check(library.lib.aoti_host_program_num_methods(self._handle, ctypes.byref(n)), "num_methods")
        names = []
        for i in range(n.value):
            name = ctypes.c_char_p()
            library.check(library.lib.aoti_host_program_method_name(self._handle, i, ctypes.byref(name)), "method")
            names.append((name.value or b"").decode())
        self.methods = tuple(names)
        # the compiled per-call path: CPU programs, and CUDA programs asked for device outputs (host outputs of a
        # CUDA program are copies the ctypes path makes)
        self._on_cuda = device != "cpu"
        fast_module = library.fast_cuda() if self._on_cuda else library.fast
        self._fast = fast_module.run if fast_module is not None else None
        self._fast_sync = fast_module.synchronize if self._on_cuda and fast_module is not None else None
        self._arity: dict[int, tuple[int, int]] = {}
        for i in range(len(names)):
            a, b = ctypes.c_size_t(), ctypes.c_size_t()
            library.check(library.lib.aoti_host_program_method_num_inputs(self._handle, i, ctypes.byref(a)), "inputs")
            library.check(library.lib.aoti_host_program_method_num_outputs(self._handle, i, ctypes.byref(b)), "outputs")
            self._arity[i] = (a.value, b.value)
        # The common call, run(inputs) of the first method in the program's own state with the outputs the
        # compiled path gives, read as one tuple per call: (compiled run, handle, inputs, outputs); the same for
        # synchronize(). close() clears both before it frees the handle.
        self._plain = (self._fast, handle, *self._arity[0]) if self._fast is not None and self._arity else None
        self._plain_sync = (self._fast_sync, handle) if self._fast_sync is not None else None
        self._contracts: dict[int, dict[str, Any] | None] = {}

    def contract(self, method: str | None = None) -> dict[str, Any] | None:
        """The contract `method`'s package records (docs/package-json.md): its size symbols, inputs, outputs and
        output tree, as read from the file; None for a plugin without one (a bare .so)."""
        index = self._method_index(method)
        if index not in self._contracts:
            name = self.methods[index] if index < len(self.methods) else ""
            self._contracts[index] = _contract.read_contract(_contract.method_package(self.path, name))
        return self._contracts[index]

    def _method_index(self, method: str | None) -> int:
        if method is None:
            return 0
        if method not in self.methods:
            msg = f"{self.path}: no method {method!r}; it has {', '.join(self.methods)}"
            raise InputError(msg)
        return self.methods.index(method)

    def weight_stats(self) -> dict[str, int]:
        """How many constants the methods share (loaded once) and the bytes that saves."""
        st = _WeightStats()
        self._lib.check(self._lib.lib.aoti_host_program_weight_stats(self._live(), ctypes.byref(st)), "weight_stats")
        return {f[0]: getattr(st, f[0]) for f in _WeightStats._fields_}

    @property
    def num_state_tensors(self) -> int:
        n = ctypes.c_size_t()
        self._lib.check(self._lib.lib.aoti_host_program_num_state_tensors(self._live(), ctypes.byref(n)), "state")
        return n.value

    def session(self) -> Session:
        """A session: its own copy of the model's mutable buffers, starting from the state as loaded."""
        out = ctypes.c_void_p()
        self._lib.check(self._lib.lib.aoti_host_session_create(self._live(), ctypes.byref(out)), "session")
        return Session(self, out.value or 0)

    def _live(self) -> ctypes.c_void_p:
        if self._handle.value is None:
            msg = f"{self.path}: program is closed"
            raise RunError(msg)
        return self._handle

    def _spec(self, kind: str, i: int) -> TensorSpec:
        s = _Spec()
        fn = getattr(self._lib.lib, f"aoti_host_program_{kind}_spec")
        self._lib.check(fn(self._handle, i, ctypes.byref(s)), f"{kind}_spec")
        name = (s.name or b"").decode()
        if s.ndim < 0:
            return TensorSpec(name, None, None)
        shape = tuple(None if s.sizes[d] < 0 else s.sizes[d] for d in range(s.ndim))
        return TensorSpec(name, _FROM_CODE.get(s.dtype), shape)

    def set_strict(self, strict: bool = True) -> None:
        """Refuse inputs whose layout differs from the plugin's instead of converting them."""
        self._lib.check(self._lib.lib.aoti_host_program_set_strict(self._live(), bool(strict)), "set_strict")

    def set_input_layout(self, index: int, strides: Sequence[int], *, method: str | None = None) -> None:
        """The layout the plugin of `method` expects for input `index` (strides; only their order matters).

        For a package without a contract (exported elsewhere); see `layout_strides` for named layouts."""
        arr = (ctypes.c_int64 * max(1, len(strides)))(*strides)
        rc = self._lib.lib.aoti_host_program_set_input_layout(self._live(), self._method_index(method), index, arr,
                                                              len(strides))
        self._lib.check(rc, "set_input_layout")

    def run(self, inputs: Sequence[Any], *, method: str | None = None, session: Session | None = None,
            device_outputs: bool = False, output_type: str = "numpy", structured: bool = False) -> Any:
        """Run `method` (default: the first, "forward" when present) in `session` (default: the program's state).

        Inputs: numpy arrays (bfloat16 as ml_dtypes.bfloat16), torch tensors or any DLPack producer (`__dlpack__`:
        JAX, cupy, ...), used without a copy; for a CUDA program also device buffers (such producers in device
        memory, or anything with `__cuda_array_interface__`, such as `cuda.DeviceArray`).
        Returns numpy arrays (bfloat16 as ml_dtypes.bfloat16), or torch tensors with output_type="torch"; with
        device_outputs=True a CUDA program returns `cuda.DeviceArray`s (torch CUDA tensors with "torch").

        Outputs are views of the runtime's buffers (no copy): each array owns its tensor, which stays valid
        after the program is closed. The GIL is released during the run: Python threads run a program
        concurrently, up to `num_models` runs at once (load()); a stateful program runs one at a time.

        structured=True returns the outputs as the model returned them (dicts, tuples, lists, a lone tensor),
        from the output tree the package's contract records; the default is the flat list of leaves, in the
        order of `outputs` (whose names are the leaves' paths: logits, aux.0, ...)."""
        if structured:
            flat = self.run(inputs, method=method, session=session, device_outputs=device_outputs,
                            output_type=output_type)
            return _contract.structure(self.contract(method), flat)
        plain = self._plain
        if (plain is not None and method is None and session is None and output_type == "numpy"
                and device_outputs == self._on_cuda and len(inputs) == plain[2]):
            res = plain[0](plain[1], 0, None, inputs, plain[3], device_outputs)
            if res.__class__ is list:
                return res
            if res is not NotImplemented:
                self._lib.check(res, "run")
        return self._run_fast(inputs, method, session, device_outputs, output_type)

    def _run_fast(self, inputs: Sequence[Any], method: str | None, session: Session | None, device_outputs: bool,
                  output_type: str) -> list[Any]:
        """run()'s second tier: the C fast path with a method, a session or torch outputs; what it can't take
        (NotImplemented) goes through ctypes (`_run_ctypes`)."""
        fast = self._fast
        if fast is not None and device_outputs == self._on_cuda:
            index = 0 if method is None else self._method_index(method)
            handle_value = self._handle.value
            num_inputs, num_outputs = self._arity[index]
            if (handle_value is not None and len(inputs) == num_inputs and output_type in OUTPUT_TYPES
                    and (session is None or session._handle.value is not None)):
                res = fast(handle_value, index, None if session is None else session._handle.value, inputs,
                           num_outputs, device_outputs)
                if res.__class__ is list:
                    if output_type == "numpy":
                        return res
                    if device_outputs:
                        from toolchain.runtime import cuda as _cuda

                        return [_cuda.to_torch(a) for a in res]
                    return [to_torch(a) for a in res]
                if res is not NotImplemented:
                    self._lib.check(res, "run")
        return self._run_ctypes(inputs, method, session, device_outputs, output_type)

    def _run_ctypes(self, inputs: Sequence[Any], method: str | None, session: Session | None, device_outputs: bool,
                    output_type: str) -> list[Any]:
        """run()'s last tier, through ctypes: every check with its message, every kind of input."""
        handle = self._live()
        index = self._method_index(method)
        num_inputs, num_outputs = self._arity[index]
        if output_type not in OUTPUT_TYPES:
            msg = f"output_type={output_type!r}: use one of {', '.join(OUTPUT_TYPES)}"
            raise InputError(msg)
        if session is not None and session._handle.value is None:
            msg = f"{self.path}: the session is closed"
            raise RunError(msg)
        if len(inputs) != num_inputs:
            label = f" {self.methods[index]}" if len(self.methods) > 1 else ""
            msg = f"{self.path}: the model{label} takes {num_inputs} input(s), got {len(inputs)}"
            raise InputError(msg)
        views = (_View * max(1, len(inputs)))()
        keep: list[Any] = []  # what the views point into, alive until the run returns
        on_cuda = self.device.startswith("cuda")
        if device_outputs and not on_cuda:
            msg = f"{self.path}: device_outputs=True needs a program loaded with device='cuda'"
            raise InputError(msg)
        for i, arr in enumerate(inputs):
            views[i] = self._input_view(arr, i, on_cuda, keep)
        outs = (ctypes.c_void_p * max(1, num_outputs))()
        rc = self._lib.lib.aoti_host_program_run_method(handle, index, session._handle if session else None, views,
                                                        len(inputs), outs, num_outputs)
        self._lib.check(rc, "run")
        handles = [int(outs[k] or 0) for k in range(num_outputs)]
        if device_outputs:
            from toolchain.runtime import cuda as _cuda

            wrapped = [_cuda.wrap_output(self._lib, h) for h in handles]
            return [_cuda.to_torch(w) for w in wrapped] if output_type == "torch" else wrapped
        host = [self._lib.take_output(h) for h in handles]
        return [to_torch(a) for a in host] if output_type == "torch" else host

    def _input_view(self, arr: Any, i: int, on_cuda: bool, keep: list[Any]) -> Any:
        """The TensorView of input `i`: a DLPack producer, a device buffer (`__cuda_array_interface__`) or
        anything numpy takes; what it points into is appended to `keep`."""
        if not isinstance(arr, np.ndarray) and _dlpack.is_producer(arr):
            return self._dlpack_view(arr, i, on_cuda, keep)
        if hasattr(arr, "__cuda_array_interface__"):
            if not on_cuda:
                msg = f"input {i}: a device buffer, but {self.path} was loaded on the CPU; load(..., device='cuda')"
                raise InputError(msg)
            from toolchain.runtime import cuda as _cuda

            ptr, dt, shape, st, dev = _cuda.device_view(arr, i)
            code = _TO_CODE.get(dt)
            if code is None:
                msg = f"input {i}: dtype {dt} is not supported"
                raise InputError(msg, fix="pass a torch tensor or another DLPack producer (bfloat16 included)")
            sizes = (ctypes.c_int64 * max(1, len(shape)))(*shape)
            strides = (ctypes.c_int64 * max(1, len(shape)))(*st)
            keep.append((arr, sizes, strides))
            return _View(ptr, code, len(shape), sizes, strides, _cuda.CUDA_DEVICE_TYPE, dev)
        a = np.asarray(arr)
        code = _TO_CODE.get(a.dtype)
        if code is None or not a.dtype.isnative:
            msg = (f"input {i}: dtype {a.dtype} is not supported (use float16/32/64, bfloat16 (ml_dtypes), "
                   "int8-64, uint8 or bool)")
            raise InputError(msg)
        if any(s % a.itemsize for s in a.strides):
            a = np.ascontiguousarray(a)
        sizes = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        strides = (ctypes.c_int64 * max(1, a.ndim))(*[s // a.itemsize for s in a.strides])
        keep.append((a, sizes, strides))
        return _View(a.ctypes.data, code, a.ndim, sizes, strides, 0, 0)

    def _dlpack_view(self, arr: Any, i: int, on_cuda: bool, keep: list[Any]) -> Any:
        """The TensorView of a DLPack producer (torch, JAX, cupy, ...): host memory for any program, device
        memory for a CUDA program (exported on the legacy default stream, which the program's stream orders
        with)."""
        dev_type, dev_id = _dlpack.device_of(arr)
        on_device = dev_type not in _dlpack._HOST_DEVICES
        if on_device and not (on_cuda and dev_type == _dlpack.KDL_CUDA):
            where = "the CPU" if not on_cuda else self.device
            msg = f"input {i}: in device memory (DLPack device type {dev_type}), but {self.path} was loaded on {where}"
            raise InputError(msg, fix="load(..., device='cuda') for CUDA tensors, or pass host memory (tensor.cpu())")
        if on_device:
            from toolchain.runtime import cuda as _cuda

            # exported with its own device current: the producer orders its stream of that device with the
            # legacy default stream there (torch refuses to export from another current device)
            with _cuda.on_device(dev_id, required=False):
                v = _dlpack.view(arr, f"input {i}", stream=1)
        else:
            v = _dlpack.view(arr, f"input {i}", stream=None)
        sizes = (ctypes.c_int64 * max(1, len(v.shape)))(*v.shape)
        strides = (ctypes.c_int64 * max(1, len(v.shape)))(*v.strides)
        keep.append((arr, v, sizes, strides))
        if on_device:
            from toolchain.runtime import cuda as _cuda

            return _View(v.ptr, v.code, len(v.shape), sizes, strides, _cuda.CUDA_DEVICE_TYPE, v.device_id)
        return _View(v.ptr, v.code, len(v.shape), sizes, strides, 0, 0)

    def synchronize(self) -> None:
        """Wait for this program's device work (a no-op on the CPU); the GIL is released while it waits."""
        plain = self._plain_sync
        if plain is not None:
            rc = plain[0](plain[1])
            if rc:
                self._lib.check(rc, "synchronize")
            return
        self._lib.check(self._lib.lib.aoti_host_program_synchronize(self._handle), "synchronize")

    def set_borrowed_graph_outputs(self, borrowed: bool = True) -> None:
        """CUDA graph replays hand out views of the graph's own output memory (no allocation, no copy) instead
        of copies: each output is valid until this program's next run. See `load(borrow_graph_outputs=...)`."""
        rc = self._lib.lib.aoti_host_program_set_borrowed_graph_outputs(self._live(), bool(borrowed))
        self._lib.check(rc, "set_borrowed_graph_outputs")

    def cuda_stats(self) -> Any:
        """Graph captures/replays, eager runs, why graphs are off, weight upload times (CUDA programs)."""
        from toolchain.runtime import cuda as _cuda

        return _cuda.stats(self._lib, self._handle)

    def close(self) -> None:
        self._plain = self._plain_sync = None
        if self._handle.value is not None:
            self._lib.lib.aoti_host_program_free(self._handle)
            self._handle = ctypes.c_void_p()


LAYOUTS = ("contiguous", "channels_last", "channels_last_3d")


def split_input_arg(text: str) -> tuple[str, str | None]:
    """`x.npy:channels_last` -> ("x.npy", "channels_last"); a suffix that isn't a layout stays in the path."""
    path, sep, tail = text.rpartition(":")
    if sep and (tail in LAYOUTS or tail.startswith("strides=")):
        return path, tail
    return text, None


def layout_strides(layout: str, shape: Sequence[int]) -> list[int]:
    """Element strides of `layout` (a name in LAYOUTS or `strides=S0,S1,...`) for an array of `shape`."""
    dims = [max(int(n), 1) for n in shape]
    if layout == "contiguous":
        out: list[int] = []
        acc = 1
        for n in reversed(dims):
            out.insert(0, acc)
            acc *= n
        return out
    if layout in ("channels_last", "channels_last_3d"):
        nd = 4 if layout == "channels_last" else 5
        if len(dims) != nd:
            msg = f"{layout} needs a {nd}-d array, got shape {list(shape)}"
            raise InputError(msg, fix="give the layout only to inputs of that rank")
        strides = [0] * nd
        strides[1] = 1
        acc = dims[1]
        for d in range(nd - 1, 1, -1):
            strides[d] = acc
            acc *= dims[d]
        strides[0] = acc
        return strides
    if layout.startswith("strides="):
        try:
            st = [int(v) for v in layout.removeprefix("strides=").split(",")]
        except ValueError:
            st = []
        if len(st) != len(dims) or any(v < 0 for v in st):
            msg = f"{layout}: expected {len(dims)} non-negative integers for an array of shape {list(shape)}"
            raise InputError(msg, fix="e.g. strides=48,1,12,3 (only their order matters)")
        return st
    msg = f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)} or strides=S0,S1,..."
    raise InputError(msg)


class Session(_Owned):
    """Mutable state of one conversation/stream: runs in it see only its own buffers. Use Program.session()."""

    def __init__(self, program: Program, handle: int) -> None:
        self.program = program  # keeps the library; the C session keeps the program's resources alive
        self._handle = ctypes.c_void_p(handle)

    def run(self, inputs: Sequence[Any], *, method: str | None = None, output_type: str = "numpy",
            structured: bool = False) -> Any:
        return self.program.run(inputs, method=method, session=self, output_type=output_type, structured=structured)

    def reset(self) -> None:
        """Back to the state as loaded."""
        self.program._lib.check(self.program._lib.lib.aoti_host_session_reset(self._live()), "session reset")

    def clone(self) -> Session:
        """A new session starting from this one's current state."""
        out = ctypes.c_void_p()
        self.program._lib.check(self.program._lib.lib.aoti_host_session_clone(self._live(), ctypes.byref(out)),
                                "session clone")
        return Session(self.program, out.value or 0)

    def _live(self) -> ctypes.c_void_p:
        if self._handle.value is None:
            msg = "the session is closed"
            raise RunError(msg)
        return self._handle

    def close(self) -> None:
        if self._handle.value is not None:
            self.program._lib.lib.aoti_host_session_free(self._handle)
            self._handle = ctypes.c_void_p()


_LIBRARIES: dict[Path, Library] = {}


def library(path: Path | None = None, device: str = "cpu") -> Library:
    resolved = (Path(path) if path is not None else default_library(device)).resolve()
    if resolved not in _LIBRARIES:
        _LIBRARIES[resolved] = Library(resolved)
    return _LIBRARIES[resolved]


def load(path: str | os.PathLike[str], *, weights: str | os.PathLike[str] | None = None,
         library_path: Path | None = None, share_weights: bool = True, device: str = "cpu",
         cuda_graphs: bool = False, strict: bool = False, num_models: int | None = None,
         borrow_graph_outputs: bool = False) -> Program:
    """Load a `.pt2` package or a plugin `.so` (with `weights` for a blob-mode plugin), or a program of several
    methods: a directory of `.pt2` (or its `methods.json`). `share_weights=False` keeps a copy per method.

    device: "cpu", "cuda" (cuda:0) or "cuda:N" (a CUDA plugin; needs the CUDA build of the library). Everything
    of the program (its weights, allocations, kernels, graph) lives on that device, whichever device the calling
    thread has current, and each call leaves the caller's current device as it was. A device this process does
    not see is refused with the count it sees (toolchain.runtime.device, the runtime's cuda::require_device).
    cuda_graphs: capture Run into a CUDA graph after warm-up and replay it (see `cuda_stats()`). A device input
    passed at the same address on every call is read in place; one that moves is copied in.
    borrow_graph_outputs: with cuda_graphs, replays return views of the graph's output memory (no allocation,
    no copy), valid until the program's next run: read them (or queue work on them) before running again,
    copy what must live longer. Default: outputs the caller owns (one device copy each).
    strict: refuse inputs in another layout than the plugin's instead of converting them.
    num_models: model instances in each method's AOTInductor container, i.e. how many runs of a stateless
    program proceed at once from different threads (each instance has its own activation buffers; the
    weights are shared). A run finding every instance busy waits for one. Default (None): 2 on the CPU, 1 on
    CUDA (one stream and graph per program)."""
    device = parse_device(device).name  # "cpu" or "cuda:N"
    if num_models is None:
        num_models = 2 if device == "cpu" else 1
    if isinstance(num_models, bool) or not isinstance(num_models, int) or num_models < 1:
        msg = f"num_models={num_models!r}: give a positive integer (model instances, concurrent runs)"
        raise InputError(msg)
    if cuda_graphs and device == "cpu":
        msg = "cuda_graphs=True needs device='cuda'"
        raise InputError(msg)
    if borrow_graph_outputs and not cuda_graphs:
        msg = "borrow_graph_outputs=True needs cuda_graphs=True (only graph replays have outputs to borrow)"
        raise InputError(msg)
    lib = library(library_path, device)
    opts = _Options(os.fsencode(weights) if weights is not None else None, device.encode(), num_models,
                    0 if share_weights else 1)
    handle = ctypes.c_void_p()
    lib.check(lib.lib.aoti_host_program_load(os.fsencode(path), ctypes.byref(opts), ctypes.byref(handle)), "load")
    program = Program(lib, handle.value or 0, Path(path), device)
    if cuda_graphs:
        lib.check(lib.lib.aoti_host_program_set_cuda_graphs(program._handle, True), "set_cuda_graphs")
    if borrow_graph_outputs:
        program.set_borrowed_graph_outputs(True)
    if strict:
        program.set_strict(True)
    return program
