// The fused attention kernel and the softmax of the cuBLAS path (attention.cpp, matmul.cpp).
#include <cfloat>
#include <cmath>

#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

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

}  // namespace

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

}  // namespace cuda
}  // namespace aoti_host
