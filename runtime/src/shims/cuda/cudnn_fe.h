// cuDNN's C++ graph API (NVIDIA's header-only cudnn-frontend) for the runtime's cuDNN callers: include this
// header, never <cudnn_frontend.h> directly. Only in runtimes built with AOTI_HAVE_CUDNN_FRONTEND (SCons defines
// it, and NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, for every translation unit where it found the frontend's and
// cuDNN's headers: docs/scons.md). The frontend then resolves every cuDNN call with dlsym in the one libcudnn
// that cudnn_conv.cpp loads (cudnn_library()), so the runtime never links cuDNN and both APIs share a library.
#pragma once

#if !defined(AOTI_HAVE_CUDNN_FRONTEND) || !defined(NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
#error "shims/cuda/cudnn_fe.h needs AOTI_HAVE_CUDNN_FRONTEND and NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (set by SCons)"
#endif

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <string>

namespace aoti_host {
namespace cuda {
namespace cudnn_fe {

namespace fe = ::cudnn_frontend;

// Loads cuDNN (cudnn_library(): its search order and AOTI_HOST_CUDNN*) and points the frontend at it. Returns
// false where cuDNN is not used, with `why` saying why and naming the fix. Throws as cudnn_library() does (a
// bad AOTI_HOST_CUDNN value; AOTI_HOST_CUDNN=on with cuDNN missing).
bool ready(std::string* why);

// The version of the loaded cuDNN (cudnnGetVersion, e.g. 91900); ready() must have returned true.
size_t version();

// The calling thread's cuDNN handle for `device`, bound to `stream` (one handle per thread and device: cuDNN
// handles are not shared between threads); ready() must have returned true. Throws where cudnnCreate fails.
cudnnHandle_t handle(int device, cudaStream_t stream);

}  // namespace cudnn_fe
}  // namespace cuda
}  // namespace aoti_host
