// The int8 matrix products (quant.cpp): one 16 x 16 tile of the output per block.
#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

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

}  // namespace cuda
}  // namespace aoti_host
