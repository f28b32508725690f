// The frontend's dynamic loading over the runtime's one libcudnn (cudnn_fe.h).
#if defined(AOTI_HAVE_CUDNN_FRONTEND)
#include "shims/cuda/cudnn_fe.h"

#include <array>
#include <cstdlib>
#include <mutex>

#include "aoti_host/error.h"
#include "shims/cuda/cuda_util.h"
#include "shims/cuda/cudnn_conv.h"

// The frontend resolves every backend call with dlsym in this handle (its dynamic-loading mode declares it
// and leaves its definition to the program).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace aoti_host {
namespace cuda {
namespace cudnn_fe {

bool ready(std::string* why) {
  void* dl = cudnn_library(why);
  if (dl == nullptr) return false;
  static std::once_flag once;
  std::call_once(once, [dl] {
    // The frontend opens libcudart itself for the few runtime calls it makes, taking the first of libcudart.so.12
    // and .13 the loader finds; name the one this runtime links (already loaded: the same library), unless the
    // user named one.
    const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), 0);
    fe::cudnn_dlhandle = dl;
  });
  return true;
}

size_t version() { return fe::detail::get_backend_version(); }

cudnnHandle_t handle(int device, cudaStream_t stream) {
  struct Owned {
    cudnnHandle_t h = nullptr;
    ~Owned() {
      if (h != nullptr) fe::detail::destroy_handle(h);
    }
  };
  thread_local std::array<Owned, 64> handles;
  Owned& slot = handles.at(static_cast<size_t>(device));
  if (slot.h == nullptr) {
    const OnDevice on(device);  // a handle belongs to the device current when it is created
    const cudnnStatus_t st = fe::detail::create_handle(&slot.h);
    if (st != CUDNN_STATUS_SUCCESS) {
      slot.h = nullptr;
      throw Error(std::string("cudnnCreate failed: ") + fe::detail::get_error_string(st));
    }
  }
  const cudnnStatus_t st = fe::detail::set_stream(slot.h, stream);
  if (st != CUDNN_STATUS_SUCCESS) throw Error(std::string("cudnnSetStream failed: ") + fe::detail::get_error_string(st));
  return slot.h;
}

}  // namespace cudnn_fe
}  // namespace cuda
}  // namespace aoti_host
#endif
