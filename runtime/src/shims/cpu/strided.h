// Strided-tensor helpers shared by the CPU kernels: visiting elements of any strides in logical order,
// numpy broadcasting, gathering into / scattering from packed vectors, and typed matrix views for the
// BLAS and packed-GEMM paths (float32 -> float, float64 -> double). Internal to runtime/src/cpu/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shims/cpu/convert.h"
#include "shims/cpu/mat_view.h"

// OpenMP pragmas where the build has OpenMP (gcc: the plugins' libgomp); serial loops elsewhere.
#ifdef _OPENMP
#include <omp.h>
#define AOTI_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define AOTI_OMP(...)
#endif

namespace aoti_host {
namespace cpu {

// Whether the calling thread is outside every OpenMP region, active or not: the only place a kernel may
// open a region of its own. Inside an inactive region (`parallel if (false)`, one thread)
// omp_in_parallel() is false, yet a region opened there is nested, and libgomp starts fresh threads for
// every nested team while the pool's workers keep spinning: three threads on two cores, per call.
inline bool outside_omp_regions() {
#ifdef _OPENMP
  return omp_get_level() == 0;
#else
  return true;
#endif
}

// body(lo, hi) over [0, n): [0, n) split into one static block per thread of the OpenMP pool when
// `parallel` holds (and more than one item), else one call on the calling thread outside any region, so
// that a GEMM in the body can still split over the pool. Per-thread scratch belongs inside the body.
template <typename F>
void for_blocks(bool parallel, int64_t n, F&& body) {
#ifdef _OPENMP
  if (parallel && n > 1 && outside_omp_regions()) {
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      if (lo < hi) body(lo, hi);
    }
    return;
  }
#else
  (void)parallel;
#endif
  if (n > 0) body(int64_t{0}, n);
}
namespace detail {

inline std::string dims_str(const std::vector<int64_t>& v, const char* sep = "x") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return v.empty() ? "a scalar" : s;
}

template <class F>
void for_each_offset(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, F&& f) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  if (n == 0) return;
  const size_t nd = sizes.size();
  if (nd == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  // The innermost dimension as a plain loop (the compiler can vectorise it), an odometer over the rest.
  const int64_t inner = sizes[nd - 1], is = strides[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, off + j * is);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < sizes[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// Strides that view `t` as if expanded to `target` (numpy broadcasting), or an error naming `arg`.
inline std::vector<int64_t> broadcast_strides(const Tensor& t, const std::vector<int64_t>& target, const char* arg) {
  const auto& s = t.sizes();
  const auto& st = t.strides();
  if (s.size() > target.size()) {
    throw Error(std::string(arg) + " of shape " + list_str(s) + " cannot be broadcast to " + list_str(target));
  }
  std::vector<int64_t> out(target.size(), 0);
  const size_t lead = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == target[lead + i]) {
      out[lead + i] = st[i];
    } else if (s[i] == 1) {
      out[lead + i] = 0;
    } else {
      throw Error(std::string(arg) + " of shape " + list_str(s) + " cannot be broadcast to " + list_str(target));
    }
  }
  return out;
}

template <typename Acc>
std::vector<Acc> gather(const Tensor& t, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Acc> v(static_cast<size_t>(n));
  const char* base = static_cast<const char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(sizes, strides, [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = load<Acc>(base + off * isz, dt); });
  return v;
}

template <typename Acc>
std::vector<Acc> gather(const Tensor& t) {
  return gather<Acc>(t, t.sizes(), t.strides());
}

template <typename Acc>
void scatter(Tensor& t, const std::vector<Acc>& v) {
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { store<Acc>(base + off * isz, dt, v[static_cast<size_t>(i)]); });
}

template <typename T>
constexpr int32_t dtype_of() {
  return sizeof(T) == 4 ? kFloat32 : kFloat64;
}

// The tensor's elements as T: its own memory when it already is T, else a packed copy in `buf` (then
// the returned strides are contiguous).
template <typename T>
const T* typed_data(const Tensor& t, std::vector<T>& buf, std::vector<int64_t>& strides) {
  if (t.dtype() == dtype_of<T>()) {
    strides = t.strides();
    return static_cast<const T*>(t.data_ptr());
  }
  buf = gather<T>(t);
  strides = Tensor::contiguous_strides(t.sizes());
  return buf.data();
}

template <typename T>
const T* contiguous_data(const Tensor& t, std::vector<T>& buf) {
  if (t.dtype() == dtype_of<T>() && t.is_contiguous()) return static_cast<const T*>(t.data_ptr());
  buf = gather<T>(t);
  return buf.data();
}

// Writes packed row-major values into `t` (any strides), converting to its dtype.
template <typename T>
void store_packed(Tensor& t, const T* v) {
  if (t.dtype() == dtype_of<T>()) {
    T* base = static_cast<T*>(t.data_ptr());
    for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { base[off] = v[i]; });
    return;
  }
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { store<T>(base + off * isz, dt, v[i]); });
}

template <typename T>
MatView<const T> mat_of(const Tensor& t, int64_t batch) {
  const auto& s = t.sizes();
  const auto& st = t.strides();
  const size_t d = s.size();
  const T* p = static_cast<const T*>(t.data_ptr()) + (d == 3 ? batch * st[0] : 0);
  return {p, s[d - 2], s[d - 1], st[d - 2], st[d - 1]};
}

// c10's compute_non_overlapping_and_dense, ATen's infer_dense_strides, and the strides at::empty_like(t)
// (preserve format) gives: the layouts ATen's CPU ops choose for their outputs.
bool non_overlapping_and_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
std::vector<int64_t> infer_dense_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
std::vector<int64_t> empty_like_strides(const Tensor& t);

}  // namespace detail
}  // namespace cpu
}  // namespace aoti_host
