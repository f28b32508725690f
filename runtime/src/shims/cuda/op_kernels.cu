// Kernels of the CUDA fallback ops (op_kernels.h). Every kernel takes element strides, so strided and
// transposed operands need no copies; accumulation is in float (double for float64, int64 for integers).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <string>

#include "shims/cuda/op_kernels.h"

namespace aoti_host {
namespace cuda {
namespace {

// --- element access ------------------------------------------------------------------------------

template <class T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
template <>
struct Acc<int64_t> {
  using type = int64_t;
};
template <>
struct Acc<int32_t> {
  using type = int64_t;
};

template <class T>
__device__ __forceinline__ typename Acc<T>::type ld(const T* p) {
  return static_cast<typename Acc<T>::type>(*p);
}
template <>
__device__ __forceinline__ float ld<__half>(const __half* p) {
  return __half2float(*p);
}
template <>
__device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <class T, class A>
__device__ __forceinline__ T cvt(A v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half cvt<__half, float>(float v) {
  return __float2half(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, float>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half cvt<__half, double>(double v) {
  return __double2half(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, double>(double v) {
  return __double2bfloat16(v);
}
template <>
__device__ __forceinline__ __half cvt<__half, int64_t>(int64_t v) {
  return __float2half(static_cast<float>(v));
}
template <>
__device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, int64_t>(int64_t v) {
  return __float2bfloat16(static_cast<float>(v));
}

unsigned grid_for(int64_t work, unsigned block) {
  int64_t g = (work + block - 1) / block;
  return static_cast<unsigned>(g > 65535 * 8 ? 65535 * 8 : (g < 1 ? 1 : g));
}

#define GRID_LOOP(i, n)                                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

[[noreturn]] void unsupported(const char* op, int32_t dtype, const char* supported) {
  throw Error(std::string(op) + " on cuda: dtype " + dtype_name(dtype) + " is not supported (" + supported + ")");
}

// Calls f(T{}) with the C++ type of a floating dtype code.
template <class F>
void dispatch_float(int32_t dtype, const char* op, F&& f) {
  switch (dtype) {
    case dtype_code::kFloat32: return f(float{});
    case dtype_code::kFloat64: return f(double{});
    case dtype_code::kFloat16: return f(__half{});
    case dtype_code::kBFloat16: return f(__nv_bfloat16{});
    default: unsupported(op, dtype, "float32, float64, float16, bfloat16");
  }
}
template <class F>
void dispatch_real(int32_t dtype, const char* op, F&& f) {
  switch (dtype) {
    case dtype_code::kFloat32: return f(float{});
    case dtype_code::kFloat64: return f(double{});
    case dtype_code::kFloat16: return f(__half{});
    case dtype_code::kBFloat16: return f(__nv_bfloat16{});
    case dtype_code::kInt32: return f(int32_t{});
    case dtype_code::kInt64: return f(int64_t{});
    default: unsupported(op, dtype, "float32, float64, float16, bfloat16, int32, int64");
  }
}

// --- attention -----------------------------------------------------------------------------------

constexpr int kAttnWarps = 8;   // query rows per block, one warp each
constexpr int kAttnTile = 32;   // keys per shared-memory tile (one per lane when scoring)
constexpr int kMaxPerLane = kMaxHeadDim / 32;

// One warp per query row; the block's warps share K/V tiles staged in shared memory as float.
// Online softmax: running max m and sum l per row, the output accumulator rescaled when m grows.
template <class T>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(T* out, float* lse, const T* q, const T* k, const T* v, const void* bias, AttentionSpec s) {
  extern __shared__ float smem[];
  const int64_t dk = s.d, dv = s.dv;
  float* ks = smem;                                       // [kAttnTile][dk + 1]
  float* vs = ks + kAttnTile * (dk + 1);                  // [kAttnTile][dv + 1]
  float* qs = vs + kAttnTile * (dv + 1);                  // [kAttnWarps][dk]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / s.h, h = bh % s.h;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kAttnWarps;
  const int64_t i = row0 + warp;
  const bool active = i < s.m;
  float* qw = qs + warp * dk;
  if (active) {
    const T* qrow = q + b * s.q_st[0] + h * s.q_st[1] + i * s.q_st[2];
    for (int64_t d = lane; d < dk; d += 32) qw[d] = ld(qrow + d * s.q_st[3]) * s.scale;
  }
  float acc[kMaxPerLane];
#pragma unroll
  for (int r = 0; r < kMaxPerLane; ++r) acc[r] = 0.f;
  float m = -INFINITY, l = 0.f;
  // keys the block's last row can see
  int64_t n_end = s.n;
  if (s.causal) {
    const int64_t last = (row0 + kAttnWarps - 1 < s.m ? row0 + kAttnWarps - 1 : s.m - 1) + s.causal_offset + 1;
    n_end = last < n_end ? (last < 0 ? 0 : last) : n_end;
  }
  const T* kb = k + b * s.k_st[0] + h * s.k_st[1];
  const T* vb = v + b * s.v_st[0] + h * s.v_st[1];
  for (int64_t t0 = 0; t0 < n_end; t0 += kAttnTile) {
    const int64_t tn = (n_end - t0) < kAttnTile ? (n_end - t0) : kAttnTile;
    __syncthreads();  // the previous tile is no longer read
    for (int64_t e = threadIdx.x; e < tn * dk; e += blockDim.x) {
      const int64_t j = e / dk, d = e % dk;
      ks[j * (dk + 1) + d] = ld(kb + (t0 + j) * s.k_st[2] + d * s.k_st[3]);
    }
    for (int64_t e = threadIdx.x; e < tn * dv; e += blockDim.x) {
      const int64_t j = e / dv, d = e % dv;
      vs[j * (dv + 1) + d] = ld(vb + (t0 + j) * s.v_st[2] + d * s.v_st[3]);
    }
    __syncthreads();
    if (!active) continue;
    // lane j scores key t0 + j
    float sc = -INFINITY;
    const int64_t j = t0 + lane;
    if (lane < tn && (!s.causal || j <= i + s.causal_offset)) {
      const float* kr = ks + lane * (dk + 1);
      float dot = 0.f;
      for (int64_t d = 0; d < dk; ++d) dot += qw[d] * kr[d];
      sc = dot;
      if (s.bias_dtype >= 0) {
        const int64_t bo = b * s.bias_st[0] + h * s.bias_st[1] + i * s.bias_st[2] + j * s.bias_st[3];
        if (s.bias_dtype == dtype_code::kBool) {
          if (!static_cast<const bool*>(bias)[bo]) sc = -INFINITY;
        } else {
          sc += static_cast<float>(ld(static_cast<const T*>(bias) + bo));
        }
      }
    }
    float tmax = sc;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    const float m_new = fmaxf(m, tmax);
    if (m_new == -INFINITY) continue;  // everything so far masked out
    const float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
    const float p = sc == -INFINITY ? 0.f : expf(sc - m_new);
    float psum = p;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, o);
    l = l * alpha + psum;
    m = m_new;
#pragma unroll
    for (int r = 0; r < kMaxPerLane; ++r) acc[r] *= alpha;
    for (int jj = 0; jj < tn; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const float* vr = vs + jj * (dv + 1);
#pragma unroll
      for (int r = 0; r < kMaxPerLane; ++r) {
        const int64_t d = lane + 32 * r;
        if (d < dv) acc[r] += pj * vr[d];
      }
    }
  }
  if (!active) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* orow = out + b * s.o_st[0] + h * s.o_st[1] + i * s.o_st[2];
#pragma unroll
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int64_t d = lane + 32 * r;
    if (d < dv) orow[d * s.o_st[3]] = cvt<T, float>(acc[r] * inv);
  }
  if (lse != nullptr && lane == 0)
    lse[b * s.lse_st[0] + h * s.lse_st[1] + i * s.lse_st[2]] = l > 0.f ? m + logf(l) : INFINITY;
}

// The GEMM path's softmax: one block per row of scores. Pass 1 keeps a running (max, sum of exp) of the
// biased scores per thread; the block combines them; pass 2 writes the normalized probabilities. Keys
// past the row's causal limit are never read and get probability 0.
constexpr int kSoftmaxBlock = 256;

__device__ __forceinline__ void softmax_combine(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.f : l * expf(m - mx)) + (m2 == -INFINITY ? 0.f : l2 * expf(m2 - mx));
  m = mx;
}

template <class T>
__global__ void __launch_bounds__(kSoftmaxBlock)
    attention_softmax_kernel(float* scores, T* probs, float* lse, const void* bias, AttentionSpec s, int64_t i0,
                             int64_t rows, int64_t bh0) {
  __shared__ float red_m[kSoftmaxBlock / 32], red_l[kSoftmaxBlock / 32];
  const int64_t row = blockIdx.x;
  const int64_t e = row / rows, i = i0 + row % rows;
  const int64_t bh = bh0 + e, b = bh / s.h, h = bh % s.h;
  float* srow = scores + row * s.n;
  T* prow = probs + row * s.n;
  int64_t n_vis = s.n;
  if (s.causal) {
    const int64_t last = i + s.causal_offset + 1;
    n_vis = last < 0 ? 0 : (last < s.n ? last : s.n);
  }
  const int64_t bias_row = b * s.bias_st[0] + h * s.bias_st[1] + i * s.bias_st[2];
  // the score of key j with its bias (read twice rather than written back: one pass less over memory)
  auto score = [&](int64_t j) {
    float x = srow[j];
    if (s.bias_dtype >= 0) {
      const int64_t bo = bias_row + j * s.bias_st[3];
      if (s.bias_dtype == dtype_code::kBool) {
        if (!static_cast<const bool*>(bias)[bo]) x = -INFINITY;
      } else {
        x += static_cast<float>(ld(static_cast<const T*>(bias) + bo));
      }
    }
    return x;
  };
  float m = -INFINITY, l = 0.f;
  for (int64_t j = threadIdx.x; j < n_vis; j += blockDim.x) softmax_combine(m, l, score(j), 1.f);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    softmax_combine(m, l, m2, l2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red_m[warp] = m, red_l[warp] = l;
  __syncthreads();
  m = red_m[0], l = red_l[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) softmax_combine(m, l, red_m[w], red_l[w]);
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int64_t j = threadIdx.x; j < s.n; j += blockDim.x) {
    float p = 0.f;
    if (j < n_vis && l > 0.f) {
      const float x = score(j);
      p = x == -INFINITY ? 0.f : expf(x - m) * inv;
    }
    prow[j] = cvt<T, float>(p);  // may overwrite srow[j] (float32): this thread's last read of it
  }
  if (lse != nullptr && threadIdx.x == 0)
    lse[b * s.lse_st[0] + h * s.lse_st[1] + i * s.lse_st[2]] = l > 0.f ? m + logf(l) : INFINITY;
}

// --- sort / topk ---------------------------------------------------------------------------------

__device__ __forceinline__ int64_t line_offset(const LineSpec& s, int which, int64_t line) {
  int64_t off = 0;
  for (int d = s.nd - 1; d >= 0; --d) {
    const int64_t idx = line % s.sizes[d];
    line /= s.sizes[d];
    off += idx * s.strides[which][d];
  }
  return off;
}

template <class A>
__device__ __forceinline__ bool is_nan(A v) {
  return v != v;  // NOLINT(misc-redundant-expression)
}

// a before b in the sorted order (NaN greatest; ties by position, so the order is stable).
template <class A>
__device__ __forceinline__ bool before(A a, int64_t ia, A b, int64_t ib, bool desc) {
  const bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) {
    if (na && nb) return ia < ib;
    return desc ? na : nb;  // NaN first when descending, last when ascending
  }
  if (a == b) return ia < ib;
  return desc ? a > b : a < b;
}

constexpr int kSortBlock = 256;

// Rank sort: block (line, chunk of 256 elements); each thread counts the line's elements ordered
// before its own, streaming the line through shared memory. O(n^2) per line, parallel over elements.
template <class T>
__global__ void __launch_bounds__(kSortBlock)
    sort_kernel(const T* in, T* values, int64_t* indices, LineSpec s, int64_t keep, bool desc) {
  using A = typename Acc<T>::type;
  __shared__ A tile[kSortBlock];
  const int64_t line = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;
  if (line >= s.lines) return;
  const T* src = in + line_offset(s, 0, line);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSortBlock + threadIdx.x;
  const bool mine = j < s.n;
  const A x = mine ? ld(src + j * s.step[0]) : A(0);
  int64_t rank = 0;
  for (int64_t t0 = 0; t0 < s.n; t0 += kSortBlock) {
    __syncthreads();
    if (t0 + threadIdx.x < s.n) tile[threadIdx.x] = ld(src + (t0 + threadIdx.x) * s.step[0]);
    __syncthreads();
    if (!mine) continue;
    const int64_t tn = s.n - t0 < kSortBlock ? s.n - t0 : kSortBlock;
    for (int64_t u = 0; u < tn; ++u) rank += before(tile[u], t0 + u, x, j, desc) ? 1 : 0;
  }
  if (mine && rank < keep) {
    values[line_offset(s, 1, line) + rank * s.step[1]] = src[j * s.step[0]];
    indices[line_offset(s, 2, line) + rank * s.step[2]] = j;
  }
}

// --- scans ---------------------------------------------------------------------------------------

template <class TI, class TO>
__global__ void scan_kernel(const TI* in, TO* out, LineSpec s, bool product) {
  using A = typename Acc<TO>::type;
  GRID_LOOP(line, s.lines) {
    const TI* src = in + line_offset(s, 0, line);
    TO* dst = out + line_offset(s, 1, line);
    A acc = product ? A(1) : A(0);
    for (int64_t j = 0; j < s.n; ++j) {
      // the element converted to the output dtype first, as ATen does
      const TO rounded = cvt<TO, A>(static_cast<A>(ld(src + j * s.step[0])));
      const A xr = ld(&rounded);
      if (product) {
        acc = acc * xr;
      } else {
        acc = acc + xr;
      }
      dst[j * s.step[1]] = cvt<TO, A>(acc);
    }
  }
}

template <class T>
__global__ void cum_extreme_kernel(const T* in, T* values, int64_t* indices, LineSpec s, bool is_max) {
  using A = typename Acc<T>::type;
  GRID_LOOP(line, s.lines) {
    const T* src = in + line_offset(s, 0, line);
    T* vd = values + line_offset(s, 1, line);
    int64_t* id = indices + line_offset(s, 2, line);
    A best = ld(src);
    int64_t bi = 0;
    for (int64_t j = 0; j < s.n; ++j) {
      const A x = ld(src + j * s.step[0]);
      // ATen: a NaN sticks; otherwise >= (max) / <= (min), so ties move to the later index
      if (!is_nan(best) && (is_nan(x) || (is_max ? x >= best : x <= best))) {
        best = x;
        bi = j;
      }
      vd[j * s.step[1]] = cvt<T, A>(best);
      id[j * s.step[2]] = bi;
    }
  }
}

// --- embedding bag -------------------------------------------------------------------------------

template <class I>
__device__ __forceinline__ int64_t ldi(const void* p, int64_t i) {
  return static_cast<int64_t>(static_cast<const I*>(p)[i]);
}

template <class T, class I>
__global__ void embedding_bag_kernel(const T* w, const void* indices, const void* offsets, const T* psw, T* out,
                                     I* offset2bag, I* bag_size, I* max_indices, int* bad, EmbeddingBagSpec s) {
  using A = typename Acc<T>::type;
  GRID_LOOP(e, s.num_bags * s.features) {
    const int64_t bag = e / s.features, f = e % s.features;
    auto off_at = [&](int64_t b) {
      return s.offsets_int32 ? ldi<int32_t>(offsets, b * s.off_step) : ldi<int64_t>(offsets, b * s.off_step);
    };
    const int64_t begin = off_at(bag);
    const int64_t end = bag < s.num_bags - 1 ? off_at(bag + 1) : s.num_indices;
    A acc = A(0);
    int64_t count = 0, arg = -1;
    for (int64_t p = begin; p < end && p < s.num_indices; ++p) {
      if (p < 0) continue;
      const int64_t row = s.indices_int32 ? ldi<int32_t>(indices, p * s.idx_step) : ldi<int64_t>(indices, p * s.idx_step);
      if (f == 0) offset2bag[p] = static_cast<I>(bag);
      if (row == s.padding_idx) continue;
      if (row < 0 || row >= s.num_weights) {
        if (bad != nullptr) *bad = 1;
        continue;
      }
      A x = ld(w + row * s.w_st[0] + f * s.w_st[1]);
      if (s.mode == 2) {
        if (arg < 0 || x > acc) {
          acc = x;
          arg = row;
        }
      } else {
        if (psw != nullptr) x = x * ld(psw + p * s.psw_step);
        acc += x;
      }
      ++count;
    }
    if (s.mode == 1 && count > 0) acc = acc / static_cast<A>(count);
    out[bag * s.out_st[0] + f * s.out_st[1]] = cvt<T, A>(acc);
    if (f == 0) bag_size[bag] = static_cast<I>(count);
    if (s.mode == 2) max_indices[bag * s.features + f] = static_cast<I>(arg);
  }
}

// --- scatter -------------------------------------------------------------------------------------

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

// Atomic read-modify-write through compare-and-swap on the element's bits (any 4- or 8-byte type;
// 2-byte types through their aligned 4-byte word).
template <class T, class F>
__device__ void atomic_apply(T* addr, F f) {
  if constexpr (sizeof(T) == 4) {
    unsigned int* a = reinterpret_cast<unsigned int*>(addr);
    unsigned int old = *a, assumed;
    do {
      assumed = old;
      T cur;
      memcpy(&cur, &assumed, 4);
      const T nv = f(cur);
      unsigned int bits;
      memcpy(&bits, &nv, 4);
      old = atomicCAS(a, assumed, bits);
    } while (assumed != old);
  } else if constexpr (sizeof(T) == 8) {
    unsigned long long* a = reinterpret_cast<unsigned long long*>(addr);
    unsigned long long old = *a, assumed;
    do {
      assumed = old;
      T cur;
      memcpy(&cur, &assumed, 8);
      const T nv = f(cur);
      unsigned long long bits;
      memcpy(&bits, &nv, 8);
      old = atomicCAS(a, assumed, bits);
    } while (assumed != old);
  } else {
    static_assert(sizeof(T) == 2, "2-, 4- or 8-byte elements");
    const uintptr_t ua = reinterpret_cast<uintptr_t>(addr);
    unsigned int* a = reinterpret_cast<unsigned int*>(ua & ~uintptr_t{3});
    const unsigned shift = (ua & 2) ? 16u : 0u;
    unsigned int old = *a, assumed;
    do {
      assumed = old;
      const unsigned short hb = static_cast<unsigned short>((assumed >> shift) & 0xffffu);
      T cur;
      memcpy(&cur, &hb, 2);
      const T nv = f(cur);
      unsigned short nb;
      memcpy(&nb, &nv, 2);
      const unsigned int word = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned int>(nb) << shift);
      old = atomicCAS(a, assumed, word);
    } while (assumed != old);
  }
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
    int64_t t = index[q.idx];
    if (t < 0) t += s.out_dim_size;
    if (t < 0 || t >= s.out_dim_size) {
      if (bad != nullptr) *bad = 1;
      continue;
    }
    out[q.out_rest + t * s.out_st[s.dim]] = identity_of<T>(op);
  }
}

template <class T>
__global__ void scatter_kernel(T* out, const int64_t* index, const T* src, double value, ScatterSpec s, ScatterOp op,
                               int* bad) {
  using A = typename Acc<T>::type;
  GRID_LOOP(p, s.numel) {
    const ScatterPos q = scatter_pos(s, p);
    int64_t t = index[q.idx];
    if (t < 0) t += s.out_dim_size;
    if (t < 0 || t >= s.out_dim_size) {
      if (bad != nullptr) *bad = 1;
      continue;
    }
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

// --- searchsorted ---------------------------------------------------------------------------------

template <class K>
__device__ K load_code(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case dtype_code::kFloat32: return static_cast<K>(static_cast<const float*>(p)[i]);
    case dtype_code::kFloat64: return static_cast<K>(static_cast<const double*>(p)[i]);
    case dtype_code::kFloat16: return static_cast<K>(__half2float(static_cast<const __half*>(p)[i]));
    case dtype_code::kBFloat16: return static_cast<K>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case dtype_code::kUInt8: return static_cast<K>(static_cast<const uint8_t*>(p)[i]);
    case dtype_code::kInt8: return static_cast<K>(static_cast<const int8_t*>(p)[i]);
    case dtype_code::kInt16: return static_cast<K>(static_cast<const int16_t*>(p)[i]);
    case dtype_code::kInt32: return static_cast<K>(static_cast<const int32_t*>(p)[i]);
    default: return static_cast<K>(static_cast<const int64_t*>(p)[i]);
  }
}

// ATen's cus_lower_bound / cus_upper_bound (negated comparisons, so NaN values land as there).
template <class K>
__global__ void searchsorted_kernel(const void* seq, const void* self, const int64_t* sorter, void* out, SearchSpec s,
                                    int* bad) {
  GRID_LOOP(i, s.numel) {
    int64_t rem = i, so = 0;
    for (int d = s.nd - 1; d >= 0; --d) {
      so += (rem % s.sizes[d]) * s.self_st[d];
      rem /= s.sizes[d];
    }
    const K v = load_code<K>(self, s.self_dtype, so);
    int64_t row = s.one_d ? 0 : i / s.inner, base = 0, sbase = 0;
    for (int d = s.outer_nd - 1; d >= 0; --d) {
      const int64_t idx = row % s.outer_sizes[d];
      row /= s.outer_sizes[d];
      base += idx * s.seq_outer_st[d];
      sbase += idx * s.sorter_outer_st[d];
    }
    int64_t lo = 0, hi = s.n;
    while (lo < hi) {
      const int64_t mid = lo + ((hi - lo) >> 1);
      int64_t at = mid;
      if (sorter != nullptr) {
        at = sorter[sbase + mid * s.sorter_step];
        if (at < 0 || at >= s.n) {
          if (bad != nullptr) *bad = 1;
          at = at < 0 ? 0 : s.n - 1;
        }
      }
      const K m = load_code<K>(seq, s.seq_dtype, base + at * s.seq_step);
      const bool go_right = s.right ? !(m > v) : !(m >= v);
      if (go_right) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (s.out_int32) {
      static_cast<int32_t*>(out)[i] = static_cast<int32_t>(lo);
    } else {
      static_cast<int64_t*>(out)[i] = lo;
    }
  }
}

}  // namespace

// --- launchers -----------------------------------------------------------------------------------

void launch_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                      const void* bias, const AttentionSpec& spec, cudaStream_t stream) {
  if (spec.m == 0 || spec.b == 0 || spec.h == 0) return;
  if (spec.d > kMaxHeadDim || spec.dv > kMaxHeadDim)
    throw Error("attention on cuda: head sizes up to " + std::to_string(kMaxHeadDim) + " are supported, got " +
                std::to_string(spec.d) + " (query/key) and " + std::to_string(spec.dv) + " (value)");
  if (spec.b * spec.h > 65535)
    throw Error("attention on cuda: batch * heads " + std::to_string(spec.b * spec.h) + " exceeds 65535");
  const size_t smem = sizeof(float) * static_cast<size_t>(kAttnTile * (spec.d + 1) + kAttnTile * (spec.dv + 1) +
                                                          kAttnWarps * spec.d);
  const dim3 grid(static_cast<unsigned>((spec.m + kAttnWarps - 1) / kAttnWarps), static_cast<unsigned>(spec.b * spec.h));
  if (dtype == dtype_code::kFloat64) unsupported("scaled_dot_product_attention", dtype, "float32, float16, bfloat16");
  dispatch_float(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    if (smem > 48 * 1024)
      AOTI_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    attention_kernel<T><<<grid, kAttnWarps * 32, smem, stream>>>(static_cast<T*>(out), lse, static_cast<const T*>(q),
                                                                 static_cast<const T*>(k), static_cast<const T*>(v),
                                                                 bias, spec);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_attention_softmax(int32_t dtype, float* scores, void* probs, float* lse, const void* bias,
                              const AttentionSpec& spec, int64_t i0, int64_t rows, int64_t bh0, int64_t batch,
                              cudaStream_t stream) {
  const int64_t blocks = rows * batch;
  if (blocks == 0) return;
  if (blocks > 0x7fffffff) throw Error("attention on cuda: " + std::to_string(blocks) + " rows of scores are too many");
  if (dtype == dtype_code::kFloat64) unsupported("scaled_dot_product_attention", dtype, "float32, float16, bfloat16");
  dispatch_float(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    attention_softmax_kernel<T><<<static_cast<unsigned>(blocks), kSoftmaxBlock, 0, stream>>>(
        scores, static_cast<T*>(probs), lse, bias, spec, i0, rows, bh0);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

namespace {
dim3 line_grid(int64_t lines, int64_t n) {
  const int64_t chunks = (n + kSortBlock - 1) / kSortBlock;
  if (chunks > 0x7fffffff) throw Error("sort on cuda: line of " + std::to_string(n) + " elements is too long");
  const int64_t y = lines < 65535 ? lines : 65535;
  const int64_t z = (lines + y - 1) / y;
  if (z > 65535) throw Error("sort on cuda: " + std::to_string(lines) + " lines are too many");
  return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(y), static_cast<unsigned>(z));
}
}  // namespace

void launch_sort(int32_t dtype, const void* in, void* values, int64_t* indices, const LineSpec& spec, int64_t keep,
                 bool descending, cudaStream_t stream) {
  if (spec.lines == 0 || spec.n == 0 || keep == 0) return;
  const dim3 grid = line_grid(spec.lines, spec.n);
  dispatch_real(dtype, "sort", [&](auto tag) {
    using T = decltype(tag);
    sort_kernel<T><<<grid, kSortBlock, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(values), indices,
                                                     spec, keep, descending);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_scan(int32_t in_dtype, int32_t out_dtype, const void* in, void* out, const LineSpec& spec, bool product,
                 cudaStream_t stream) {
  if (spec.lines == 0 || spec.n == 0) return;
  const char* op = product ? "cumprod" : "cumsum";
  dispatch_real(in_dtype, op, [&](auto itag) {
    using TI = decltype(itag);
    dispatch_real(out_dtype, op, [&](auto otag) {
      using TO = decltype(otag);
      scan_kernel<TI, TO><<<grid_for(spec.lines, 128), 128, 0, stream>>>(static_cast<const TI*>(in),
                                                                        static_cast<TO*>(out), spec, product);
    });
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_cum_extreme(int32_t dtype, const void* in, void* values, int64_t* indices, const LineSpec& spec, bool max,
                        cudaStream_t stream) {
  if (spec.lines == 0 || spec.n == 0) return;
  dispatch_real(dtype, max ? "cummax" : "cummin", [&](auto tag) {
    using T = decltype(tag);
    cum_extreme_kernel<T><<<grid_for(spec.lines, 128), 128, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(values), indices, spec, max);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_embedding_bag(int32_t dtype, const void* weight, const void* indices, const void* offsets,
                          const void* per_sample_weights, void* out, void* offset2bag, void* bag_size,
                          void* max_indices, int* bad_index, const EmbeddingBagSpec& spec, cudaStream_t stream) {
  const int64_t work = spec.num_bags * spec.features;
  if (work == 0) return;
  dispatch_float(dtype, "_embedding_bag", [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto itag) {
      using I = decltype(itag);
      embedding_bag_kernel<T, I><<<grid_for(work, 256), 256, 0, stream>>>(
          static_cast<const T*>(weight), indices, offsets, static_cast<const T*>(per_sample_weights),
          static_cast<T*>(out), static_cast<I*>(offset2bag), static_cast<I*>(bag_size), static_cast<I*>(max_indices),
          bad_index, spec);
    };
    if (spec.index_dtype == dtype_code::kInt32) {
      go(int32_t{});
    } else {
      go(int64_t{});
    }
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

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

void launch_searchsorted(const void* seq, const void* self, const int64_t* sorter, void* out, const SearchSpec& spec,
                         int* bad_index, cudaStream_t stream) {
  if (spec.numel == 0) return;
  if (spec.ints) {
    searchsorted_kernel<int64_t><<<grid_for(spec.numel, 256), 256, 0, stream>>>(seq, self, sorter, out, spec, bad_index);
  } else {
    searchsorted_kernel<double><<<grid_for(spec.numel, 256), 256, 0, stream>>>(seq, self, sorter, out, spec, bad_index);
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

// --- nonzero / masked_select / histc / repeat_interleave / index_put ----------------------------

namespace {

__device__ __forceinline__ int64_t strided_offset(const int64_t* sizes, const int64_t* st, int nd, int64_t i) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    const int64_t c = i % sizes[d];
    i /= sizes[d];
    off += c * st[d];
  }
  return off;
}

__device__ __forceinline__ bool selected(const void* pred, const SelectSpec& s, int64_t i) {
  const int64_t off = strided_offset(s.sizes, s.pred_st, s.nd, i);
  uint64_t bits = 0;
  switch (s.pred_size) {
    case 1: bits = static_cast<const uint8_t*>(pred)[off]; break;
    case 2: bits = static_cast<const uint16_t*>(pred)[off]; break;
    case 4: bits = static_cast<const uint32_t*>(pred)[off]; break;
    default: bits = static_cast<const uint64_t*>(pred)[off]; break;
  }
  return (bits & s.pred_bits) != 0;
}

__global__ void __launch_bounds__(kSelectBlock) select_count_kernel(const void* pred, SelectSpec s, int64_t* counts) {
  __shared__ int warp_counts[kSelectBlock / 32];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSelectBlock + threadIdx.x;
  const bool hit = i < s.numel && selected(pred, s, i);
  const unsigned ballot = __ballot_sync(0xffffffffu, hit);
  if (threadIdx.x % 32 == 0) warp_counts[threadIdx.x / 32] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t c = 0;
    for (int w = 0; w < kSelectBlock / 32; ++w) c += warp_counts[w];
    counts[blockIdx.x] = c;
  }
}

__global__ void __launch_bounds__(kSelectBlock)
    select_write_kernel(const void* pred, SelectSpec s, const int64_t* offsets, int64_t* coords, int64_t coord_stride,
                        const char* src, char* values, int64_t itemsize) {
  __shared__ int warp_base[kSelectBlock / 32];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSelectBlock + threadIdx.x;
  const bool hit = i < s.numel && selected(pred, s, i);
  const unsigned ballot = __ballot_sync(0xffffffffu, hit);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_base[warp] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int w = 0; w < kSelectBlock / 32; ++w) {
      const int c = warp_base[w];
      warp_base[w] = acc;
      acc += c;
    }
  }
  __syncthreads();
  if (!hit) return;
  const int64_t k = offsets[blockIdx.x] + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
  if (coords != nullptr) {
    int64_t rem = i;
    for (int d = s.nd - 1; d >= 0; --d) {
      coords[d * coord_stride + k] = rem % s.sizes[d];
      rem /= s.sizes[d];
    }
  }
  if (values != nullptr) {
    const int64_t off = strided_offset(s.sizes, s.src_st, s.nd, i) * itemsize;
    const char* from = src + off;
    char* to = values + k * itemsize;
    switch (itemsize) {
      case 1: *to = *from; break;
      case 2: *reinterpret_cast<uint16_t*>(to) = *reinterpret_cast<const uint16_t*>(from); break;
      case 4: *reinterpret_cast<uint32_t*>(to) = *reinterpret_cast<const uint32_t*>(from); break;
      case 8: *reinterpret_cast<uint64_t*>(to) = *reinterpret_cast<const uint64_t*>(from); break;
      default:
        for (int64_t b = 0; b < itemsize; ++b) to[b] = from[b];
        break;
    }
  }
}

template <class T>
__global__ void minmax_kernel(const T* x, SelectSpec s, double* mm, int* nan) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  bool saw_nan = false;
  GRID_LOOP(i, s.numel) {
    const double v = static_cast<double>(ld(x + strided_offset(s.sizes, s.pred_st, s.nd, i)));
    if (v != v) {  // NOLINT(misc-redundant-expression): NaN
      saw_nan = true;
      continue;
    }
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    lo = fmin(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmax(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (saw_nan) *nan = 1;
  if (threadIdx.x % 32 != 0) return;
  atomic_apply(mm, [lo](double c) { return fmin(c, lo); });
  atomic_apply(mm + 1, [hi](double c) { return fmax(c, hi); });
}

template <class T>
__global__ void histc_kernel(const T* x, SelectSpec s, double lo_d, double hi_d, int64_t bins,
                             unsigned long long* counts) {
  using A = typename Acc<T>::type;
  const A lo = static_cast<A>(lo_d), hi = static_cast<A>(hi_d);
  GRID_LOOP(i, s.numel) {
    const A v = ld(x + strided_offset(s.sizes, s.pred_st, s.nd, i));
    if (!(v >= lo && v <= hi)) continue;
    int64_t bin = static_cast<int64_t>((v - lo) * static_cast<A>(bins) / (hi - lo));
    if (bin >= bins) bin = bins - 1;
    if (bin < 0) bin = 0;
    atomicAdd(counts + bin, 1ull);
  }
}

template <class T>
__global__ void histc_finish_kernel(const unsigned long long* counts, T* out, int64_t bins) {
  GRID_LOOP(b, bins) out[b] = cvt<T, double>(static_cast<double>(counts[b]));
}

template <class I>
__global__ void repeat_interleave_kernel(const I* rep, int64_t step, const int64_t* cum, int64_t n, I* out,
                                         int64_t out_size, int* bad) {
  GRID_LOOP(i, n) {
    const int64_t r = static_cast<int64_t>(rep[i * step]);
    const int64_t end = cum[i];
    if (r < 0 || (i == n - 1 && end != out_size)) {
      *bad = 1;
      continue;
    }
    for (int64_t j = end - r < 0 ? 0 : end - r; j < end && j < out_size; ++j) out[j] = static_cast<I>(i);
  }
}

__global__ void fill_f64_kernel(double* p, double v) { *p = v; }

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

void launch_select_count(const void* pred, const SelectSpec& s, int64_t* counts, cudaStream_t stream) {
  const int64_t blocks = (s.numel + kSelectBlock - 1) / kSelectBlock;
  if (blocks == 0) return;
  if (blocks > 0x7fffffff) throw Error("nonzero / masked_select on cuda: " + std::to_string(s.numel) + " elements are too many");
  select_count_kernel<<<static_cast<unsigned>(blocks), kSelectBlock, 0, stream>>>(pred, s, counts);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_select_write(const void* pred, const SelectSpec& s, const int64_t* offsets, int64_t* coords,
                         int64_t coord_stride, const void* src, void* values, size_t itemsize, cudaStream_t stream) {
  const int64_t blocks = (s.numel + kSelectBlock - 1) / kSelectBlock;
  if (blocks == 0) return;
  if (blocks > 0x7fffffff) throw Error("nonzero / masked_select on cuda: " + std::to_string(s.numel) + " elements are too many");
  select_write_kernel<<<static_cast<unsigned>(blocks), kSelectBlock, 0, stream>>>(
      pred, s, offsets, coords, coord_stride, static_cast<const char*>(src), static_cast<char*>(values),
      static_cast<int64_t>(itemsize));
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_minmax(int32_t dtype, const void* x, const SelectSpec& s, double* minmax, int* nan, cudaStream_t stream) {
  if (s.numel == 0) return;
  if (dtype != dtype_code::kFloat32 && dtype != dtype_code::kFloat64 && dtype != dtype_code::kFloat16 &&
      dtype != dtype_code::kBFloat16)
    unsupported("histc", dtype, "float32, float64, float16, bfloat16");
  dispatch_float(dtype, "histc", [&](auto tag) {
    using T = decltype(tag);
    minmax_kernel<T><<<grid_for(s.numel, 256), 256, 0, stream>>>(static_cast<const T*>(x), s, minmax, nan);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_histc(int32_t dtype, const void* x, const SelectSpec& s, double lo, double hi, int64_t bins,
                  unsigned long long* counts, void* out, cudaStream_t stream) {
  dispatch_float(dtype, "histc", [&](auto tag) {
    using T = decltype(tag);
    if (s.numel > 0)
      histc_kernel<T><<<grid_for(s.numel, 256), 256, 0, stream>>>(static_cast<const T*>(x), s, lo, hi, bins, counts);
    histc_finish_kernel<T><<<grid_for(bins, 256), 256, 0, stream>>>(counts, static_cast<T*>(out), bins);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_repeat_interleave(int32_t dtype, const void* repeats, int64_t step, const int64_t* cum, int64_t n,
                              void* out, int64_t out_size, int* bad, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == dtype_code::kInt32) {
    repeat_interleave_kernel<int32_t><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<const int32_t*>(repeats), step, cum, n, static_cast<int32_t*>(out), out_size, bad);
  } else if (dtype == dtype_code::kInt64) {
    repeat_interleave_kernel<int64_t><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<const int64_t*>(repeats), step, cum, n, static_cast<int64_t*>(out), out_size, bad);
  } else {
    unsupported("repeat_interleave", dtype, "int32, int64");
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_fill_f64(double* p, double value, cudaStream_t stream) {
  fill_f64_kernel<<<1, 1, 0, stream>>>(p, value);
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

// --- pooling and int8 matrix products ------------------------------------------------------------

namespace {

template <class T>
__global__ void pool_kernel(const T* in, T* out, int64_t* indices, PoolSpec sp) {
  using A = typename Acc<T>::type;
  const ops::PoolWindows& w = sp.w;
  GRID_LOOP(i, sp.total) {
    int64_t rem = i, pos[ops::kPoolMaxDims];
    ops::PoolRange r[ops::kPoolMaxDims];
    int64_t in_off = 0, out_off = 0;
    for (int d = w.nd - 1; d >= 0; --d) {
      pos[d] = rem % w.out_sp[d];
      rem /= w.out_sp[d];
      r[d] = ops::pool_range(w, d, pos[d]);
      out_off += pos[d] * sp.out_sp_st[d];
    }
    for (int l = sp.lead - 1; l >= 0; --l) {  // rem is now the plane
      const int64_t c = rem % sp.lead_sizes[l];
      rem /= sp.lead_sizes[l];
      in_off += c * sp.in_lead_st[l];
      out_off += c * sp.out_lead_st[l];
    }
    const bool max = ops::pool_is_max(w);
    const int64_t div = max ? 1 : ops::avg_divisor(w, r);
    bool any = true;
    int64_t sp_pos[ops::kPoolMaxDims], best_i = 0;
    for (int d = 0; d < w.nd; ++d) {
      any = any && r[d].lo < r[d].hi;
      sp_pos[d] = r[d].lo;
      best_i = best_i * w.in_sp[d] + r[d].lo;
    }
    T best{};
    A best_a{};
    bool have = false;
    double sum = 0.0;
    while (any && (max || div != 0)) {
      int64_t off = in_off, flat = 0;
      for (int d = 0; d < w.nd; ++d) {
        off += sp_pos[d] * sp.in_sp_st[d];
        flat = flat * w.in_sp[d] + sp_pos[d];
      }
      const T v = in[off];
      const A a = ld(&v);
      if (max) {
        if (!have || a > best_a || is_nan(a)) {
          best = v, best_a = a, best_i = flat, have = true;
        }
      } else {
        sum += static_cast<double>(a);
      }
      if (!ops::pool_next(w, r, sp_pos)) break;
    }
    if (max) {
      out[out_off] = best;  // (a window is never empty for arguments the plan accepts)
      if (indices != nullptr) indices[out_off] = best_i;
    } else {
      out[out_off] = cvt<T>(div == 0 ? 0.0 : sum / static_cast<double>(div));
    }
  }
}

constexpr int kMmTile = 16;

// One 16 x 16 tile of out per block, K in steps of 16 through shared memory.
template <class T, class W, class A>
__global__ void small_mm_kernel(const T* a, const W* b, bool b_transposed, const T* scales, void* out_raw,
                                MatmulSpec sp) {
  __shared__ A ta[kMmTile][kMmTile];
  __shared__ A tb[kMmTile][kMmTile + 1];
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kMmTile + threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kMmTile + threadIdx.x;
  A acc = 0;
  for (int64_t k0 = 0; k0 < sp.k; k0 += kMmTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] = (row < sp.m && ka < sp.k) ? static_cast<A>(ld(&a[row * sp.a_st[0] + ka * sp.a_st[1]])) : A(0);
    // b as [K, N] (b_st over k, n) or, transposed, as [N, K] (b_st over n, k)
    const int64_t boff = b_transposed ? col * sp.b_st[0] + kb * sp.b_st[1] : kb * sp.b_st[0] + col * sp.b_st[1];
    tb[threadIdx.y][threadIdx.x] = (col < sp.n && kb < sp.k) ? static_cast<A>(b[boff]) : A(0);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kMmTile; ++j) acc += ta[threadIdx.y][j] * tb[j][threadIdx.x];
    __syncthreads();
  }
  if (row >= sp.m || col >= sp.n) return;
  const int64_t o = row * sp.out_st[0] + col * sp.out_st[1];
  if constexpr (std::is_same<W, int8_t>::value && std::is_same<T, int8_t>::value) {
    static_cast<int32_t*>(out_raw)[o] = static_cast<int32_t>(acc);
  } else {
    const float scaled = static_cast<float>(acc) * static_cast<float>(ld(&scales[col * sp.scale_step]));
    static_cast<T*>(out_raw)[o] = cvt<T>(scaled);
  }
}

dim3 mm_grid(const MatmulSpec& s) {
  const int64_t gx = (s.n + kMmTile - 1) / kMmTile, gy = (s.m + kMmTile - 1) / kMmTile;
  if (gx > 0x7fffffff || gy > 65535) throw Error("int8 matrix product on cuda: " + std::to_string(s.m) + " x " +
                                                 std::to_string(s.n) + " is too large");
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
}

}  // namespace

void launch_pool(int32_t dtype, const void* in, void* out, int64_t* indices, const PoolSpec& spec,
                 cudaStream_t stream) {
  if (spec.total == 0) return;
  const bool max = ops::pool_is_max(spec.w);
  auto go = [&](auto tag) {
    using T = decltype(tag);
    pool_kernel<T><<<grid_for(spec.total, 256), 256, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out),
                                                                  indices, spec);
  };
  if (max) {
    dispatch_real(dtype, "max pooling", go);
  } else {
    dispatch_float(dtype, "average pooling", go);
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_int_mm(const int8_t* a, const int8_t* b, int32_t* out, const MatmulSpec& spec, cudaStream_t stream) {
  if (spec.m == 0 || spec.n == 0) return;  // k == 0: the kernel writes the empty sums, zeros
  small_mm_kernel<int8_t, int8_t, int32_t>
      <<<mm_grid(spec), dim3(kMmTile, kMmTile), 0, stream>>>(a, b, false, nullptr, out, spec);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_weight_int8pack_mm(int32_t dtype, const void* a, const int8_t* w, const void* scales, void* out,
                               const MatmulSpec& spec, cudaStream_t stream) {
  if (spec.m == 0 || spec.n == 0) return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    small_mm_kernel<T, int8_t, float><<<mm_grid(spec), dim3(kMmTile, kMmTile), 0, stream>>>(
        static_cast<const T*>(a), w, true, static_cast<const T*>(scales), out, spec);
  };
  switch (dtype) {
    case dtype_code::kFloat32: go(float{}); break;
    case dtype_code::kFloat16: go(__half{}); break;
    case dtype_code::kBFloat16: go(__nv_bfloat16{}); break;
    default: unsupported("_weight_int8pack_mm", dtype, "float32, float16, bfloat16");
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

namespace {

// --- complex magnitude and phase; scaling -----------------------------------------------------------

// R: the part type (float, double). A complex element is two R's; strides count elements.
template <class R>
__global__ void complex_abs_kernel(const R* in, R* out, StridedSpec s, int64_t numel, bool complex_in, bool angle) {
  GRID_LOOP(i, numel) {
    int64_t dst, src;
    strided_offsets(s, i, dst, src);
    R r;
    if (complex_in) {
      const R re = in[2 * src], im = in[2 * src + 1];
      r = angle ? atan2(im, re) : hypot(re, im);
    } else {  // ATen's angle of a real number: 0, or pi for negatives; NaN stays NaN
      const R x = in[src];
      r = !angle ? fabs(x) : (isnan(x) ? x : (x < R(0) ? static_cast<R>(3.14159265358979323846) : R(0)));
    }
    out[dst] = r;
  }
}

template <class R>
__global__ void scale_kernel(R* p, int64_t n, R scale) {
  GRID_LOOP(i, n) p[i] *= scale;
}

}  // namespace

void launch_complex_abs(int32_t dtype, const void* in, void* out, const StridedSpec& spec, int64_t numel, bool angle,
                        cudaStream_t stream) {
  if (numel == 0) return;
  const unsigned grid = grid_for(numel, 256);
  switch (dtype) {
    case dtype_code::kComplex64:
    case dtype_code::kFloat32:
      complex_abs_kernel<float><<<grid, 256, 0, stream>>>(static_cast<const float*>(in), static_cast<float*>(out), spec,
                                                          numel, dtype == dtype_code::kComplex64, angle);
      break;
    case dtype_code::kComplex128:
    case dtype_code::kFloat64:
      complex_abs_kernel<double><<<grid, 256, 0, stream>>>(static_cast<const double*>(in), static_cast<double*>(out),
                                                           spec, numel, dtype == dtype_code::kComplex128, angle);
      break;
    default: unsupported(angle ? "angle" : "abs", dtype, "complex64, complex128, float32, float64");
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_scale(int32_t dtype, void* p, int64_t n, double scale, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == dtype_code::kFloat32) {
    scale_kernel<float><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<float*>(p), n, static_cast<float>(scale));
  } else if (dtype == dtype_code::kFloat64) {
    scale_kernel<double><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<double*>(p), n, scale);
  } else {
    unsupported("scaling", dtype, "float32, float64");
  }
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace aoti_host
