// Shared by the CUDA translation units: error checks, the per-thread stream, kernel entry points.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/cuda/cuda.h"
#include "aoti_host/error.h"
#include "aoti_host/tensor.h"

#define AOTI_CUDA_CHECK(expr) ::aoti_host::cuda::check(static_cast<int>(expr), #expr)

namespace aoti_host {
namespace cuda {

inline cudaStream_t stream_of(int device) { return static_cast<cudaStream_t>(current_stream(device)); }

// Whether `stream` is capturing a CUDA graph (no allocation, no synchronisation allowed then).
inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  AOTI_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
  return st != cudaStreamCaptureStatusNone;
}

// Refuses a tensor argument that is not on CUDA device `device`, naming it.
inline void require_cuda(const Tensor& t, const char* name, int device) {
  if (t.device_type() != device_code::kCUDA || t.device_index() != device)
    throw Error(std::string("'") + name + "' is on " + device_type_name(t.device_type()) + ":" +
                std::to_string(t.device_index()) + ", expected cuda:" + std::to_string(device));
}

// An uninitialised tensor on CUDA device `device` (the fallback ops' outputs and scratch), owned by the caller.
inline Tensor* new_cuda(int32_t dtype, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                        int device) {
  return Tensor::empty_strided(dtype, sizes, strides, device_code::kCUDA, device);
}
inline Tensor* new_cuda(int32_t dtype, const std::vector<int64_t>& sizes, int device) {
  return new_cuda(dtype, sizes, Tensor::contiguous_strides(sizes), device);
}

// Up to this many dimensions in device kernels (copies and convolutions); more is refused by name.
constexpr int kMaxDims = 12;

struct StridedSpec {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

#ifdef __CUDACC__
// Element i of spec's index space (row-major over spec.sizes): its offsets, in elements, in dst and in src.
__device__ __forceinline__ void strided_offsets(const StridedSpec& spec, int64_t i, int64_t& dst, int64_t& src) {
  dst = 0, src = 0;
  for (int d = spec.ndim - 1; d >= 0; --d) {
    const int64_t idx = i % spec.sizes[d];
    i /= spec.sizes[d];
    dst += idx * spec.dst_strides[d];
    src += idx * spec.src_strides[d];
  }
}
#endif

// dst[i] = src[i] over a strided index space, elementwise of `itemsize` bytes (1, 2, 4, 8 or 16).
void launch_strided_copy(void* dst, const void* src, const StridedSpec& spec, int64_t numel, size_t itemsize,
                         cudaStream_t stream);

// The same with each element converted from src_dtype to dst_dtype as ATen's copy_ converts (bool, integer,
// floating and complex dtypes; others are refused by name).
void launch_convert_copy(void* dst, int32_t dst_dtype, const void* src, int32_t src_dtype, const StridedSpec& spec,
                         int64_t numel, cudaStream_t stream);

// transposed: weight is [c_in, c_out / groups, k...] and the input is scattered into the output
// (ATen's conv_transpose); in/out sizes are the given input and the computed output.
struct ConvSpec {
  int64_t n, c_in, c_out, groups;
  bool transposed;
  int64_t in_size[3], out_size[3], kernel[3], stride[3], padding[3], dilation[3];
  int64_t in_strides[5], w_strides[5], out_strides[5];  // n, c, d, h, w
  bool has_bias;
  int64_t bias_stride;
};

// Direct (or transposed) convolution (one thread per output element, gathering its inputs), accumulation in float (double for float64).
void launch_convolution(int32_t dtype, void* out, const void* in, const void* weight, const void* bias,
                        const ConvSpec& spec, cudaStream_t stream);

}  // namespace cuda
}  // namespace aoti_host
