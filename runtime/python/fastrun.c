/* _aoti_fastrun: the per-call path of the Python runtime (toolchain/runtime) in C. One run is one call
 * from Python: numpy inputs read in place (no copy), aoti_host_program_run_method called with the GIL
 * released (Python threads run programs concurrently), outputs handed to numpy without a copy: each array's
 * base is a capsule owning the runtime's tensor handle, freed by the capsule's destructor when the last
 * array viewing it goes.
 *
 * It links nothing of the runtime: toolchain/runtime passes the addresses of the C API entry points it
 * already opened through ctypes (bind()), so one libaoti_host.so serves both paths. Anything this path does
 * not handle (DLPack producers, dtypes numpy has no equivalent of, CUDA programs) is left to the ctypes
 * path: run() returns NotImplemented before touching the program.
 *
 * Inputs are numpy arrays (read through numpy's C API) or DLPack producers in host memory (torch tensors, ...:
 * `__dlpack__()` exported, the DLTensor read, the capsule kept unconsumed until the run returns, so its own
 * destructor releases the producer's tensor).
 *
 * Built against CPython's limited API (the stable ABI of 3.10 and later, Py_LIMITED_API set by the build), so
 * one `_aoti_fastrun.abi3.so` serves every CPython the wheel is installed into. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "aoti_host/c_api.h"

_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "numpy's dims are read as the runtime's int64 sizes");

typedef struct AtenTensorOpaque* Handle;
typedef int (*run_fn)(aoti_host_program*, size_t, aoti_host_session*, const aoti_host_tensor_view*, size_t,
                      Handle*, size_t);
typedef int32_t (*get_ptr_fn)(Handle, void**);
typedef int32_t (*get_i32_fn)(Handle, int32_t*);
typedef int32_t (*get_i64_fn)(Handle, int64_t*);
typedef int32_t (*get_arr_fn)(Handle, int64_t**);
typedef int32_t (*delete_fn)(Handle);

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
  run_fn run;
  get_ptr_fn data_ptr;
  get_i32_fn dtype, device_type;
  get_i64_fn dim;
  get_arr_fn sizes, strides;
  delete_fn del;
  PyArray_Descr* descr[kMaxCodes]; /* torch ScalarType code -> numpy dtype (NULL: none) */
  int16_t dl_code[8][65];          /* [DLDataTypeCode][bits] -> torch ScalarType code (-1: none) */
  bool bound;
} g;

static const char kCapsule[] = "aoti_host.tensor";

static void free_handle(PyObject* capsule) {
  Handle h = (Handle)PyCapsule_GetPointer(capsule, kCapsule);
  if (h != NULL && g.del != NULL) g.del(h);
}

/* bind(run_method, data_ptr, dtype, device_type, dim, sizes, strides, delete, {code: numpy dtype},
 *      {(DLDataTypeCode, bits): code}) */
static PyObject* bind(PyObject* self, PyObject* args) {
  (void)self;
  unsigned long long a[8];
  PyObject *dtypes, *dl;
  if (!PyArg_ParseTuple(args, "KKKKKKKKO!O!", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &PyDict_Type,
                        &dtypes, &PyDict_Type, &dl))
    return NULL;
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
  for (int i = 0; i < 8; ++i)
    if (a[i] == 0) return PyErr_Format(PyExc_ValueError, "bind: entry point %d is NULL", i);
  g.run = (run_fn)(uintptr_t)a[0];
  g.data_ptr = (get_ptr_fn)(uintptr_t)a[1];
  g.dtype = (get_i32_fn)(uintptr_t)a[2];
  g.device_type = (get_i32_fn)(uintptr_t)a[3];
  g.dim = (get_i64_fn)(uintptr_t)a[4];
  g.sizes = (get_arr_fn)(uintptr_t)a[5];
  g.strides = (get_arr_fn)(uintptr_t)a[6];
  g.del = (delete_fn)(uintptr_t)a[7];
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
  g.bound = true;
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

/* A numpy array viewing output `h` without a copy; it owns h through its base capsule. Steals h (freed on
 * failure too). */
static PyObject* wrap_output(Handle h) {
  PyObject* capsule = PyCapsule_New(h, kCapsule, free_handle);
  if (capsule == NULL) {
    g.del(h);
    return NULL;
  }
  void* data = NULL;
  int32_t code = -1, device = 0;
  int64_t ndim = 0;
  int64_t *sizes = NULL, *strides = NULL;
  if (g.data_ptr(h, &data) || g.dtype(h, &code) || g.device_type(h, &device) || g.dim(h, &ndim) ||
      g.sizes(h, &sizes) || g.strides(h, &strides) || ndim < 0 || ndim > kMaxDims) {
    Py_DECREF(capsule);
    return PyErr_Format(PyExc_RuntimeError, "output: cannot read the tensor's metadata");
  }
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
static int dlpack_view(PyObject* obj, aoti_host_tensor_view* view, PyObject** capsule) {
  static PyObject* name = NULL;
  if (name == NULL && (name = PyUnicode_InternFromString("__dlpack__")) == NULL) return -1;
  PyObject* method = PyObject_GetAttr(obj, name);
  if (method == NULL) {
    PyErr_Clear();
    return 0;
  }
  PyObject* cap = PyObject_CallNoArgs(method);
  Py_DECREF(method);
  if (cap == NULL) { /* the ctypes path reports the producer's refusal with its own message */
    PyErr_Clear();
    return 0;
  }
  DLTensor* t = PyCapsule_IsValid(cap, "dltensor") ? (DLTensor*)PyCapsule_GetPointer(cap, "dltensor") : NULL;
  if (t == NULL || (t->device.device_type != 1 && t->device.device_type != 3) || t->dtype.lanes != 1 ||
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
  *view = (aoti_host_tensor_view){(char*)t->data + t->byte_offset, code, t->ndim, t->shape, t->strides, 0, 0};
  *capsule = cap;
  return 1;
}

/* run(program, method, session, inputs, num_outputs) -> list of numpy arrays, an int status (the runtime's
 * message is aoti_host_last_error() on this thread), or NotImplemented for inputs this path leaves to the
 * ctypes one. */
static PyObject* run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 5) return PyErr_Format(PyExc_TypeError, "run takes 5 arguments, got %zd", nargs);
  if (!g.bound) return PyErr_Format(PyExc_RuntimeError, "run before bind");
  void* program = PyLong_AsVoidPtr(args[0]);
  size_t method = PyLong_AsSize_t(args[1]);
  void* session = args[2] == Py_None ? NULL : PyLong_AsVoidPtr(args[2]);
  size_t num_outputs = PyLong_AsSize_t(args[4]);
  if (PyErr_Occurred()) return NULL;
  /* A tuple holds every input for the run: another thread may change the caller's list while the GIL is out. */
  PyObject* seq = PySequence_Tuple(args[3]);
  if (seq == NULL) return NULL;
  const Py_ssize_t n = PyTuple_Size(seq);
  aoti_host_tensor_view stack_views[kStackTensors];
  PyObject* stack_capsules[kStackTensors] = {NULL};
  int64_t stack_strides[kStackTensors][kMaxDims];
  Handle stack_outs[kStackTensors];
  aoti_host_tensor_view* views = stack_views;
  int64_t(*strides)[kMaxDims] = stack_strides;
  Handle* outs = stack_outs;
  PyObject** capsules = stack_capsules;
  PyObject* result = NULL;
  if (n > kStackTensors || num_outputs > kStackTensors) {
    views = PyMem_Malloc(sizeof(*views) * (size_t)(n ? n : 1));
    strides = PyMem_Malloc(sizeof(*strides) * (size_t)(n ? n : 1));
    outs = PyMem_Malloc(sizeof(*outs) * (num_outputs ? num_outputs : 1));
    capsules = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*capsules));
    if (views == NULL || strides == NULL || outs == NULL || capsules == NULL) {
      PyErr_NoMemory();
      goto done;
    }
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* input = PyTuple_GetItem(seq, i); /* borrowed: seq holds it */
    if (!PyArray_CheckExact(input)) {
      const int rc = dlpack_view(input, &views[i], &capsules[i]);
      if (rc < 0) goto done;
      if (rc == 0) {
        result = Py_NewRef(Py_NotImplemented);
        goto done;
      }
      continue;
    }
    PyArrayObject* a = (PyArrayObject*)input;
    if (code_of(a) < 0 || PyArray_NDIM(a) > kMaxDims) {
      result = Py_NewRef(Py_NotImplemented);
      goto done;
    }
    const int nd = PyArray_NDIM(a);
    const npy_intp item = PyArray_ITEMSIZE(a);
    const npy_intp* bs = PyArray_STRIDES(a);
    const int64_t* st = NULL; /* NULL: C-contiguous */
    if (!PyArray_IS_C_CONTIGUOUS(a)) {
      for (int d = 0; d < nd; ++d) {
        if (bs[d] % item != 0) { /* a stride that is not a whole element: the ctypes path copies it */
          result = Py_NewRef(Py_NotImplemented);
          goto done;
        }
        strides[i][d] = bs[d] / item;
      }
      st = strides[i];
    }
    views[i] = (aoti_host_tensor_view){PyArray_DATA(a), code_of(a), nd, (const int64_t*)PyArray_DIMS(a), st, 0, 0};
  }
  for (size_t k = 0; k < num_outputs; ++k) outs[k] = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = g.run((aoti_host_program*)program, method, (aoti_host_session*)session, views, (size_t)n, outs,
                 num_outputs);
  Py_END_ALLOW_THREADS
  if (status != 0) {
    result = PyLong_FromLong(status);
    goto done;
  }
  result = PyList_New((Py_ssize_t)num_outputs);
  for (size_t k = 0; k < num_outputs; ++k) {
    if (result == NULL) { /* free the handles no array took */
      if (outs[k] != NULL) g.del(outs[k]);
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
done:
  for (Py_ssize_t i = 0; capsules != NULL && i < n; ++i) Py_XDECREF(capsules[i]);
  if (capsules != stack_capsules) PyMem_Free(capsules);
  if (views != stack_views) PyMem_Free(views);
  if (strides != stack_strides) PyMem_Free(strides);
  if (outs != stack_outs) PyMem_Free(outs);
  Py_DECREF(seq);
  return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(entry point addresses..., {code: numpy dtype})"},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(program, method, session, inputs, num_outputs) -> outputs | status | NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_aoti_fastrun", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__aoti_fastrun(void);
PyMODINIT_FUNC PyInit__aoti_fastrun(void) {
  import_array();
  return PyModule_Create(&module);
}
