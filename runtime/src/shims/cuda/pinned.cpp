// aoti_torch_empty_strided_pinned: a CPU tensor in page-locked host memory. CUDA plugins of torch >= 2.14 allocate
// their staging buffers with it (two 64 MiB uint8 tensors per load under AOTI_COPY_USE_PINNED_ASYNC) and copy
// constants through them with cudaMemcpyAsync, which only overlaps other streams when the source is pinned.
// The memory comes from cudaHostAlloc and goes back with cudaFreeHost when the last tensor sharing the storage is
// deleted. torch caches freed pinned blocks process-wide; this runtime does not: a plugin allocates its staging
// pool once per load, and cudaFreeHost synchronises the device anyway, which the plugin does before releasing.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"
#include "shims/cuda/cuda_util.h"
#include "shims/shim_util.h"

namespace {

using aoti_host::Error;

void free_pinned(void* ctx) {
  // The deleter runs from Storage's destructor: a failure here can only be reported, never thrown.
  if (cudaFreeHost(ctx) != cudaSuccess) cudaGetLastError();
}

aoti_host::Tensor* empty_pinned(std::vector<int64_t> sizes, std::vector<int64_t> strides, int32_t dtype,
                                int32_t device_type) {
  if (device_type != aoti_host::device_code::kCPU) {
    throw Error(std::string("pinned memory is host memory: device_type must be cpu (0), got ") +
                aoti_host::device_type_name(device_type) + " (" + std::to_string(device_type) + ")");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0)
      throw Error("negative size or stride in sizes " + aoti_host::list_str(sizes) + ", strides " +
                  aoti_host::list_str(strides));
  }
  const size_t nbytes = aoti_host::compute_storage_nbytes(sizes, strides, aoti_host::element_size(dtype), 0);
  void* data = nullptr;
  if (nbytes != 0) {
    const cudaError_t rc = cudaHostAlloc(&data, nbytes, cudaHostAllocDefault);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      throw Error("cudaHostAlloc of " + std::to_string(nbytes) + " bytes failed: " + cudaGetErrorString(rc));
    }
  }
  try {
    return aoti_host::Tensor::from_blob(data, dtype, std::move(sizes), std::move(strides), 0,
                                        aoti_host::device_code::kCPU, 0, data != nullptr ? free_pinned : nullptr,
                                        data);
  } catch (...) {
    if (data != nullptr) free_pinned(data);
    throw;
  }
}

}  // namespace

extern "C" {

// device_index is ignored, as torch ignores it: pinned host memory is accessible from every device.
AOTI_HOST_API AOTITorchError aoti_torch_empty_strided_pinned(int64_t ndim, const int64_t* sizes_ptr,
                                                             const int64_t* strides_ptr, int32_t dtype,
                                                             int32_t device_type, int32_t /*device_index*/,
                                                             AtenTensorHandle* ret_new_tensor) {
  using aoti_host::shim::int_list;
  return aoti_host::shim::guarded("aoti_torch_empty_strided_pinned", [&] {
    aoti_host::shim::need(ret_new_tensor, "ret_new_tensor");
    *ret_new_tensor = aoti_host::to_handle(empty_pinned(int_list(sizes_ptr, ndim, "sizes_ptr"),
                                                        int_list(strides_ptr, ndim, "strides_ptr"), dtype, device_type));
  });
}

}  // extern "C"
