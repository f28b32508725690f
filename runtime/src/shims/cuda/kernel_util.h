// Device-side helpers of the CUDA kernels (kernels.cu, ops/*_kernels.cu; nvcc only): accumulator types, loads
// and stores that convert through them, grid sizes, and dispatch from a dtype code to the element type. Every
// kernel takes element strides, so strided and transposed operands need no copies; accumulation is in float
// (double for float64, int64 for integers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "shims/cuda/cuda_util.h"
#include "shims/cuda/ops/kernels.h"

namespace aoti_host {
namespace cuda {

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

// An accumulator value A stored as T: half and bfloat16 round from float (and int64 through float), or directly
// from double.
template <class T, class A>
__device__ __forceinline__ T cvt(A v) {
  constexpr bool half = std::is_same<T, __half>::value, bf16 = std::is_same<T, __nv_bfloat16>::value;
  constexpr bool via_float = std::is_same<A, float>::value || std::is_same<A, int64_t>::value;
  if constexpr (half && std::is_same<A, double>::value) {
    return __double2half(v);
  } else if constexpr (half && via_float) {
    return __float2half(static_cast<float>(v));
  } else if constexpr (bf16 && std::is_same<A, double>::value) {
    return __double2bfloat16(v);
  } else if constexpr (bf16 && via_float) {
    return __float2bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The offset, in elements, of line `line` of tensor `which` of a LineSpec.
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

inline unsigned grid_for(int64_t work, unsigned block) {
  int64_t g = (work + block - 1) / block;
  return static_cast<unsigned>(g > 65535 * 8 ? 65535 * 8 : (g < 1 ? 1 : g));
}

#define GRID_LOOP(i, n)                                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

[[noreturn]] inline void unsupported(const char* op, int32_t dtype, const char* supported) {
  throw Error(std::string(op) + " on cuda: dtype " + dtype_name(dtype) + " is not supported (" + supported + ")");
}

// Calls f(T{}) with the C++ type of a floating dtype code; false for any other code.
template <class F>
bool dispatch_floating(int32_t dtype, F&& f) {
  switch (dtype) {
    case dtype_code::kFloat32: return f(float{}), true;
    case dtype_code::kFloat64: return f(double{}), true;
    case dtype_code::kFloat16: return f(__half{}), true;
    case dtype_code::kBFloat16: return f(__nv_bfloat16{}), true;
    default: return false;
  }
}
template <class F>
void dispatch_float(int32_t dtype, const char* op, F&& f) {
  if (!dispatch_floating(dtype, f)) unsupported(op, dtype, "float32, float64, float16, bfloat16");
}
// The floating types, int32 and int64.
template <class F>
void dispatch_real(int32_t dtype, const char* op, F&& f) {
  if (dtype == dtype_code::kInt32) return f(int32_t{});
  if (dtype == dtype_code::kInt64) return f(int64_t{});
  if (!dispatch_floating(dtype, f)) unsupported(op, dtype, "float32, float64, float16, bfloat16, int32, int64");
}

}  // namespace cuda
}  // namespace aoti_host
