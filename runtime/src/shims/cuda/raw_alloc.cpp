// aoti_torch_cuda_caching_allocator_raw_alloc / _raw_delete: untyped device memory for a CUDA plugin built with
// AOT_INDUCTOR_WEIGHT_USE_CACHING_ALLOCATOR=1, which allocates its constants blob with them instead of cudaMalloc
// (model_base.h's RAII_gpuMalloc) once per model and frees it when the model is deleted. The memory is the
// current device's and must be usable from any stream right away (the plugin copies the constants in on the
// legacy default stream and reads them on the run's stream): plain cudaMalloc/cudaFree, not the stream-ordered
// pool the tensor allocator uses (whose blocks belong to the stream that allocated them).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "shims/shim_util.h"

extern "C" {

AOTI_HOST_API AOTITorchError aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t nbytes, void** ret_ptr) {
  return aoti_host::shim::guarded("aoti_torch_cuda_caching_allocator_raw_alloc", [&] {
    aoti_host::shim::need(ret_ptr, "ret_ptr");
    *ret_ptr = nullptr;
    if (nbytes == 0) return;  // torch's allocator hands out null for 0 bytes too
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, static_cast<size_t>(nbytes));
    if (rc != cudaSuccess) {
      cudaGetLastError();
      int device = -1;
      cudaGetDevice(&device);
      throw aoti_host::Error("cudaMalloc of " + std::to_string(nbytes) + " bytes on device " + std::to_string(device) +
                             " failed: " + cudaGetErrorString(rc));
    }
    *ret_ptr = p;
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_caching_allocator_raw_delete(void* ptr) {
  return aoti_host::shim::guarded("aoti_torch_cuda_caching_allocator_raw_delete", [&] {
    if (ptr == nullptr) return;
    const cudaError_t rc = cudaFree(ptr);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      throw aoti_host::Error(std::string("cudaFree failed: ") + cudaGetErrorString(rc) +
                             " (not a pointer aoti_torch_cuda_caching_allocator_raw_alloc returned?)");
    }
  });
}

}  // extern "C"
