/* _aoti_fastrun: the per-call path of the Python runtime (toolchain/runtime) in C. One run is one call
 * from Python: numpy inputs read in place (no copy), aoti_host_program_run_method called with the GIL
 * released (Python threads run programs concurrently), outputs handed to numpy without a copy: each array's
 * base is a capsule owning the runtime's tensor handle, freed by the capsule's destructor when the last
 * array viewing it goes.
 *
 * It links nothing of the runtime: toolchain/runtime passes the C API's function table (aoti_host_get_api(), asked
 * for the AOTI_HOST_API_VERSION this module was built with: API_VERSION) of the library it already opened through
 * ctypes (bind()), so one libaoti_host.so serves both paths. Anything this path does
 * not handle (dtypes numpy has no equivalent of, CUDA programs asked for host outputs) is left to the ctypes
 * path: run() returns NotImplemented before touching the program.
 *
 * Inputs are numpy arrays (read through numpy's C API) or DLPack producers in host memory (torch tensors, ...:
 * `__dlpack__()` exported, the DLTensor read, the capsule kept unconsumed until the run returns, so its own
 * destructor releases the producer's tensor). For a CUDA program with device outputs, also device memory:
 * the runtime's DeviceArray (its fields read directly) and DLPack producers on a CUDA device (exported for the
 * legacy default stream, stream=1, with which the program's blocking stream orders); its outputs become
 * DeviceArrays owning their tensor handle through a capsule (made here: the class's allocator, its slots set).
 * to_dlpack() exports such an array to DLPack consumers (torch.from_dlpack, cupy, JAX) without a copy.
 *
 * Built against CPython's limited API (the stable ABI of 3.10 and later, Py_LIMITED_API set by the build), so
 * one `_aoti_fastrun.abi3.so` serves every CPython the wheel is installed into. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aoti_host/c_api.h"

_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "numpy's dims are read as the runtime's int64 sizes");

typedef struct AtenTensorOpaque* Handle;

enum { kMaxCodes = 64, kStackTensors = 16, kMaxDims = 32 };

/* dlpack/dlpack.h (v1.0): the legacy DLManagedTensor ("dltensor"), which `__dlpack__()` without arguments
 * returns; only the leading DLTensor is read. */
typedef struct {
  void* data;
  struct { int32_t device_type, device_id; } device;
  int32_t ndim;
  struct { uint8_t code, bits; uint16_t lanes; } dtype;
  int64_t* shape;
  int64_t* strides; /* NULL: compact row-major */
  uint64_t byte_offset;
} DLTensor;

static struct {
  const aoti_host_api* api;        /* the runtime's function table (bind); NULL before */
  PyArray_Descr* descr[kMaxCodes]; /* torch ScalarType code -> numpy dtype (NULL: none) */
  int16_t dl_code[8][65];          /* [DLDataTypeCode][bits] -> torch ScalarType code (-1: none) */
  /* CUDA programs (bind_cuda) */
  PyObject* device_array; /* toolchain.runtime.cuda.DeviceArray (a class with __slots__) */
  PyObject* field[6];     /* its slot names, interned: ptr, shape, dtype, strides, device, _owner */
  int32_t cuda_device_type;
} g;

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };

static const char kCapsule[] = "aoti_host.tensor";

static void free_handle(PyObject* capsule) {
  Handle h = (Handle)PyCapsule_GetPointer(capsule, kCapsule);
  if (h != NULL && g.api != NULL) g.api->aoti_torch_delete_tensor_object(h);
}

/* bind(table, {code: numpy dtype}, {(DLDataTypeCode, bits): code}): table is the address aoti_host_get_api
 * returned for API_VERSION. */
static PyObject* bind(PyObject* self, PyObject* args) {
  (void)self;
  unsigned long long address;
  PyObject *dtypes, *dl;
  if (!PyArg_ParseTuple(args, "KO!O!", &address, &PyDict_Type, &dtypes, &PyDict_Type, &dl)) return NULL;
  const aoti_host_api* api = (const aoti_host_api*)(uintptr_t)address;
  if (api == NULL) return PyErr_Format(PyExc_ValueError, "bind: the function table is NULL");
  if (api->version < AOTI_HOST_API_VERSION || api->size < sizeof(aoti_host_api))
    return PyErr_Format(PyExc_ValueError,
                        "bind: the runtime's C API table is version %u (%u bytes); this module was built for version "
                        "%d (%zu bytes): rebuild the runtime and the module together (scons)",
                        (unsigned)api->version, (unsigned)api->size, AOTI_HOST_API_VERSION, sizeof(aoti_host_api));
  memset(g.dl_code, 0xff, sizeof g.dl_code);
  PyObject *dl_key, *dl_value;
  Py_ssize_t dl_pos = 0;
  while (PyDict_Next(dl, &dl_pos, &dl_key, &dl_value)) {
    int kind, bits, code;
    if (!PyArg_ParseTuple(dl_key, "ii", &kind, &bits)) return NULL;
    code = (int)PyLong_AsLong(dl_value);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (kind < 0 || kind >= 8 || bits < 0 || bits > 64 || code < 0 || code >= kMaxCodes)
      return PyErr_Format(PyExc_ValueError, "bind: bad DLPack dtype entry (%d, %d) -> %d", kind, bits, code);
    g.dl_code[kind][bits] = (int16_t)code;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dtypes, &pos, &key, &value)) {
    long code = PyLong_AsLong(key);
    if (code == -1 && PyErr_Occurred()) return NULL;
    PyArray_Descr* d = NULL;
    if (code < 0 || code >= kMaxCodes || !PyArray_DescrConverter(value, &d))
      return PyErr_Format(PyExc_ValueError, "bind: bad dtype entry for code %ld", code);
    PyArray_Descr* old = g.descr[code];
    g.descr[code] = d;
    Py_XDECREF(old);
  }
  g.api = api;
  Py_RETURN_NONE;
}

/* The runtime's dtype code of a numpy array, -1 when the table has none. */
static int code_of(PyArrayObject* a) {
  PyArray_Descr* d = PyArray_DESCR(a);
  if (!PyArray_ISNBO(d->byteorder)) return -1;
  for (int c = 0; c < kMaxCodes; ++c)
    if (g.descr[c] != NULL && g.descr[c]->type_num == d->type_num) return c;
  return -1;
}

static PyObject* int_tuple(const int64_t* v, int64_t n) {
  PyObject* t = PyTuple_New((Py_ssize_t)n);
  for (int64_t i = 0; t != NULL && i < n; ++i) {
    PyObject* x = PyLong_FromLongLong(v[i]);
    if (x == NULL) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SetItem(t, (Py_ssize_t)i, x); /* steals x */
  }
  return t;
}

/* A DeviceArray over device output `h` (no copy), owning h through a capsule (its _owner). Made as
 * object.__new__ makes it, by the class's allocator, and its slots set here: no Python frame per output (the
 * Python way cost ~0.7 us per output, as much as a tenth of a small model's replay). Steals capsule. */
static PyObject* wrap_device_output(PyObject* capsule, Handle h, void* data, int32_t code, int64_t ndim,
                                    const int64_t* sizes, const int64_t* strides) {
  int32_t index = 0;
  if (g.device_array == NULL || g.api->aoti_torch_get_device_index(h, &index)) {
    Py_DECREF(capsule);
    return PyErr_Format(PyExc_RuntimeError, "output: device outputs need bind_cuda() first");
  }
  PyObject* values[6] = {PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)data), int_tuple(sizes, ndim),
                         Py_NewRef((PyObject*)g.descr[code]), int_tuple(strides, ndim), PyLong_FromLong(index),
                         capsule};
  PyObject* out = NULL;
  bool made = true;
  for (int i = 0; i < 6; ++i) made = made && values[i] != NULL;
  if (made) {
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject*)g.device_array, Py_tp_alloc);
    out = alloc != NULL ? alloc((PyTypeObject*)g.device_array, 0) : NULL;
    for (int i = 0; out != NULL && i < 6; ++i) {
      if (PyObject_SetAttr(out, g.field[i], values[i]) != 0) Py_CLEAR(out);
    }
  }
  for (int i = 0; i < 6; ++i) Py_XDECREF(values[i]);
  return out;
}

/* A numpy array viewing output `h` without a copy (a DeviceArray for device memory); it owns h through its
 * base capsule. Steals h (freed on failure too). */
static PyObject* wrap_output(Handle h) {
  PyObject* capsule = PyCapsule_New(h, kCapsule, free_handle);
  const aoti_host_api* api = g.api;
  if (capsule == NULL) {
    api->aoti_torch_delete_tensor_object(h);
    return NULL;
  }
  void* data = NULL;
  int32_t code = -1, device = 0;
  int64_t ndim = 0;
  int64_t *sizes = NULL, *strides = NULL;
  if (api->aoti_torch_get_data_ptr(h, &data) || api->aoti_torch_get_dtype(h, &code) ||
      api->aoti_torch_get_device_type(h, &device) || api->aoti_torch_get_dim(h, &ndim) ||
      api->aoti_torch_get_sizes(h, &sizes) || api->aoti_torch_get_strides(h, &strides) || ndim < 0 ||
      ndim > kMaxDims) {
    Py_DECREF(capsule);
    return PyErr_Format(PyExc_RuntimeError, "output: cannot read the tensor's metadata");
  }
  if (device != 0 && device == g.cuda_device_type && code >= 0 && code < kMaxCodes && g.descr[code] != NULL)
    return wrap_device_output(capsule, h, data, code, ndim, sizes, strides);
  if (device != 0 || code < 0 || code >= kMaxCodes || g.descr[code] == NULL) {
    Py_DECREF(capsule);
    return PyErr_Format(PyExc_TypeError, "output: dtype code %d on device type %d has no numpy view here", code,
                        device);
  }
  PyArray_Descr* descr = g.descr[code];
  npy_intp byte_strides[kMaxDims];
  for (int64_t d = 0; d < ndim; ++d) byte_strides[d] = (npy_intp)strides[d] * (npy_intp)PyDataType_ELSIZE(descr);
  Py_INCREF(descr); /* PyArray_NewFromDescr steals a reference */
  PyObject* arr = PyArray_NewFromDescr(&PyArray_Type, descr, (int)ndim, (npy_intp*)sizes, byte_strides, data,
                                       NPY_ARRAY_WRITEABLE, NULL);
  if (arr == NULL) {
    Py_DECREF(capsule);
    return NULL;
  }
  if (PyArray_SetBaseObject((PyArrayObject*)arr, capsule) < 0) { /* steals capsule, even on failure */
    Py_DECREF(arr);
    return NULL;
  }
  return arr;
}

/* The view of a DLPack producer in host memory: 1, with *capsule holding its memory until the run returns;
 * 0 for what this path leaves to the ctypes one (no __dlpack__, device memory, a dtype or layout it does not
 * take); -1 with an exception set. */
static int dlpack_view(PyObject* obj, bool on_cuda, aoti_host_tensor_view* view, PyObject** capsule) {
  static PyObject *name = NULL, *device_name = NULL, *stream_kw = NULL;
  if (name == NULL && (name = PyUnicode_InternFromString("__dlpack__")) == NULL) return -1;
  if (device_name == NULL && (device_name = PyUnicode_InternFromString("__dlpack_device__")) == NULL) return -1;
  int dev_type = kDLCPU;
  if (on_cuda) { /* where it lives decides the stream argument: device memory is exported for stream 1 */
    PyObject* where = NULL;
    PyObject* fn = PyObject_GetAttr(obj, device_name);
    if (fn != NULL) {
      where = PyObject_CallNoArgs(fn);
      Py_DECREF(fn);
    }
    if (where == NULL) {
      PyErr_Clear();
      return 0;
    }
    int id = 0;
    const int ok = PyArg_ParseTuple(where, "ii", &dev_type, &id);
    Py_DECREF(where);
    if (!ok) {
      PyErr_Clear();
      return 0;
    }
  }
  PyObject* method = PyObject_GetAttr(obj, name);
  if (method == NULL) {
    PyErr_Clear();
    return 0;
  }
  PyObject* cap = NULL;
  if (dev_type == kDLCUDA) {
    if (stream_kw == NULL && (stream_kw = Py_BuildValue("{s:i}", "stream", 1)) == NULL) {
      Py_DECREF(method);
      return -1;
    }
    PyObject* empty = PyTuple_New(0);
    cap = empty == NULL ? NULL : PyObject_Call(method, empty, stream_kw);
    Py_XDECREF(empty);
  } else {
    cap = PyObject_CallNoArgs(method);
  }
  Py_DECREF(method);
  if (cap == NULL) { /* the ctypes path reports the producer's refusal with its own message */
    PyErr_Clear();
    return 0;
  }
  DLTensor* t = PyCapsule_IsValid(cap, "dltensor") ? (DLTensor*)PyCapsule_GetPointer(cap, "dltensor") : NULL;
  const bool host = t != NULL && (t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost);
  const bool device = t != NULL && on_cuda && t->device.device_type == kDLCUDA;
  if (t == NULL || !(host || device) || t->dtype.lanes != 1 ||
      t->dtype.code >= 8 || t->dtype.bits > 64 || t->ndim < 0 || t->ndim > kMaxDims) {
    Py_DECREF(cap);
    return 0;
  }
  const int code = g.dl_code[t->dtype.code][t->dtype.bits];
  const uint64_t item = t->dtype.bits / 8;
  if (code < 0 || item == 0 || t->byte_offset % item != 0) {
    Py_DECREF(cap);
    return 0;
  }
  *view = (aoti_host_tensor_view){(char*)t->data + t->byte_offset, code, t->ndim, t->shape, t->strides,
                                  device ? g.cuda_device_type : 0, device ? t->device.device_id : 0};
  *capsule = cap;
  return 1;
}

/* Reads `n` ints of a tuple into out (1), 0 when it is not a tuple of n ints (exception cleared). */
static int read_ints(PyObject* t, int64_t n, int64_t* out) {
  if (!PyTuple_Check(t) || PyTuple_Size(t) != n) return 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = PyLong_AsLongLong(PyTuple_GetItem(t, (Py_ssize_t)i));
    if (out[i] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
  }
  return 1;
}

/* The runtime's dtype code of a numpy dtype object, -1 when the table has none: numpy's builtin dtypes are
 * singletons, so an identity pass finds them without a comparison call; equality covers the rest. */
static int code_of_dtype(PyObject* dtype) {
  for (int c = 0; c < kMaxCodes; ++c)
    if ((PyObject*)g.descr[c] == dtype) return c;
  for (int c = 0; c < kMaxCodes; ++c)
    if (g.descr[c] != NULL && PyObject_RichCompareBool((PyObject*)g.descr[c], dtype, Py_EQ) == 1) return c;
  if (PyErr_Occurred()) PyErr_Clear();
  return -1;
}

/* The view of a DeviceArray (its ptr, shape, strides in elements, dtype and device fields): 1, or 0 for what
 * the ctypes path handles (and reports). sizes/strides: room for kMaxDims each. */
static int device_array_view(PyObject* obj, aoti_host_tensor_view* view, int64_t* sizes, int64_t* strides) {
  static PyObject *k_ptr, *k_shape, *k_strides, *k_dtype, *k_device;
  if (k_ptr == NULL && ((k_ptr = PyUnicode_InternFromString("ptr")) == NULL ||
                        (k_shape = PyUnicode_InternFromString("shape")) == NULL ||
                        (k_strides = PyUnicode_InternFromString("strides")) == NULL ||
                        (k_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
                        (k_device = PyUnicode_InternFromString("device")) == NULL)) {
    PyErr_Clear();
    k_ptr = NULL;
    return 0;
  }
  PyObject* ptr = PyObject_GetAttr(obj, k_ptr);
  PyObject* shape = PyObject_GetAttr(obj, k_shape);
  PyObject* st = PyObject_GetAttr(obj, k_strides);
  PyObject* dtype = PyObject_GetAttr(obj, k_dtype);
  PyObject* device = PyObject_GetAttr(obj, k_device);
  int ok = ptr != NULL && shape != NULL && st != NULL && dtype != NULL && device != NULL &&
           PyTuple_Check(shape) && PyTuple_Size(shape) <= kMaxDims;
  int code = -1;
  if (ok) {
    const int64_t nd = PyTuple_Size(shape);
    ok = read_ints(shape, nd, sizes) && read_ints(st, nd, strides);
    if (ok) code = code_of_dtype(dtype);
    const long dev = ok ? PyLong_AsLong(device) : -1;
    void* p = ok ? PyLong_AsVoidPtr(ptr) : NULL;
    if (PyErr_Occurred()) PyErr_Clear(), ok = 0;
    ok = ok && code >= 0 && dev >= 0;
    if (ok) *view = (aoti_host_tensor_view){p, code, (int32_t)nd, sizes, strides, g.cuda_device_type, (int32_t)dev};
  }
  if (PyErr_Occurred()) PyErr_Clear();
  Py_XDECREF(ptr);
  Py_XDECREF(shape);
  Py_XDECREF(st);
  Py_XDECREF(dtype);
  Py_XDECREF(device);
  return ok;
}

/* The view of input `input` into *view: 1, 0 for what the ctypes path handles (run returns NotImplemented), -1
 * with an exception set. sizes/strides: room for kMaxDims each; *capsule: a DLPack capsule to keep until the
 * run returns. */
static int input_view(PyObject* input, bool on_cuda, aoti_host_tensor_view* view, int64_t* sizes, int64_t* strides,
                      PyObject** capsule) {
  if (on_cuda && (PyObject*)Py_TYPE(input) == g.device_array) return device_array_view(input, view, sizes, strides);
  if (!PyArray_CheckExact(input)) return dlpack_view(input, on_cuda, view, capsule);
  PyArrayObject* a = (PyArrayObject*)input;
  const int code = code_of(a);
  if (code < 0 || PyArray_NDIM(a) > kMaxDims) return 0;
  const int nd = PyArray_NDIM(a);
  const npy_intp item = PyArray_ITEMSIZE(a);
  const npy_intp* bs = PyArray_STRIDES(a);
  const int64_t* st = NULL; /* NULL: C-contiguous */
  if (!PyArray_IS_C_CONTIGUOUS(a)) {
    for (int d = 0; d < nd; ++d) {
      if (bs[d] % item != 0) return 0; /* a stride that is not a whole element: the ctypes path copies it */
      strides[d] = bs[d] / item;
    }
    st = strides;
  }
  *view = (aoti_host_tensor_view){PyArray_DATA(a), code, nd, (const int64_t*)PyArray_DIMS(a), st, 0, 0};
  return 1;
}

/* The list of the run's outputs (each owning its handle), or NULL with an exception set; every handle no array
 * took is freed. */
static PyObject* take_outputs(const aoti_host_api* api, Handle* outs, size_t num_outputs) {
  PyObject* result = PyList_New((Py_ssize_t)num_outputs);
  for (size_t k = 0; k < num_outputs; ++k) {
    if (result == NULL) { /* free the handles no array took */
      if (outs[k] != NULL) api->aoti_torch_delete_tensor_object(outs[k]);
      continue;
    }
    if (outs[k] == NULL) {
      Py_CLEAR(result);
      PyErr_Format(PyExc_RuntimeError, "output %zu: the runtime returned no tensor", k);
      continue;
    }
    PyObject* arr = wrap_output(outs[k]);
    if (arr == NULL) {
      Py_CLEAR(result);
      continue;
    }
    PyList_SetItem(result, (Py_ssize_t)k, arr); /* steals arr; cannot fail for an index in range */
  }
  return result;
}

/* run(program, method, session, inputs, num_outputs[, device_outputs]) -> list of outputs, an int status (the
 * runtime's message is aoti_host_last_error() on this thread), or NotImplemented for inputs this path leaves to
 * the ctypes one. device_outputs (a CUDA program's outputs kept on the device): device inputs are taken too,
 * and outputs are DeviceArrays. */
static PyObject* run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 5 && nargs != 6) return PyErr_Format(PyExc_TypeError, "run takes 5 or 6 arguments, got %zd", nargs);
  const aoti_host_api* api = g.api;
  if (api == NULL) return PyErr_Format(PyExc_RuntimeError, "run before bind");
  void* program = PyLong_AsVoidPtr(args[0]);
  size_t method = PyLong_AsSize_t(args[1]);
  void* session = args[2] == Py_None ? NULL : PyLong_AsVoidPtr(args[2]);
  size_t num_outputs = PyLong_AsSize_t(args[4]);
  if (PyErr_Occurred()) return NULL;
  const bool on_cuda = nargs == 6 && PyObject_IsTrue(args[5]) == 1;
  if (on_cuda && g.device_array == NULL) return PyErr_Format(PyExc_RuntimeError, "device outputs before bind_cuda");
  /* A tuple holds every input for the run: another thread may change the caller's list while the GIL is out. */
  PyObject* seq = PySequence_Tuple(args[3]);
  if (seq == NULL) return NULL;
  const Py_ssize_t n = PyTuple_Size(seq);
  aoti_host_tensor_view stack_views[kStackTensors];
  PyObject* stack_capsules[kStackTensors] = {NULL};
  int64_t stack_strides[kStackTensors][kMaxDims];
  int64_t stack_sizes[kStackTensors][kMaxDims]; /* DeviceArray inputs' shapes */
  int64_t(*sizes)[kMaxDims] = stack_sizes;
  Handle stack_outs[kStackTensors];
  aoti_host_tensor_view* views = stack_views;
  int64_t(*strides)[kMaxDims] = stack_strides;
  Handle* outs = stack_outs;
  PyObject** capsules = stack_capsules;
  PyObject* result = NULL;
  if (n > kStackTensors || num_outputs > kStackTensors) {
    views = PyMem_Malloc(sizeof(*views) * (size_t)(n ? n : 1));
    strides = PyMem_Malloc(sizeof(*strides) * (size_t)(n ? n : 1));
    sizes = PyMem_Malloc(sizeof(*sizes) * (size_t)(n ? n : 1));
    outs = PyMem_Malloc(sizeof(*outs) * (num_outputs ? num_outputs : 1));
    capsules = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*capsules));
    if (views == NULL || strides == NULL || sizes == NULL || outs == NULL || capsules == NULL) {
      PyErr_NoMemory();
      goto done;
    }
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    /* borrowed: seq holds it */
    const int rc = input_view(PyTuple_GetItem(seq, i), on_cuda, &views[i], sizes[i], strides[i], &capsules[i]);
    if (rc <= 0) {
      if (rc == 0) result = Py_NewRef(Py_NotImplemented);
      goto done;
    }
  }
  for (size_t k = 0; k < num_outputs; ++k) outs[k] = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = api->aoti_host_program_run_method((aoti_host_program*)program, method, (aoti_host_session*)session, views,
                                            (size_t)n, outs, num_outputs);
  Py_END_ALLOW_THREADS
  if (status != 0) {
    result = PyLong_FromLong(status);
    goto done;
  }
  result = take_outputs(api, outs, num_outputs);
done:
  for (Py_ssize_t i = 0; capsules != NULL && i < n; ++i) Py_XDECREF(capsules[i]);
  if (capsules != stack_capsules) PyMem_Free(capsules);
  if (views != stack_views) PyMem_Free(views);
  if (strides != stack_strides) PyMem_Free(strides);
  if (sizes != stack_sizes) PyMem_Free(sizes);
  if (outs != stack_outs) PyMem_Free(outs);
  Py_DECREF(seq);
  return result;
}

/* bind_cuda(cuda device type code, DeviceArray), after bind */
static PyObject* bind_cuda(PyObject* self, PyObject* args) {
  (void)self;
  int device_type;
  PyObject* cls;
  if (!PyArg_ParseTuple(args, "iO", &device_type, &cls)) return NULL;
  if (g.api == NULL) return PyErr_Format(PyExc_RuntimeError, "bind_cuda before bind");
  if (!PyType_Check(cls)) return PyErr_Format(PyExc_TypeError, "bind_cuda: DeviceArray must be a class");
  static const char* const names[6] = {"ptr", "shape", "dtype", "strides", "device", "_owner"};
  for (int i = 0; i < 6; ++i) {
    if (g.field[i] == NULL && (g.field[i] = PyUnicode_InternFromString(names[i])) == NULL) return NULL;
  }
  g.cuda_device_type = device_type;
  PyObject* old_cls = g.device_array;
  g.device_array = Py_NewRef(cls);
  Py_XDECREF(old_cls);
  Py_RETURN_NONE;
}

/* synchronize(program) -> status: waits for the program's device work with the GIL released. */
static PyObject* synchronize(PyObject* self, PyObject* arg) {
  (void)self;
  if (g.api == NULL) return PyErr_Format(PyExc_RuntimeError, "synchronize before bind");
  void* program = PyLong_AsVoidPtr(arg);
  if (program == NULL && PyErr_Occurred()) return NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = g.api->aoti_host_program_synchronize((const aoti_host_program*)program);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(status);
}

/* dlpack/dlpack.h's legacy DLManagedTensor, with room for its shape and strides. */
typedef struct Managed {
  DLTensor dl_tensor;
  void* manager_ctx; /* the exporting Python object (a strong reference) */
  void (*deleter)(struct Managed*);
  int64_t shape[kMaxDims], strides[kMaxDims];
} Managed;

static void managed_delete(Managed* m) {
  /* consumers may call this from any thread, with or without the GIL */
  PyGILState_STATE st = PyGILState_Ensure();
  Py_XDECREF((PyObject*)m->manager_ctx);
  PyGILState_Release(st);
  free(m);
}

static void dlpack_capsule_delete(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return; /* consumed ("used_dltensor"): the consumer owns it */
  Managed* m = (Managed*)PyCapsule_GetPointer(capsule, "dltensor");
  if (m != NULL) m->deleter(m);
}

/* to_dlpack(owner, ptr, shape, strides, dtype, device_type, device_id) -> a "dltensor" capsule viewing the
 * memory without a copy; `owner` stays alive until the consumer releases it. */
static PyObject* to_dlpack(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *owner, *shape, *st, *dtype;
  unsigned long long ptr;
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "OKOOOii", &owner, &ptr, &shape, &st, &dtype, &device_type, &device_id)) return NULL;
  if (!PyTuple_Check(shape) || PyTuple_Size(shape) > kMaxDims)
    return PyErr_Format(PyExc_ValueError, "to_dlpack: shape must be a tuple of at most %d ints", kMaxDims);
  const int code = code_of_dtype(dtype);
  int kind = -1, bits = -1;
  for (int k = 0; code >= 0 && k < 8 && kind < 0; ++k)
    for (int b = 0; b <= 64; ++b)
      if (g.dl_code[k][b] == code) {
        kind = k, bits = b;
        break;
      }
  if (kind < 0) return PyErr_Format(PyExc_TypeError, "to_dlpack: no DLPack dtype for %R", dtype);
  Managed* m = calloc(1, sizeof(Managed));
  if (m == NULL) return PyErr_NoMemory();
  const int64_t nd = PyTuple_Size(shape);
  if (!read_ints(shape, nd, m->shape) || !read_ints(st, nd, m->strides)) {
    free(m);
    return PyErr_Format(PyExc_ValueError, "to_dlpack: shape and strides must be tuples of %lld ints", (long long)nd);
  }
  m->dl_tensor = (DLTensor){(void*)(uintptr_t)ptr, {device_type, device_id}, (int32_t)nd,
                            {(uint8_t)kind, (uint8_t)bits, 1}, m->shape, m->strides, 0};
  m->manager_ctx = Py_NewRef(owner);
  m->deleter = managed_delete;
  PyObject* capsule = PyCapsule_New(m, "dltensor", dlpack_capsule_delete);
  if (capsule == NULL) managed_delete(m);
  return capsule;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(function table address, {code: numpy dtype}, {(DLPack code, bits): code})"},
    {"bind_cuda", bind_cuda, METH_VARARGS, "bind_cuda(cuda device type code, DeviceArray)"},
    {"synchronize", synchronize, METH_O, "synchronize(program) -> status"},
    {"to_dlpack", to_dlpack, METH_VARARGS, "to_dlpack(owner, ptr, shape, strides, dtype, device_type, device_id)"},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(program, method, session, inputs, num_outputs) -> outputs | status | NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_aoti_fastrun", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__aoti_fastrun(void);
PyMODINIT_FUNC PyInit__aoti_fastrun(void) {
  import_array();
  PyObject* m = PyModule_Create(&module);
  if (m != NULL && PyModule_AddIntConstant(m, "API_VERSION", AOTI_HOST_API_VERSION) < 0) Py_CLEAR(m);
  return m;
}
