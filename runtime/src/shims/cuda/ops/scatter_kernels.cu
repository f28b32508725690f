// scatter (src, value, reduce; the mean as a count and a divide) and index_put (scatter.cpp).
#include <cfloat>
#include <cmath>

#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

// The element offsets of index position p in index, src and out (out's along dim from index's value).
struct ScatterPos {
  int64_t idx, src, out_rest, dim_pos;
};
__device__ __forceinline__ ScatterPos scatter_pos(const ScatterSpec& s, int64_t p) {
  ScatterPos r{0, 0, 0, 0};
  for (int d = s.nd - 1; d >= 0; --d) {
    const int64_t i = p % s.idx_sizes[d];
    p /= s.idx_sizes[d];
    r.idx += i * s.idx_st[d];
    r.src += i * s.src_st[d];
    if (d != s.dim) r.out_rest += i * s.out_st[d];
  }
  return r;
}

// The position along dim that index position q names (negative indices wrap once); -1, with *bad raised, when it
// is out of range.
__device__ __forceinline__ int64_t scatter_target(const ScatterSpec& s, const int64_t* index, const ScatterPos& q,
                                                  int* bad) {
  int64_t t = index[q.idx];
  if (t < 0) t += s.out_dim_size;
  if (t < 0 || t >= s.out_dim_size) {
    if (bad != nullptr) *bad = 1;
    return -1;
  }
  return t;
}

// The smallest and largest value of T (infinities for floating types).
template <class T>
struct Bounds {
  static __device__ __forceinline__ float lo() { return -INFINITY; }
  static __device__ __forceinline__ float hi() { return INFINITY; }
};
template <>
struct Bounds<double> {
  static __device__ __forceinline__ double lo() { return -HUGE_VAL; }
  static __device__ __forceinline__ double hi() { return HUGE_VAL; }
};
template <>
struct Bounds<int32_t> {
  static __device__ __forceinline__ int64_t lo() { return INT32_MIN; }
  static __device__ __forceinline__ int64_t hi() { return INT32_MAX; }
};
template <>
struct Bounds<int64_t> {
  static __device__ __forceinline__ int64_t lo() { return INT64_MIN; }
  static __device__ __forceinline__ int64_t hi() { return INT64_MAX; }
};

template <class T>
__device__ __forceinline__ T identity_of(ScatterOp op) {
  using A = typename Acc<T>::type;
  switch (op) {
    case ScatterOp::kProd: return cvt<T, A>(A(1));
    case ScatterOp::kAmax: return cvt<T, A>(static_cast<A>(Bounds<T>::lo()));
    case ScatterOp::kAmin: return cvt<T, A>(static_cast<A>(Bounds<T>::hi()));
    default: return cvt<T, A>(A(0));
  }
}

template <class T>
__global__ void scatter_identity_kernel(T* out, const int64_t* index, ScatterSpec s, ScatterOp op, int* bad) {
  GRID_LOOP(p, s.numel) {
    const ScatterPos q = scatter_pos(s, p);
    const int64_t t = scatter_target(s, index, q, bad);
    if (t < 0) continue;
    out[q.out_rest + t * s.out_st[s.dim]] = identity_of<T>(op);
  }
}

template <class T>
__global__ void scatter_kernel(T* out, const int64_t* index, const T* src, double value, ScatterSpec s, ScatterOp op,
                               int* bad) {
  using A = typename Acc<T>::type;
  GRID_LOOP(p, s.numel) {
    const ScatterPos q = scatter_pos(s, p);
    const int64_t t = scatter_target(s, index, q, bad);
    if (t < 0) continue;
    T* dst = out + q.out_rest + t * s.out_st[s.dim];
    const A x = src != nullptr ? ld(src + q.src) : static_cast<A>(value);
    switch (op) {
      case ScatterOp::kAssign: *dst = cvt<T, A>(x); break;
      case ScatterOp::kSum:
      case ScatterOp::kMean: atomic_apply(dst, [x](T c) { return cvt<T, A>(ld(&c) + x); }); break;
      case ScatterOp::kProd: atomic_apply(dst, [x](T c) { return cvt<T, A>(ld(&c) * x); }); break;
      case ScatterOp::kAmax:
        atomic_apply(dst, [x](T c) {
          const A cv = ld(&c);
          return (is_nan(cv) || cv >= x) && !is_nan(x) ? c : cvt<T, A>(x);
        });
        break;
      case ScatterOp::kAmin:
        atomic_apply(dst, [x](T c) {
          const A cv = ld(&c);
          return (is_nan(cv) || cv <= x) && !is_nan(x) ? c : cvt<T, A>(x);
        });
        break;
    }
  }
}

__global__ void scatter_count_kernel(int32_t* counts, const int64_t* index, ScatterSpec s, StridedSpec cs) {
  GRID_LOOP(p, s.numel) {
    int64_t rem = p, idx_off = 0, cnt_off = 0;
    for (int d = s.nd - 1; d >= 0; --d) {
      const int64_t i = rem % s.idx_sizes[d];
      rem /= s.idx_sizes[d];
      idx_off += i * s.idx_st[d];
      if (d != s.dim) cnt_off += i * cs.dst_strides[d];
    }
    int64_t t = index[idx_off];
    if (t < 0) t += s.out_dim_size;
    if (t < 0 || t >= s.out_dim_size) continue;
    atomicAdd(counts + cnt_off + t * cs.dst_strides[s.dim], 1);
  }
}

template <class T>
__global__ void mean_divide_kernel(T* out, const int32_t* counts, StridedSpec s, int64_t numel, int base) {
  using A = typename Acc<T>::type;
  GRID_LOOP(i, numel) {
    int64_t o, c;
    strided_offsets(s, i, o, c);
    int64_t n = counts[c] + base;
    if (n == 0) n = 1;
    const A x = ld(out + o);
    if constexpr (std::is_integral<A>::value) {
      A qv = x / static_cast<A>(n);
      if ((x % static_cast<A>(n) != 0) && ((x < 0) != (n < 0))) --qv;  // floor division
      out[o] = cvt<T, A>(qv);
    } else {
      out[o] = cvt<T, A>(x / static_cast<A>(n));
    }
  }
}

template <class T>
__global__ void index_put_kernel(T* out, const T* values, IndexPutSpec s, bool accumulate, int* bad) {
  using A = typename Acc<T>::type;
  GRID_LOOP(p, s.numel) {
    int64_t pos[kMaxDims];
    int64_t rem = p, voff = 0;
    for (int r = s.rnd - 1; r >= 0; --r) {
      pos[r] = rem % s.rsizes[r];
      rem /= s.rsizes[r];
      voff += pos[r] * s.val_st[r];
    }
    int64_t off = 0;
    bool ok = true;
    for (int d = 0; d < s.nd; ++d) {
      int64_t t;
      if (s.idx[d] == nullptr) {
        t = pos[s.rdim[d]];
      } else {
        int64_t ioff = 0;
        for (int r = 0; r < s.rnd; ++r) ioff += pos[r] * s.idx_st[d][r];
        t = s.idx_int32[d] ? static_cast<int64_t>(static_cast<const int32_t*>(s.idx[d])[ioff])
                           : static_cast<const int64_t*>(s.idx[d])[ioff];
        if (t < 0) t += s.self_sizes[d];
        if (t < 0 || t >= s.self_sizes[d]) {
          ok = false;
          break;
        }
      }
      off += t * s.out_st[d];
    }
    if (!ok) {
      *bad = 1;
      continue;
    }
    const T v = values[voff];
    if (accumulate) {
      atomic_apply(out + off, [v](T c) { return cvt<T, A>(ld(&c) + ld(&v)); });
    } else {
      out[off] = v;
    }
  }
}

}  // namespace

void launch_scatter_fill_identity(int32_t dtype, void* out, const int64_t* index, const ScatterSpec& spec, ScatterOp op,
                                  int* bad_index, cudaStream_t stream) {
  if (spec.numel == 0) return;
  dispatch_real(dtype, "scatter_reduce", [&](auto tag) {
    using T = decltype(tag);
    scatter_identity_kernel<T><<<grid_for(spec.numel, 256), 256, 0, stream>>>(static_cast<T*>(out), index, spec, op,
                                                                               bad_index);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter(int32_t dtype, void* out, const int64_t* index, const void* src, double value,
                    const ScatterSpec& spec, ScatterOp op, int* bad_index, cudaStream_t stream) {
  if (spec.numel == 0) return;
  dispatch_real(dtype, "scatter", [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<T><<<grid_for(spec.numel, 256), 256, 0, stream>>>(static_cast<T*>(out), index,
                                                                      static_cast<const T*>(src), value, spec, op,
                                                                      bad_index);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_count(int32_t* counts, const int64_t* index, const ScatterSpec& spec, const int64_t* count_st,
                          cudaStream_t stream) {
  if (spec.numel == 0) return;
  StridedSpec cs{};
  cs.ndim = spec.nd;
  for (int d = 0; d < spec.nd; ++d) cs.dst_strides[d] = count_st[d];
  scatter_count_kernel<<<grid_for(spec.numel, 256), 256, 0, stream>>>(counts, index, spec, cs);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_mean_divide(int32_t dtype, void* out, const int32_t* counts, const StridedSpec& out_spec,
                                int64_t numel, int base, cudaStream_t stream) {
  if (numel == 0) return;
  dispatch_real(dtype, "scatter_reduce", [&](auto tag) {
    using T = decltype(tag);
    mean_divide_kernel<T><<<grid_for(numel, 256), 256, 0, stream>>>(static_cast<T*>(out), counts, out_spec, numel,
                                                                     base);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_index_put(int32_t dtype, void* out, const void* values, const IndexPutSpec& s, bool accumulate, int* bad,
                      cudaStream_t stream) {
  if (s.numel == 0) return;
  dispatch_real(dtype, "index_put", [&](auto tag) {
    using T = decltype(tag);
    index_put_kernel<T><<<grid_for(s.numel, 256), 256, 0, stream>>>(static_cast<T*>(out),
                                                                    static_cast<const T*>(values), s, accumulate, bad);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace aoti_host
