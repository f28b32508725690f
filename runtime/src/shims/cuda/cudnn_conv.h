// Convolutions through cuDNN (loaded at run time, cudnn_api.h), the CUDA fallback's fast path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "aoti_host/tensor.h"
#include "shims/cuda/cuda_util.h"

namespace aoti_host {
namespace cuda {

// Runs the convolution `spec` describes (forward, or transposed through cuDNN's backward-data pass, as
// ATen does) into `out` (already allocated with the output's sizes and strides) on `stream`. Returns false,
// writing nothing, where cuDNN is not loaded (AOTI_HOST_CUDNN=off, or the library is missing: named once
// in the log) or refuses this shape, dtype or layout (logged once per shape); the caller then runs its own
// kernel. Throws where cuDNN fails after accepting the shape, or where AOTI_HOST_CUDNN=on and it is missing.
bool cudnn_convolution(const Tensor& in, const Tensor& weight, const Tensor* bias, Tensor& out, const ConvSpec& spec,
                       cudaStream_t stream);

}  // namespace cuda
}  // namespace aoti_host
