// Scaled-dot-product attention through cuDNN's fused SDPA (cudnn-frontend's graph API, cudnn_fe.h), the fast path
// of the CUDA attention entries (ops/attention.cpp); the runtime's own kernels stay as the fallback.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "shims/cuda/ops/kernels.h"

namespace aoti_host {
namespace cuda {

// Runs attention as `spec` describes it (sizes, strides in elements, scale, bias, causal alignment) through cuDNN
// into `out` and, where `lse` is non-null, the float32 logsumexp rows of `spec.lse_st`, on `stream`. Returns
// false, having launched nothing, where the path is not used: AOTI_HOST_CUDNN_SDPA=off, a runtime built without
// cudnn-frontend's headers, cuDNN not loaded (each said once in the log), or a problem cuDNN refuses (a dtype,
// layout, head size, mask: said once per problem, naming why); the caller then runs its own kernel. Throws
// where AOTI_HOST_CUDNN_SDPA is not auto|on|off, where it is on and the path is unavailable (not built, cuDNN
// missing), and where cuDNN fails a call after it ran the same plan before. Reads AOTI_HOST_CUDNN_SDPA on every
// call. Plans are built once per problem (the first call, outside or inside graph capture) and cached.
bool cudnn_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                     const void* bias, const AttentionSpec& spec, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace aoti_host
