// Convolutions through cuDNN (loaded at run time, cudnn_api.h), the CUDA fallback's fast path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "aoti_host/tensor.h"
#include "shims/cuda/cuda_util.h"

namespace aoti_host {
namespace cuda {

// How an AOTI_HOST_CUDNN* variable selects a cuDNN path: auto (use it where it loads and accepts the problem),
// on (its absence is an error), off (never used).
enum class CudnnMode { kAuto, kOn, kOff };

// Reads the environment variable `var` on every call: unset, empty or auto -> kAuto; on or 1 -> kOn; off or 0 ->
// kOff. Throws for any other value, naming it: "<var>=<value> is not one of auto|on|off; unset it to <hint>".
CudnnMode cudnn_mode_from_env(const char* var, const char* hint);

// The cuDNN library the convolutions load, shared with the runtime's other cuDNN callers (the frontend's,
// cudnn_fe.h), so that every path uses one libcudnn: loaded at the first call from any of them, with
// the search order, AOTI_HOST_CUDNN and AOTI_HOST_CUDNN_LIBRARY of cudnn_conv.cpp, and said once in the log.
// Returns its dlopen handle, or null where cuDNN is not used (`why`, when given, says why and names the fix).
// Throws where AOTI_HOST_CUDNN is not auto|on|off, or is on and cuDNN did not load.
void* cudnn_library(std::string* why);

// Runs the convolution `spec` describes (forward, or transposed through cuDNN's backward-data pass, as
// ATen does) into `out` (already allocated with the output's sizes and strides) on `stream`. Returns false,
// writing nothing, where cuDNN is not loaded (AOTI_HOST_CUDNN=off, or the library is missing: named once
// in the log) or refuses this shape, dtype or layout (logged once per shape); the caller then runs its own
// kernel. Throws where cuDNN fails after accepting the shape, or where AOTI_HOST_CUDNN=on and it is missing.
bool cudnn_convolution(const Tensor& in, const Tensor& weight, const Tensor* bias, Tensor& out, const ConvSpec& spec,
                       cudaStream_t stream);

}  // namespace cuda
}  // namespace aoti_host
