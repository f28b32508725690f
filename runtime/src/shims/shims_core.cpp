// Core aoti_torch_* shims: constants, tensor creation/inspection/views, copies, checks and warnings.
// No C++ exception crosses the C ABI except from aoti_torch_check, which must throw (see below).
#include "shims/shim_util.h"
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"
#include "shims/cpu_kernels.h"
#if CUDA_AVAILABLE
#include "aoti_host/cuda/cuda.h"
#endif

using aoti_host::Error;
using aoti_host::from_handle;
using aoti_host::Tensor;
using aoti_host::to_handle;

namespace {

constexpr int32_t kLayoutStrided = 0;

using aoti_host::shim::guarded;
using aoti_host::shim::tensor_arg;

template <class T>
T* out_arg(T* p, const char* name) {
  if (p == nullptr) throw Error(std::string("output pointer '") + name + "' is null");
  return p;
}

std::vector<int64_t> int_array(const int64_t* p, int64_t n, const char* name) {
  if (n < 0) throw Error(std::string("ndim ") + std::to_string(n) + " for '" + name + "' is negative");
  if (n > 0 && p == nullptr) throw Error(std::string("'") + name + "' is null but ndim is " + std::to_string(n));
  return std::vector<int64_t>(p, p + n);
}

int64_t dim_arg(const Tensor& t, int64_t d) {
  const int64_t nd = t.dim();
  const int64_t w = d < 0 ? d + nd : d;
  if (w < 0 || w >= nd) {
    throw Error("dimension " + std::to_string(d) + " is out of range for a " + std::to_string(nd) + "-d tensor");
  }
  return w;
}

thread_local aoti_host::BlobTensorHook t_blob_tensor_hook = nullptr;

Tensor* create_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                         int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index) {
  std::vector<int64_t> sizes = int_array(sizes_ptr, ndim, "sizes_ptr");
  std::vector<int64_t> strides = int_array(strides_ptr, ndim, "strides_ptr");
  Tensor* t = Tensor::from_blob(data, dtype, std::move(sizes), std::move(strides), storage_offset, device_type,
                                device_index);
  if (t_blob_tensor_hook != nullptr)
    t_blob_tensor_hook(aoti_host::compute_storage_nbytes(t->sizes(), t->strides(), t->itemsize(), t->storage_offset()));
  return t;
}

void copy_any(Tensor& dst, const Tensor& src);

// A single element, converted to T through the runtime's own copy (torch's item().to<T>()).
template <class T>
AOTITorchError item(const char* shim, AtenTensorHandle tensor, T* ret, int32_t dtype) {
  return guarded(shim, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    out_arg(ret, "ret_value");
    if (t.numel() != 1) {
      throw Error("tensor has " + std::to_string(t.numel()) + " elements; item() needs exactly one");
    }
    T value{};
    std::unique_ptr<Tensor> dst(Tensor::from_blob(&value, dtype, {}, {}, 0, 0, 0));
    std::unique_ptr<Tensor> src(t.alias(std::vector<int64_t>{}, std::vector<int64_t>{}, t.storage_offset()));
    if (src->dtype() == dtype || src->device_type() == 0) {
      copy_any(*dst, *src);
    } else {  // a device scalar of another dtype: to the host first, then convert
      std::unique_ptr<Tensor> host(Tensor::empty_strided(src->dtype(), {}, {}));
      copy_any(*host, *src);
      aoti_host::cpu::copy(*dst, *host);
    }
    *ret = value;
  });
}

template <class T>
AOTITorchError scalar_to_tensor(const char* shim, T value, int32_t dtype, AtenTensorHandle* ret) {
  return guarded(shim, [&] {
    out_arg(ret, "ret_new_tensor");
    Tensor* t = Tensor::empty_strided(dtype, {}, {});
    std::memcpy(t->data_ptr(), &value, sizeof(T));
    *ret = to_handle(t);
  });
}

thread_local bool t_grad_mode = false;

// copy_ and friends: through the device when either side lives there.
void copy_any(Tensor& dst, const Tensor& src) {
#if CUDA_AVAILABLE
  if (dst.device_type() == aoti_host::device_code::kCUDA || src.device_type() == aoti_host::device_code::kCUDA)
    return aoti_host::cuda::copy(dst, src);
#endif
  aoti_host::cpu::copy(dst, src);
}

}  // namespace

aoti_host::BlobTensorHook aoti_host::set_thread_blob_tensor_hook(BlobTensorHook hook) {
  const BlobTensorHook previous = t_blob_tensor_hook;
  t_blob_tensor_hook = hook;
  return previous;
}

extern "C" {

// ---- constants (torch's c10 codes), aoti_torch_scalar_to_tensor_<dtype>, aoti_torch_item_<dtype>: generated ----
#include "aoti_host/shims_constants.inc"

// Unknown codes give 0 (the C signature has no error channel) and record why.
AOTI_HOST_API size_t aoti_torch_dtype_element_size(int32_t dtype) {
  try {
    return aoti_host::element_size(dtype);
  } catch (const std::exception& e) {
    aoti_host::set_last_error(std::string("aoti_torch_dtype_element_size: ") + e.what());
    return 0;
  }
}

// ---- grad mode: the runtime never records autograd; the flag is kept for plugins that toggle it ----
AOTI_HOST_API bool aoti_torch_grad_mode_is_enabled(void) { return t_grad_mode; }
AOTI_HOST_API void aoti_torch_grad_mode_set_enabled(bool enabled) { t_grad_mode = enabled; }

// ---- scalars ----
// aoti_torch_item_<dtype> are in shims_constants.inc; bool reads the byte torch stores.
AOTI_HOST_API AOTITorchError aoti_torch_item_bool(AtenTensorHandle tensor, bool* ret_value) {
  if (ret_value == nullptr) {
    aoti_host::set_last_error("aoti_torch_item_bool: output pointer 'ret_value' is null");
    return AOTI_TORCH_FAILURE;
  }
  uint8_t v = 0;
  const AOTITorchError rc = item("aoti_torch_item_bool", tensor, &v, aoti_host::dtypes::kBool);
  if (rc == AOTI_TORCH_SUCCESS) *ret_value = v != 0;
  return rc;
}

// ---- lifetime ----
AOTI_HOST_API AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor) {
  return guarded("aoti_torch_delete_tensor_object", [&] { delete &tensor_arg(tensor, "tensor"); });
}

AOTI_HOST_API AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle, AtenTensorHandle* new_handle) {
  return guarded("aoti_torch_new_tensor_handle", [&] {
    const Tensor& t = tensor_arg(orig_handle, "orig_handle");
    *out_arg(new_handle, "new_handle") = to_handle(t.alias(t.sizes(), t.strides(), t.storage_offset()));
  });
}

// torch gives an undefined at::Tensor meant to be filled by assign_tensors; here it is an empty
// float32 tensor with no storage, which assign_tensors replaces wholesale.
AOTI_HOST_API AOTITorchError aoti_torch_new_uninitialized_tensor(AtenTensorHandle* ret) {
  return guarded("aoti_torch_new_uninitialized_tensor", [&] {
    *out_arg(ret, "ret") = to_handle(Tensor::from_blob(nullptr, aoti_host::dtypes::kFloat32, {0}, {1}, 0, 0, 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_assign_tensors(AtenTensorHandle src, AtenTensorHandle dst) {
  return guarded("aoti_torch_assign_tensors", [&] { tensor_arg(dst, "dst").assign(tensor_arg(src, "src")); });
}

AOTI_HOST_API AOTITorchError aoti_torch_assign_tensors_out(AtenTensorHandle src, AtenTensorHandle* ret_dst) {
  return guarded("aoti_torch_assign_tensors_out", [&] {
    const Tensor& t = tensor_arg(src, "src");
    *out_arg(ret_dst, "ret_dst") = to_handle(t.alias(t.sizes(), t.strides(), t.storage_offset()));
  });
}

// ---- inspection ----
AOTI_HOST_API AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr) {
  return guarded("aoti_torch_get_data_ptr",
                 [&] { *out_arg(ret_data_ptr, "ret_data_ptr") = tensor_arg(tensor, "tensor").data_ptr(); });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret_size) {
  return guarded("aoti_torch_get_storage_size", [&] {
    *out_arg(ret_size, "ret_size") = static_cast<int64_t>(tensor_arg(tensor, "tensor").storage_nbytes());
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_storage_numel(AtenTensorHandle tensor, int64_t* ret_numel) {
  return guarded("aoti_torch_get_storage_numel", [&] {
    const Tensor& t = tensor_arg(tensor, "tensor");
    *out_arg(ret_numel, "ret_numel") = static_cast<int64_t>(t.storage_nbytes() / t.itemsize());
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim) {
  return guarded("aoti_torch_get_dim", [&] { *out_arg(ret_dim, "ret_dim") = tensor_arg(tensor, "tensor").dim(); });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret_numel) {
  return guarded("aoti_torch_get_numel",
                 [&] { *out_arg(ret_numel, "ret_numel") = tensor_arg(tensor, "tensor").numel(); });
}
// The arrays live inside the tensor object: valid until the handle is deleted.
AOTI_HOST_API AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes) {
  return guarded("aoti_torch_get_sizes", [&] {
    *out_arg(ret_sizes, "ret_sizes") = const_cast<int64_t*>(tensor_arg(tensor, "tensor").sizes().data());
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret_size) {
  return guarded("aoti_torch_get_size", [&] {
    const Tensor& t = tensor_arg(tensor, "tensor");
    *out_arg(ret_size, "ret_size") = t.sizes()[static_cast<size_t>(dim_arg(t, d))];
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides) {
  return guarded("aoti_torch_get_strides", [&] {
    *out_arg(ret_strides, "ret_strides") = const_cast<int64_t*>(tensor_arg(tensor, "tensor").strides().data());
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d, int64_t* ret_stride) {
  return guarded("aoti_torch_get_stride", [&] {
    const Tensor& t = tensor_arg(tensor, "tensor");
    *out_arg(ret_stride, "ret_stride") = t.strides()[static_cast<size_t>(dim_arg(t, d))];
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype) {
  return guarded("aoti_torch_get_dtype",
                 [&] { *out_arg(ret_dtype, "ret_dtype") = tensor_arg(tensor, "tensor").dtype(); });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret_device_type) {
  return guarded("aoti_torch_get_device_type",
                 [&] { *out_arg(ret_device_type, "ret_device_type") = tensor_arg(tensor, "tensor").device_type(); });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor, int32_t* ret_device_index) {
  return guarded("aoti_torch_get_device_index", [&] {
    *out_arg(ret_device_index, "ret_device_index") = tensor_arg(tensor, "tensor").device_index();
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout) {
  return guarded("aoti_torch_get_layout", [&] {
    tensor_arg(tensor, "tensor");
    *out_arg(ret_layout, "ret_layout") = kLayoutStrided;
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle tensor, int64_t* ret_storage_offset) {
  return guarded("aoti_torch_get_storage_offset", [&] {
    *out_arg(ret_storage_offset, "ret_storage_offset") = tensor_arg(tensor, "tensor").storage_offset();
  });
}
AOTI_HOST_API AOTITorchError aoti_torch_is_contiguous(AtenTensorHandle tensor, bool* ret_is_contiguous) {
  return guarded("aoti_torch_is_contiguous", [&] {
    *out_arg(ret_is_contiguous, "ret_is_contiguous") = tensor_arg(tensor, "tensor").is_contiguous();
  });
}
// Every handle of this runtime is a defined tensor; only a null handle is "undefined".
AOTI_HOST_API AOTITorchError aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret_is_defined) {
  return guarded("aoti_torch_is_defined", [&] { *out_arg(ret_is_defined, "ret_is_defined") = tensor != nullptr; });
}

// ---- creation and views ----
AOTI_HOST_API AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                                      int32_t dtype, int32_t device_type, int32_t device_index,
                                                      AtenTensorHandle* ret_new_tensor) {
  return guarded("aoti_torch_empty_strided", [&] {
    out_arg(ret_new_tensor, "ret_new_tensor");
    *ret_new_tensor = to_handle(Tensor::empty_strided(dtype, int_array(sizes_ptr, ndim, "sizes_ptr"),
                                                      int_array(strides_ptr, ndim, "strides_ptr"), device_type,
                                                      device_index));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_create_tensor_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                                const int64_t* strides_ptr, int64_t storage_offset,
                                                                int32_t dtype, int32_t device_type,
                                                                int32_t device_index, AtenTensorHandle* ret) {
  return guarded("aoti_torch_create_tensor_from_blob", [&] {
    out_arg(ret, "ret");
    *ret = to_handle(
        create_from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype, device_type, device_index));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_create_tensor_from_blob_v2(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                                   const int64_t* strides_ptr, int64_t storage_offset,
                                                                   int32_t dtype, int32_t device_type,
                                                                   int32_t device_index, AtenTensorHandle* ret,
                                                                   int32_t layout, const uint8_t* opaque_metadata,
                                                                   int64_t opaque_metadata_size) {
  return guarded("aoti_torch_create_tensor_from_blob_v2", [&] {
    out_arg(ret, "ret");
    if (layout != kLayoutStrided) {
      throw Error("layout " + std::to_string(layout) +
                  " is not supported: this runtime only has strided tensors (layout 0); mkldnn, sparse and jagged "
                  "tensors need libtorch");
    }
    if (opaque_metadata != nullptr && opaque_metadata_size > 0) {
      throw Error("opaque_metadata of " + std::to_string(opaque_metadata_size) +
                  " bytes is not supported (only mkldnn tensors carry it)");
    }
    *ret = to_handle(
        create_from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype, device_type, device_index));
  });
}

// storage_offset is an increment on self's offset, as in torch::inductor::_reinterpret_tensor.
AOTI_HOST_API AOTITorchError aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim,
                                                            const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                                            int64_t storage_offset, AtenTensorHandle* ret_new_tensor) {
  return guarded("aoti_torch__reinterpret_tensor", [&] {
    const Tensor& t = tensor_arg(self, "self");
    out_arg(ret_new_tensor, "ret_new_tensor");
    *ret_new_tensor = to_handle(t.alias(int_array(sizes_ptr, ndim, "sizes_ptr"), int_array(strides_ptr, ndim, "strides_ptr"),
                                        t.storage_offset() + storage_offset));
  });
}

// Like torch: the view keeps self's dimensionality and storage offset.
AOTI_HOST_API AOTITorchError aoti_torch_as_strided(AtenTensorHandle self, const int64_t* sizes_ptr,
                                                   const int64_t* strides_ptr, AtenTensorHandle* ret) {
  return guarded("aoti_torch_as_strided", [&] {
    const Tensor& t = tensor_arg(self, "self");
    out_arg(ret, "ret");
    *ret = to_handle(t.alias(int_array(sizes_ptr, t.dim(), "sizes_ptr"), int_array(strides_ptr, t.dim(), "strides_ptr"),
                             t.storage_offset()));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch__alloc_from_pool(AtenTensorHandle self, int64_t offset_bytes, int32_t dtype,
                                                         int64_t ndim, const int64_t* sizes_ptr,
                                                         const int64_t* strides_ptr, AtenTensorHandle* ret_new_tensor) {
  return guarded("aoti_torch__alloc_from_pool", [&] {
    const Tensor& pool = tensor_arg(self, "self");
    out_arg(ret_new_tensor, "ret_new_tensor");
    const size_t isz = aoti_host::element_size(dtype);
    const int64_t base_bytes = pool.storage_offset() * static_cast<int64_t>(pool.itemsize()) + offset_bytes;
    if (offset_bytes < 0 || base_bytes % static_cast<int64_t>(isz) != 0) {
      throw Error("offset_bytes " + std::to_string(offset_bytes) + " is negative or not a multiple of the " +
                  std::to_string(isz) + "-byte element size of " + aoti_host::dtype_name(dtype));
    }
    *ret_new_tensor = to_handle(pool.alias_as(dtype, int_array(sizes_ptr, ndim, "sizes_ptr"),
                                              int_array(strides_ptr, ndim, "strides_ptr"),
                                              base_bytes / static_cast<int64_t>(isz)));
  });
}

// ---- copies ----
AOTI_HOST_API AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret) {
  return guarded("aoti_torch_clone", [&] {
    const Tensor& t = tensor_arg(self, "self");
    *out_arg(ret, "ret") = to_handle(t.clone_contiguous());
  });
}

// torch copies the whole strided span so the clone has self's strides (offset 0).
AOTI_HOST_API AOTITorchError aoti_torch_clone_preserve_strides(AtenTensorHandle self, AtenTensorHandle* ret) {
  return guarded("aoti_torch_clone_preserve_strides", [&] {
    const Tensor& t = tensor_arg(self, "self");
    out_arg(ret, "ret");
    std::unique_ptr<Tensor> c(Tensor::empty_strided(t.dtype(), t.sizes(), t.strides(), t.device_type(), t.device_index()));
    const size_t n = aoti_host::compute_storage_nbytes(t.sizes(), t.strides(), t.itemsize(), 0);
#if CUDA_AVAILABLE
    if (t.device_type() == aoti_host::device_code::kCUDA) {
      copy_any(*c, t);
      *ret = to_handle(c.release());
      return;
    }
#endif
    if (n > 0) std::memcpy(c->data_ptr(), t.data_ptr(), n);
    *ret = to_handle(c.release());
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src, int32_t non_blocking) {
  (void)non_blocking;  // CPU copies are always synchronous
  return guarded("aoti_torch_copy_", [&] { copy_any(tensor_arg(self, "self"), tensor_arg(src, "src")); });
}

AOTI_HOST_API AOTITorchError aoti_torch_tensor_copy_(AtenTensorHandle src, AtenTensorHandle dst) {
  return guarded("aoti_torch_tensor_copy_", [&] { copy_any(tensor_arg(dst, "dst"), tensor_arg(src, "src")); });
}

// All-zero bytes are zero in every dtype the runtime stores.
AOTI_HOST_API AOTITorchError aoti_torch_zero_(AtenTensorHandle self) {
  return guarded("aoti_torch_zero_", [&] {
    Tensor& t = tensor_arg(self, "self");
#if CUDA_AVAILABLE
    if (t.device_type() == aoti_host::device_code::kCUDA) return aoti_host::cuda::zero(t);
#endif
    std::unique_ptr<Tensor> z(Tensor::empty_strided(t.dtype(), {}, {}));
    std::memset(z->data_ptr(), 0, t.itemsize());
    aoti_host::cpu::copy(t, *z);
  });
}

// ---- checks and warnings ----
// The plugin's generated code wraps its body in try/catch(std::exception&) and turns what it catches
// into a non-zero Run result, so a failed check must throw (returning would run on with bad indices).
AOTI_HOST_API void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line, const char* msg) {
  if (cond) return;
  std::string m = std::string(msg != nullptr ? msg : "(no message)") + " (check failed in " +
                  (func != nullptr ? func : "?") + " at " + (file != nullptr ? file : "?") + ":" +
                  std::to_string(line) + ")";
  aoti_host::set_last_error("aoti_torch_check: " + m);
  throw std::runtime_error(m);
}

AOTI_HOST_API void aoti_torch_warn(const char* func, const char* file, uint32_t line, const char* msg) {
  aoti_host::log(aoti_host::LogLevel::Warning, "%s:%u: %s: %s", file != nullptr ? file : "?", line,
                 func != nullptr ? func : "?", msg != nullptr ? msg : "");
}

}  // extern "C"
