// Devices, per-thread current streams, the stream-ordered allocator, device copies and the
// guard shims (aoti_torch_create_cuda_guard, ..._stream_guard, get_current_cuda_stream).
#include <cuda_runtime_api.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aoti_host/cuda/cuda.h"
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "shims/cpu_kernels.h"
#include "shims/cuda/arena.h"
#include "shims/cuda/cuda_util.h"
#include "shims/shim_util.h"

namespace aoti_host {
namespace cuda {
namespace {

constexpr int kMaxDevices = 64;

thread_local std::array<void*, kMaxDevices> t_current_stream{};  // nullptr: the legacy default stream
thread_local Arena* t_arena = nullptr;

std::once_flag g_pool_once[kMaxDevices];

// The device's default pool keeps what is freed (release threshold: never), so steady-state
// allocations are served from the pool in stream order without going back to the driver.
void configure_pool(int device) {
  std::call_once(g_pool_once[device], [device] {
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) {
      cudaGetLastError();
      log(LogLevel::Warning, "cuda: device %d has no default memory pool; cudaMallocAsync falls back to the driver",
          device);
      return;
    }
    uint64_t threshold = std::numeric_limits<uint64_t>::max();
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) cudaGetLastError();
  });
}

struct DeviceBlock {
  void* ptr;
  int device;
};

void free_block(void* ctx) {
  std::unique_ptr<DeviceBlock> b(static_cast<DeviceBlock*>(ctx));
  release(b->ptr, b->device);
}

void free_nothing(void*) {}  // arena memory lives as long as its graph

std::vector<int64_t> contiguous(const std::vector<int64_t>& sizes) { return Tensor::contiguous_strides(sizes); }

StridedSpec make_spec(const Tensor& dst, const Tensor& src) {
  const auto& ds = dst.sizes();
  const auto& ss = src.sizes();
  if (ds.size() > static_cast<size_t>(kMaxDims))
    throw Error("device copy of a " + std::to_string(ds.size()) + "-d tensor: at most " + std::to_string(kMaxDims) +
                " dimensions are supported");
  if (ss.size() > ds.size())
    throw Error("copy_: source of shape " + list_str(ss) + " does not broadcast to " + list_str(ds));
  StridedSpec spec{};
  spec.ndim = static_cast<int>(ds.size());
  const size_t lead = ds.size() - ss.size();
  for (size_t d = 0; d < ds.size(); ++d) {
    spec.sizes[d] = ds[d];
    spec.dst_strides[d] = dst.strides()[d];
    if (d < lead) {
      spec.src_strides[d] = 0;
    } else {
      const int64_t s = ss[d - lead];
      if (s != ds[d] && s != 1)
        throw Error("copy_: source of shape " + list_str(ss) + " does not broadcast to " + list_str(ds));
      spec.src_strides[d] = s == 1 && ds[d] != 1 ? 0 : src.strides()[d - lead];
    }
  }
  return spec;
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous();
}

// Device-side copy where both live on the device (or src is pinned/host memory the kernel can't read:
// never here; host sides are staged by copy()).
void device_to_device(Tensor& dst, const Tensor& src, cudaStream_t stream) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (same_dense_layout(dst, src)) {
    AOTI_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(n) * dst.itemsize(),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  launch_strided_copy(dst.data_ptr(), src.data_ptr(), make_spec(dst, src), n, dst.itemsize(), stream);
}

}  // namespace

void check(int code, const char* what) {
  if (code == cudaSuccess) return;
  const auto err = static_cast<cudaError_t>(code);
  cudaGetLastError();  // clear a sticky-free error so the next call starts clean
  throw Error(std::string(what) + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

// Read once: the visible devices are fixed when the CUDA runtime initialises (CUDA_VISIBLE_DEVICES is read
// then), and every tensor made from a caller's device pointer checks its index against it.
namespace {
struct Visible {
  int count = 0;
  std::string why_none;  // the CUDA runtime's reason when it found no device
};

const Visible& visible() {
  static const Visible v = [] {
    Visible out;
    const cudaError_t rc = cudaGetDeviceCount(&out.count);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      out.count = 0;
      out.why_none = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    }
    return out;
  }();
  return v;
}
}  // namespace

int device_count() { return visible().count; }

void require_device(int32_t device_index, const char* what) {
  const Visible& v = visible();
  if (device_index >= 0 && device_index < v.count && device_index < kMaxDevices) return;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string mask = env != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + env + ")" : "";
  const std::string dev = "cuda:" + std::to_string(device_index);
  if (v.count == 0)
    throw Error(std::string(what) + ": " + dev + ": this process sees no CUDA device" + mask +
                    (v.why_none.empty() ? "" : " (" + v.why_none + ")") +
                    "; run on a host with a GPU and its driver, or load the program on the cpu",
                AOTI_HOST_NOT_SUPPORTED);
  if (device_index >= kMaxDevices)
    throw Error(std::string(what) + ": " + dev + ": this runtime supports device indices below " +
                    std::to_string(kMaxDevices), AOTI_HOST_INVALID_ARGUMENT);
  const std::string range = v.count == 1 ? "cuda:0 only" : "cuda:0 to cuda:" + std::to_string(v.count - 1);
  throw Error(std::string(what) + ": " + dev + " does not exist: this process sees " + std::to_string(v.count) +
                  " CUDA device" + (v.count == 1 ? "" : "s") + mask + ", " + range +
                  "; use one of those, or make the GPU visible (CUDA_VISIBLE_DEVICES; `nvidia-smi -L` lists the "
                  "host's GPUs)",
              AOTI_HOST_INVALID_ARGUMENT);
}

int current_device() {
  int d = 0;
  AOTI_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) { AOTI_CUDA_CHECK(cudaSetDevice(device)); }

OnDevice::OnDevice(int device) : prev_(current_device()), device_(device) {
  if (prev_ != device_) set_device(device_);
}

OnDevice::~OnDevice() {
  if (prev_ != device_ && cudaSetDevice(prev_) != cudaSuccess) cudaGetLastError();
}

void* current_stream(int device) {
  if (device < 0) device = current_device();
  return t_current_stream.at(static_cast<size_t>(device));
}

void set_current_stream(int device, void* stream) {
  if (device < 0) device = current_device();
  t_current_stream.at(static_cast<size_t>(device)) = stream;
}

void set_thread_arena(Arena* arena) { t_arena = arena; }

void* allocate(size_t nbytes, int device) {
  if (t_arena != nullptr) return t_arena->allocate(nbytes);
  configure_pool(device);
  const size_t n = nbytes == 0 ? 1 : nbytes;  // a distinct non-null pointer for empty tensors
  // The stream (the legacy default one unless a guard set another) is the device's: that device current.
  const OnDevice on(device);
  void* p = nullptr;
  const cudaError_t rc = cudaMallocAsync(&p, n, stream_of(device));
  if (rc != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("cuda: cannot allocate " + std::to_string(nbytes) + " bytes on device " + std::to_string(device) +
                ": " + cudaGetErrorString(rc) + " (" + std::to_string(free_b >> 20) + " MiB free of " +
                std::to_string(total_b >> 20) + ")");
  }
  return p;
}

void release(void* ptr, int device) {
  if (ptr == nullptr) return;
  if (t_arena != nullptr && t_arena->defer_free(ptr, device)) return;
  // Ordered after the work queued so far on this thread's current stream of the memory's device (the stream
  // that used it; the legacy default one orders after every blocking stream of that device, a program's
  // included), so that device is current for the call. Never throws (deleters call it).
  int prev = device;
  if (cudaGetDevice(&prev) != cudaSuccess) cudaGetLastError(), prev = device;
  if (prev != device && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
  const cudaError_t rc = cudaFreeAsync(ptr, static_cast<cudaStream_t>(t_current_stream[static_cast<size_t>(device)]));
  if (prev != device && cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
  if (rc != cudaSuccess) {
    cudaGetLastError();
    log(LogLevel::Error, "cuda: cudaFreeAsync(%p) on device %d failed: %s", ptr, device, cudaGetErrorString(rc));
  }
}

void* allocate_for_tensor(size_t nbytes, int device, void (**deleter)(void*), void** ctx) {
  if (t_arena != nullptr) {
    *deleter = free_nothing;
    *ctx = nullptr;
    return t_arena->allocate(nbytes);
  }
  void* p = allocate(nbytes, device);
  *deleter = free_block;
  *ctx = new DeviceBlock{p, device};
  return p;
}

void copy(Tensor& dst, const Tensor& src) {
  const bool dst_dev = dst.device_type() == device_code::kCUDA;
  const bool src_dev = src.device_type() == device_code::kCUDA;
  const int device = dst_dev ? dst.device_index() : src.device_index();
  const OnDevice on(device);  // kernels launch on the current device; its stream orders the copy
  cudaStream_t stream = stream_of(device);
  if (dst.dtype() != src.dtype()) {  // converted on the device; a host side first goes to or comes from it
    if (dst_dev && src_dev) {
      if (dst.device_index() != src.device_index())
        throw Error("copy_ between cuda devices " + std::to_string(src.device_index()) + " and " +
                    std::to_string(dst.device_index()) + " is not supported");
      launch_convert_copy(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), make_spec(dst, src), dst.numel(),
                          stream);
    } else if (dst_dev) {
      std::unique_ptr<Tensor> up(
          Tensor::empty_strided(src.dtype(), src.sizes(), contiguous(src.sizes()), device_code::kCUDA, device));
      copy(*up, src);
      copy(dst, *up);
    } else {
      std::unique_ptr<Tensor> conv(
          Tensor::empty_strided(dst.dtype(), src.sizes(), contiguous(src.sizes()), device_code::kCUDA, device));
      copy(*conv, src);
      copy(dst, *conv);
    }
    return;
  }
  if (dst_dev && src_dev) {
    if (dst.device_index() != src.device_index())
      throw Error("copy_ between cuda devices " + std::to_string(src.device_index()) + " and " +
                  std::to_string(dst.device_index()) + " is not supported");
    device_to_device(dst, src, stream);
    return;
  }
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (src.sizes() != dst.sizes())
    throw Error("copy_ between host and device needs equal shapes, got " + list_str(src.sizes()) + " -> " +
                list_str(dst.sizes()));
  const size_t bytes = static_cast<size_t>(n) * dst.itemsize();
  if (dst_dev) {  // host -> device
    std::unique_ptr<Tensor> host_c;
    const Tensor* s = &src;
    if (!src.is_contiguous()) s = (host_c.reset(src.clone_contiguous()), host_c.get());
    if (dst.is_contiguous()) {
      AOTI_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), s->data_ptr(), bytes, cudaMemcpyHostToDevice, stream));
    } else {
      std::unique_ptr<Tensor> dev_c(Tensor::empty_strided(dst.dtype(), dst.sizes(), contiguous(dst.sizes()),
                                                          device_code::kCUDA, device));
      AOTI_CUDA_CHECK(cudaMemcpyAsync(dev_c->data_ptr(), s->data_ptr(), bytes, cudaMemcpyHostToDevice, stream));
      device_to_device(dst, *dev_c, stream);
    }
    // The host buffer may go away when we return: a pageable source has already been staged by the
    // driver when cudaMemcpyAsync returns, a pinned one has not, so wait for that one only.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, s->data_ptr()) != cudaSuccess) {
      cudaGetLastError();
      attr.type = cudaMemoryTypeHost;
    }
    if (attr.type != cudaMemoryTypeUnregistered) AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  // device -> host
  std::unique_ptr<Tensor> dev_c;
  const Tensor* s = &src;
  if (!src.is_contiguous()) {
    dev_c.reset(Tensor::empty_strided(src.dtype(), src.sizes(), contiguous(src.sizes()), device_code::kCUDA, device));
    device_to_device(*dev_c, src, stream);
    s = dev_c.get();
  }
  if (dst.is_contiguous()) {
    AOTI_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), s->data_ptr(), bytes, cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    std::unique_ptr<Tensor> host_c(Tensor::empty_strided(dst.dtype(), dst.sizes(), contiguous(dst.sizes())));
    AOTI_CUDA_CHECK(cudaMemcpyAsync(host_c->data_ptr(), s->data_ptr(), bytes, cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    aoti_host::cpu::copy(dst, *host_c);
  }
}

void stream_wait(void* stream, void* after) {
  if (stream == after) return;
  cudaEvent_t ev = nullptr;
  AOTI_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t rc = cudaEventRecord(ev, static_cast<cudaStream_t>(after));
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev, 0);
  cudaEventDestroy(ev);  // released once the wait is satisfied
  check(rc, "cudaEventRecord + cudaStreamWaitEvent");
}

Tensor* clone_contiguous(const Tensor& t) {
  std::unique_ptr<Tensor> out(
      Tensor::empty_strided(t.dtype(), t.sizes(), contiguous(t.sizes()), t.device_type(), t.device_index()));
  copy(*out, t);
  return out.release();
}

Tensor* to_host(const Tensor& t) {
  std::unique_ptr<Tensor> out(Tensor::empty_strided(t.dtype(), t.sizes(), contiguous(t.sizes())));
  copy(*out, t);
  return out.release();
}

void zero(Tensor& t) {
  const size_t n = compute_storage_nbytes(t.sizes(), t.strides(), t.itemsize(), 0);
  if (n == 0) return;
  const OnDevice on(t.device_index());
  if (t.is_contiguous()) {
    AOTI_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, n, stream_of(t.device_index())));
    return;
  }
  std::unique_ptr<Tensor> z(Tensor::empty_strided(t.dtype(), t.sizes(), contiguous(t.sizes()), t.device_type(),
                                                  t.device_index()));
  AOTI_CUDA_CHECK(cudaMemsetAsync(z->data_ptr(), 0, static_cast<size_t>(t.numel()) * t.itemsize(),
                                  stream_of(t.device_index())));
  copy(t, *z);
}

}  // namespace cuda
}  // namespace aoti_host

// ---- guard shims ----
namespace {

using aoti_host::shim::guarded;

struct DeviceGuard {
  int original;
  int current;
};

struct StreamGuard {
  int device;
  int original_device;
  void* original_stream;
};

}  // namespace

struct CUDAGuardOpaque;

extern "C" {

// Sets the current device; the guard restores the one it found.
AOTI_HOST_API AOTITorchError aoti_torch_create_cuda_guard(int32_t device_index, CUDAGuardHandle* ret_guard) {
  return guarded("aoti_torch_create_cuda_guard", [&] {
    if (ret_guard == nullptr) throw aoti_host::Error("output pointer 'ret_guard' is null");
    aoti_host::cuda::require_device(device_index, "aoti_torch_create_cuda_guard");
    auto g = std::make_unique<DeviceGuard>();
    g->original = aoti_host::cuda::current_device();
    g->current = device_index;
    if (device_index != g->original) aoti_host::cuda::set_device(device_index);
    *ret_guard = reinterpret_cast<CUDAGuardHandle>(g.release());
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_delete_cuda_guard(CUDAGuardHandle guard) {
  return guarded("aoti_torch_delete_cuda_guard", [&] {
    if (guard == nullptr) throw aoti_host::Error("argument 'guard' is null");
    std::unique_ptr<DeviceGuard> g(reinterpret_cast<DeviceGuard*>(guard));
    if (g->current != g->original) aoti_host::cuda::set_device(g->original);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cuda_guard_set_index(CUDAGuardHandle guard, int32_t device_index) {
  return guarded("aoti_torch_cuda_guard_set_index", [&] {
    if (guard == nullptr) throw aoti_host::Error("argument 'guard' is null");
    aoti_host::cuda::require_device(device_index, "aoti_torch_cuda_guard_set_index");
    auto* g = reinterpret_cast<DeviceGuard*>(guard);
    aoti_host::cuda::set_device(device_index);
    g->current = device_index;
  });
}

// Makes `stream` the thread's current stream of `device_index` (and that device current), as
// c10::cuda::CUDAStreamGuard does; deleting the guard restores both.
AOTI_HOST_API AOTITorchError aoti_torch_create_cuda_stream_guard(void* stream, int32_t device_index,
                                                                 CUDAStreamGuardHandle* ret_guard) {
  return guarded("aoti_torch_create_cuda_stream_guard", [&] {
    if (ret_guard == nullptr) throw aoti_host::Error("output pointer 'ret_guard' is null");
    aoti_host::cuda::require_device(device_index, "aoti_torch_create_cuda_stream_guard");
    auto g = std::make_unique<StreamGuard>();
    g->device = device_index;
    g->original_device = aoti_host::cuda::current_device();
    g->original_stream = aoti_host::cuda::current_stream(device_index);
    if (device_index != g->original_device) aoti_host::cuda::set_device(device_index);
    aoti_host::cuda::set_current_stream(device_index, stream);
    *ret_guard = reinterpret_cast<CUDAStreamGuardHandle>(g.release());
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_delete_cuda_stream_guard(CUDAStreamGuardHandle guard) {
  return guarded("aoti_torch_delete_cuda_stream_guard", [&] {
    if (guard == nullptr) throw aoti_host::Error("argument 'guard' is null");
    std::unique_ptr<StreamGuard> g(reinterpret_cast<StreamGuard*>(guard));
    aoti_host::cuda::set_current_stream(g->device, g->original_stream);
    if (g->device != g->original_device) aoti_host::cuda::set_device(g->original_device);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream) {
  return guarded("aoti_torch_get_current_cuda_stream", [&] {
    if (ret_stream == nullptr) throw aoti_host::Error("output pointer 'ret_stream' is null");
    aoti_host::cuda::require_device(device_index, "aoti_torch_get_current_cuda_stream");
    *ret_stream = aoti_host::cuda::current_stream(device_index);
  });
}

}  // extern "C"
