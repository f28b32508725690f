// The spectral ops on CUDA: _fft_r2c and _fft_c2c through cuFFT, abs and angle of complex tensors,
// and the views permute, view_as_real and view_as_complex (what torch.stft, torch.fft.* and spectrogram
// front-ends lower to). Outputs get the layouts ATen's cuFFT path gives them (ops::cufft_*_strides), since
// plugins reinterpret returned tensors with the layout recorded at compile time.
//
// cuFFT is loaded on the first transform (dlopen of the sonames of providers.toml's cuFFT row, found through
// this library's RUNPATH, the loader's path or an already loaded copy, as torch's), so hosts whose plugins never
// transform need no cuFFT; `verify` checks the host's loader finds it for a plugin that calls these shims.
// Each transform runs as 1-d passes: the transformed dim is gathered innermost into a contiguous buffer (one
// strided copy), cuFFT transforms the batch of lines, and the result is copied into ATen's output layout.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/providers.h"
#include "shims/cpu/strided.h"
#include "shims/cuda/cuda_util.h"
#include "shims/cuda/ops/kernels.h"
#include "shims/cuda/ops/ops.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

using aoti_host::Error;
using aoti_host::Tensor;
namespace dc = aoti_host::dtype_code;
namespace cu = aoti_host::cuda;

namespace {

using cu::capturing;
using Shape = std::vector<int64_t>;
using Owned = std::unique_ptr<Tensor>;

// --- cuFFT, loaded on first use ------------------------------------------------------------------------
// The few entry points used, declared with cuFFT's C ABI (cufft.h; unchanged since CUDA 7): handles are
// ints, results ints (0: CUFFT_SUCCESS), complex values interleaved float/double pairs.
using cufftHandle = int;
constexpr int kR2C = 0x2a, kC2C = 0x29, kD2Z = 0x6a, kZ2Z = 0x69;
constexpr int kForward = -1, kInverse = 1;

struct Cufft {
  int (*plan_many)(cufftHandle*, int, int*, int*, int, int, int*, int, int, int, int);
  int (*set_stream)(cufftHandle, cudaStream_t);
  int (*exec_r2c)(cufftHandle, float*, void*);
  int (*exec_d2z)(cufftHandle, double*, void*);
  int (*exec_c2c)(cufftHandle, void*, void*, int);
  int (*exec_z2z)(cufftHandle, void*, void*, int);
  int (*destroy)(cufftHandle);
};

const char* cufft_status(int r) {
  switch (r) {
    case 1: return "CUFFT_INVALID_PLAN";
    case 2: return "CUFFT_ALLOC_FAILED (out of device memory)";
    case 3: return "CUFFT_INVALID_TYPE";
    case 4: return "CUFFT_INVALID_VALUE";
    case 5: return "CUFFT_INTERNAL_ERROR";
    case 6: return "CUFFT_EXEC_FAILED";
    case 7: return "CUFFT_SETUP_FAILED";
    case 8: return "CUFFT_INVALID_SIZE";
    case 10: return "CUFFT_INCOMPLETE_PARAMETER_LIST";
    case 11: return "CUFFT_INVALID_DEVICE";
    case 14: return "CUFFT_NO_WORKSPACE";
    case 15: return "CUFFT_NOT_IMPLEMENTED";
    case 16: return "CUFFT_NOT_SUPPORTED";
    default: return "an unknown cuFFT error";
  }
}

void cufft_check(int r, const char* what) {
  if (r != 0) throw Error(std::string(what) + " failed: " + cufft_status(r) + " (" + std::to_string(r) + ")");
}

const Cufft& cufft() {
  static std::once_flag once;
  static Cufft api{};
  static std::string error;
  std::call_once(once, [] {
    void* lib = nullptr;
    std::string tried;
    const char* const* sonames = nullptr;  // the cuFFT row of providers.toml (shims.toml: loads = "cuFFT")
    for (const auto& p : aoti_host::providers::kProviders)
      if (std::string(p.name) == "cuFFT") sonames = p.sonames;
    for (const char* const* name = sonames; name != nullptr && *name != nullptr && lib == nullptr; ++name) {
      lib = dlopen(*name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e != nullptr ? e : *name);
    }
    if (lib == nullptr) {
      error = "cuFFT could not be loaded (" + tried + "): this plugin computes FFTs on the GPU, which needs "
              "cuFFT 12 (CUDA 13). Install it (`pip install nvidia-cufft`, or the CUDA toolkit's libcufft) or put "
              "the folder holding libcufft.so.12 on LD_LIBRARY_PATH";
      return;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr && error.empty()) error = std::string("cuFFT was loaded but lacks ") + name;
      return p;
    };
    api.plan_many = reinterpret_cast<decltype(api.plan_many)>(sym("cufftPlanMany"));
    api.set_stream = reinterpret_cast<decltype(api.set_stream)>(sym("cufftSetStream"));
    api.exec_r2c = reinterpret_cast<decltype(api.exec_r2c)>(sym("cufftExecR2C"));
    api.exec_d2z = reinterpret_cast<decltype(api.exec_d2z)>(sym("cufftExecD2Z"));
    api.exec_c2c = reinterpret_cast<decltype(api.exec_c2c)>(sym("cufftExecC2C"));
    api.exec_z2z = reinterpret_cast<decltype(api.exec_z2z)>(sym("cufftExecZ2Z"));
    api.destroy = reinterpret_cast<decltype(api.destroy)>(sym("cufftDestroy"));
  });
  if (!error.empty()) throw Error(error);
  return api;
}

// Plans are made once per (device, stream, type, length, batch) and kept (at most kPlans unpinned ones, the
// least recently used dropped first): making one allocates, which a CUDA graph capture forbids, while
// executing one on the stream it was made for is capture-safe. A plan executed during a capture is pinned for
// good: the captured graph keeps using its work area. A plan's work area is its own, so plans are not shared
// between streams.
constexpr size_t kPlans = 64;
struct Plan {
  std::tuple<int, cudaStream_t, int, int, int> key;
  cufftHandle handle;
  bool pinned;
};

class Plans {
 public:
  // Runs exec(handle) with the plan for this transform, set to `stream`, under the cache's lock.
  template <class F>
  void with(int device, cudaStream_t stream, int type, int n, int batch, F&& exec) {
    const Cufft& api = cufft();
    const bool in_capture = capturing(stream);
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_tuple(device, stream, type, n, batch);
    auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.key == key; });
    if (it == plans_.end()) {
      if (in_capture)
        throw Error("an FFT of length " + std::to_string(n) + " (batch " + std::to_string(batch) + ") is first met "
                    "while a CUDA graph is captured, where cuFFT cannot make its plan (it allocates): run the "
                    "program once without capture first (the runtime's CUDA-graph mode does)");
      cufftHandle h = 0;
      int len = n;
      cufft_check(api.plan_many(&h, 1, &len, nullptr, 1, 0, nullptr, 1, 0, type, batch), "cufftPlanMany");
      plans_.push_front({key, h, false});
      evict(api);
      it = plans_.begin();
    } else {
      plans_.splice(plans_.begin(), plans_, it);  // most recently used first
      it = plans_.begin();
    }
    it->pinned = it->pinned || in_capture;
    cufft_check(api.set_stream(it->handle, stream), "cufftSetStream");
    exec(it->handle);
  }

 private:
  void evict(const Cufft& api) {
    size_t unpinned = 0;
    for (const Plan& p : plans_) unpinned += p.pinned ? 0 : 1;
    for (auto it = plans_.end(); unpinned > kPlans && it != plans_.begin();) {
      --it;
      if (it->pinned) continue;
      api.destroy(it->handle);
      it = plans_.erase(it);
      --unpinned;
    }
  }

  std::mutex mu_;
  std::list<Plan> plans_;
};

Plans& plans() {
  static Plans* p = new Plans();  // never destroyed: plans must not be freed after the CUDA context is gone
  return *p;
}

// --- layouts and copies ----------------------------------------------------------------------------------

using cu::new_cuda;

size_t part_size(int32_t complex_dtype) { return complex_dtype == dc::kComplex64 ? 4 : 8; }
int32_t part_dtype(int32_t complex_dtype) { return complex_dtype == dc::kComplex64 ? dc::kFloat32 : dc::kFloat64; }

// The index space `sizes` with an element stride per tensor (dst, src), for the strided kernels.
cu::StridedSpec strided_spec(const Shape& sizes, const Shape& dst_st, const Shape& src_st) {
  if (sizes.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  cu::StridedSpec spec{};
  spec.ndim = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d)
    spec.sizes[d] = sizes[d], spec.dst_strides[d] = dst_st[d], spec.src_strides[d] = src_st[d];
  return spec;
}

// dst[i] = src[i] over `sizes`, each with its own element strides (itemsize bytes an element).
void copy_strided(void* dst, const Shape& dst_st, const void* src, const Shape& src_st, const Shape& sizes,
                  size_t itemsize, cudaStream_t stream) {
  const int64_t numel = aoti_host::ops::numel_of(sizes);
  const cu::StridedSpec spec = strided_spec(sizes, dst_st, src_st);
  if (numel > 0) cu::launch_strided_copy(dst, src, spec, numel, itemsize, stream);
}

Shape pick(const Shape& v, const Shape& order) {
  Shape r;
  for (int64_t d : order) r.push_back(v[static_cast<size_t>(d)]);
  return r;
}

// A contiguous complex work buffer holding the logical tensor of `sizes` with its dims stored in `order`
// (outermost first).
struct Work {
  Owned t;
  Shape order;
  Shape sizes;  // logical, in dim order

  // The element strides of the logical dims.
  Shape strides() const {
    const Shape st = Tensor::contiguous_strides(pick(sizes, order));
    Shape r(sizes.size(), 0);
    for (size_t i = 0; i < order.size(); ++i) r[static_cast<size_t>(order[i])] = st[i];
    return r;
  }
};

int checked_int(int64_t v, const char* what) {
  if (v > INT_MAX) throw Error(std::string(what) + " " + std::to_string(v) + " exceeds cuFFT's limit of " +
                               std::to_string(INT_MAX));
  return static_cast<int>(v);
}

// Runs `one(offset_in_lines, lines)` over all `batch` lines in chunks cuFFT's int sizes hold.
template <class F>
void in_chunks(int64_t batch, int64_t elems_per_line, F&& one) {
  const int64_t most = std::max<int64_t>(1, INT_MAX / std::max<int64_t>(1, elems_per_line));
  for (int64_t b = 0; b < batch; b += most) one(b, std::min(most, batch - b));
}

// In-place complex transform along `dim` of w, which is first re-laid out with dim innermost if it is not.
void c2c_pass(Work& w, int64_t dim, bool forward, int device, cudaStream_t stream) {
  const int32_t dt = w.t->dtype();
  const size_t item = 2 * part_size(dt);
  if (w.order.back() != dim) {
    Shape order;
    for (int64_t d : w.order)
      if (d != dim) order.push_back(d);
    order.push_back(dim);
    Work moved{Owned(new_cuda(dt, w.sizes, Tensor::contiguous_strides(w.sizes), device)), order, w.sizes};
    copy_strided(moved.t->data_ptr(), moved.strides(), w.t->data_ptr(), w.strides(), w.sizes, item, stream);
    w = std::move(moved);
  }
  const int64_t n = w.sizes[static_cast<size_t>(dim)];
  const int64_t batch = w.t->numel() / n;
  const int len = checked_int(n, "transform length");
  auto* base = static_cast<char*>(w.t->data_ptr());
  const bool dbl = dt == dc::kComplex128;
  in_chunks(batch, n, [&](int64_t first, int64_t lines) {
    void* p = base + static_cast<size_t>(first * n) * item;
    plans().with(device, stream, dbl ? kZ2Z : kC2C, len, static_cast<int>(lines), [&](cufftHandle h) {
      const Cufft& api = cufft();
      const int dir = forward ? kForward : kInverse;
      cufft_check(dbl ? api.exec_z2z(h, p, p, dir) : api.exec_c2c(h, p, p, dir), dbl ? "cufftExecZ2Z" : "cufftExecC2C");
    });
  });
}

// Writes w into out (ATen's layout), scaled.
void finish(const Work& w, Tensor& out, double scale, cudaStream_t stream) {
  const int32_t dt = out.dtype();
  copy_strided(out.data_ptr(), out.strides(), w.t->data_ptr(), w.strides(), out.sizes(), 2 * part_size(dt), stream);
  // out is dense (a permutation of a contiguous layout): scale all its parts at once
  if (scale != 1.0) cu::launch_scale(part_dtype(dt), out.data_ptr(), 2 * out.numel(), scale, stream);
}

// self (real) as a contiguous complex buffer in dim order, imaginary parts zero.
Work complex_copy(const Tensor& self, int32_t cdt, int device, cudaStream_t stream) {
  Shape order(self.sizes().size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  Work w{Owned(new_cuda(cdt, self.sizes(), Tensor::contiguous_strides(self.sizes()), device)), order, self.sizes()};
  AOTI_CUDA_CHECK(cudaMemsetAsync(w.t->data_ptr(), 0, static_cast<size_t>(w.t->numel()) * w.t->itemsize(), stream));
  Shape dst = w.strides();
  for (auto& s : dst) s *= 2;  // the real parts, counted in parts
  copy_strided(w.t->data_ptr(), dst, self.data_ptr(), self.strides(), self.sizes(), part_size(cdt), stream);
  return w;
}

Tensor* fft_r2c(const Tensor& self, const Shape& dim, int64_t normalization, bool onesided) {
  const int device = self.device_index();
  const int32_t dt = self.dtype();
  if (dt != dc::kFloat32 && dt != dc::kFloat64)
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) +
                "; expected float32 or float64 (half-precision transforms, with complex32 results, are not supported)");
  const Shape dims = aoti_host::ops::fft_wrap_dims(self, dim);
  const double scale = aoti_host::ops::fft_norm_scale(self.sizes(), dims, normalization);
  const int32_t cdt = dt == dc::kFloat32 ? dc::kComplex64 : dc::kComplex128;
  const auto last = static_cast<size_t>(dims.back());
  Shape out_sizes = self.sizes();
  if (onesided) out_sizes[last] = self.sizes()[last] / 2 + 1;
  const size_t csize = 2 * aoti_host::element_size(dt);
  Owned out(new_cuda(cdt, out_sizes, aoti_host::ops::cufft_r2c_strides(self.sizes(), self.strides(), dims, onesided),
                     device));
  if (out->numel() == 0) return out.release();
  const cudaStream_t stream = cu::stream_of(device);
  if (!onesided) {  // the two-sided spectrum: the signal as complex, transformed whole
    Work w = complex_copy(self, cdt, device, stream);
    for (int64_t d : dims) c2c_pass(w, d, true, device, stream);
    finish(w, *out, scale, stream);
    return out.release();
  }
  // the last dim: a real-to-complex transform of the signal gathered with that dim innermost
  Shape order;
  for (size_t d = 0; d < self.sizes().size(); ++d)
    if (d != last) order.push_back(static_cast<int64_t>(d));
  order.push_back(static_cast<int64_t>(last));
  const Shape psizes = pick(self.sizes(), order);
  Owned real(new_cuda(dt, psizes, Tensor::contiguous_strides(psizes), device));
  copy_strided(real->data_ptr(), real->strides(), self.data_ptr(), pick(self.strides(), order), psizes,
               aoti_host::element_size(dt), stream);
  Work w{Owned(new_cuda(cdt, out_sizes, Tensor::contiguous_strides(out_sizes), device)), order, out_sizes};
  const int64_t n = self.sizes()[last], half = out_sizes[last];
  const int64_t batch = self.numel() / n;
  const int len = checked_int(n, "transform length");
  const bool dbl = dt == dc::kFloat64;
  in_chunks(batch, n, [&](int64_t first, int64_t lines) {
    char* in = static_cast<char*>(real->data_ptr()) + static_cast<size_t>(first * n) * aoti_host::element_size(dt);
    char* o = static_cast<char*>(w.t->data_ptr()) + static_cast<size_t>(first * half) * csize;
    plans().with(device, stream, dbl ? kD2Z : kR2C, len, static_cast<int>(lines), [&](cufftHandle h) {
      const Cufft& api = cufft();
      cufft_check(dbl ? api.exec_d2z(h, reinterpret_cast<double*>(in), o)
                      : api.exec_r2c(h, reinterpret_cast<float*>(in), o),
                  dbl ? "cufftExecD2Z" : "cufftExecR2C");
    });
  });
  for (size_t i = 0; i + 1 < dims.size(); ++i) c2c_pass(w, dims[i], true, device, stream);
  finish(w, *out, scale, stream);
  return out.release();
}

Tensor* fft_c2c(const Tensor& self, const Shape& dim, int64_t normalization, bool forward) {
  const int device = self.device_index();
  const int32_t dt = self.dtype();
  if (dt != dc::kComplex64 && dt != dc::kComplex128)
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) + "; expected complex64 or complex128");
  const cudaStream_t stream = cu::stream_of(device);
  if (dim.empty()) {  // ATen: a copy in self's layout
    Owned out(new_cuda(dt, self.sizes(), aoti_host::cpu::detail::empty_like_strides(self), device));
    copy_strided(out->data_ptr(), out->strides(), self.data_ptr(), self.strides(), self.sizes(),
                 aoti_host::element_size(dt), stream);
    return out.release();
  }
  const Shape dims = aoti_host::ops::fft_wrap_dims(self, dim);
  const double scale = aoti_host::ops::fft_norm_scale(self.sizes(), dims, normalization);
  Owned out(new_cuda(dt, self.sizes(), aoti_host::ops::cufft_c2c_strides(self.sizes(), self.strides(), dims), device));
  if (out->numel() == 0) return out.release();
  // gathered with the untransformed dims outermost and the transformed ones innermost, in the given order
  Shape order;
  for (size_t d = 0; d < self.sizes().size(); ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) order.push_back(static_cast<int64_t>(d));
  order.insert(order.end(), dims.begin(), dims.end());
  Work w{Owned(new_cuda(dt, self.sizes(), Tensor::contiguous_strides(self.sizes()), device)), order, self.sizes()};
  copy_strided(w.t->data_ptr(), w.strides(), self.data_ptr(), self.strides(), self.sizes(),
               aoti_host::element_size(dt), stream);
  for (size_t i = dims.size(); i-- > 0;) c2c_pass(w, dims[i], forward, device, stream);
  finish(w, *out, scale, stream);
  return out.release();
}

Tensor* abs_or_angle(const Tensor& self, bool angle) {
  const int32_t dt = self.dtype();
  const bool complex = dt == dc::kComplex64 || dt == dc::kComplex128;
  if (!complex && dt != dc::kFloat32 && dt != dc::kFloat64)
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) +
                "; expected complex64, complex128, float32 or float64");
  const int32_t out_dt = complex ? part_dtype(dt) : dt;
  const int device = self.device_index();
  Owned out(new_cuda(out_dt, self.sizes(), aoti_host::cpu::detail::empty_like_strides(self), device));
  cu::launch_complex_abs(dt, self.data_ptr(), out->data_ptr(), strided_spec(self.sizes(), out->strides(), self.strides()),
                         self.numel(), angle, cu::stream_of(device));
  return out.release();
}

}  // namespace

namespace aoti_host {
namespace cuda {

Tensor* fft_r2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization, bool onesided) {
  require_cuda(self, "self", self.device_index());
  return ::fft_r2c(self, dim, normalization, onesided);
}

Tensor* fft_c2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization, bool forward) {
  require_cuda(self, "self", self.device_index());
  return ::fft_c2c(self, dim, normalization, forward);
}

Tensor* complex_abs_or_angle(bool angle, const Tensor& self) {
  require_cuda(self, "self", self.device_index());
  return abs_or_angle(self, angle);
}

// The views are ATen's on any device (ops/spectral.cpp); their input must be on CUDA here.
Tensor* permute(const Tensor& self, const std::vector<int64_t>& dims) {
  require_cuda(self, "self", self.device_index());
  return aoti_host::ops::permute(self, dims);
}

Tensor* view_as_real(const Tensor& self) {
  require_cuda(self, "self", self.device_index());
  return aoti_host::ops::view_as_real(self);
}

Tensor* view_as_complex(const Tensor& self) {
  require_cuda(self, "self", self.device_index());
  return aoti_host::ops::view_as_complex(self);
}

}  // namespace cuda
}  // namespace aoti_host
