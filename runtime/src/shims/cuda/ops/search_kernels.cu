// searchsorted, the two passes of nonzero and masked_select, histc and repeat_interleave (search.cpp).
#include <cfloat>
#include <cmath>

#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

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

}  // namespace

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

}  // namespace cuda
}  // namespace aoti_host
