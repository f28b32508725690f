// Shared by the CUDA op kernel entries of this folder (ops.h): argument checks, the out-of-range flag the
// index kernels raise, and the lines along a dimension the sort and scan kernels walk.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/tensor.h"
#include "shims/cuda/cuda_util.h"
#include "shims/cuda/ops/kernels.h"

namespace cu = aoti_host::cuda;
namespace dc = aoti_host::dtype_code;

namespace aoti_host {
namespace cuda {

using Shape = std::vector<int64_t>;
using Owned = std::unique_ptr<Tensor>;

inline void require_dtype(const Tensor& t, int32_t dt, const char* name) {
  if (t.dtype() != dt)
    throw Error(std::string("'") + name + "' has dtype " + aoti_host::dtype_name(t.dtype()) + ", expected " +
                aoti_host::dtype_name(dt));
}

// cuda_util.h's require_cuda, for an op whose messages name it.
inline void require_cuda(const Tensor& t, const char* name, const char* op, int device) {
  if (t.device_type() != aoti_host::device_code::kCUDA || t.device_index() != device)
    throw Error(std::string(op) + ": '" + name + "' is on " + aoti_host::device_type_name(t.device_type()) + ":" +
                std::to_string(t.device_index()) + ", expected cuda:" + std::to_string(device));
}

// dim wrapped into [0, ndim) (a 0-d tensor takes dims -1 and 0).
inline int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    throw Error("dim " + std::to_string(dim) + " is out of range for a " + std::to_string(ndim) + "-d tensor");
  return dim < 0 ? dim + n : dim;
}

// A device flag the kernels raise on an out-of-range index (they skip such an element, so memory stays
// safe). Read back after the launch, except while a graph is captured (no synchronisation is allowed
// then; a bad index in a replay is skipped without an error).
class BadIndexFlag {
 public:
  BadIndexFlag(int device, cudaStream_t stream) : stream_(stream) {
    t_.reset(new_cuda(dc::kInt32, {1}, device));
    AOTI_CUDA_CHECK(cudaMemsetAsync(t_->data_ptr(), 0, sizeof(int), stream));
  }
  int* ptr() const { return static_cast<int*>(t_->data_ptr()); }
  void check(const std::string& what) const {
    if (capturing(stream_)) return;
    int v = 0;
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&v, ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (v != 0) throw Error(what);
  }

 private:
  cudaStream_t stream_;
  Owned t_;
};

// The lines along `dim` of tensors with the given sizes (0-d: one line of one element).
LineSpec make_lines(const Shape& sizes, int64_t dim, const std::vector<const Shape*>& strides);

}  // namespace cuda
}  // namespace aoti_host
