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
    // 32-bit index arithmetic: a tile has at most kAttnTile * kMaxHeadDim elements
    const int tni = static_cast<int>(tn), dki = static_cast<int>(dk), dvi = static_cast<int>(dv);
    for (int e = static_cast<int>(threadIdx.x); e < tni * dki; e += static_cast<int>(blockDim.x)) {
      const int j = e / dki, d = e - j * dki;
      ks[j * (dki + 1) + d] = ld(kb + (t0 + j) * s.k_st[2] + d * s.k_st[3]);
    }
    for (int e = static_cast<int>(threadIdx.x); e < tni * dvi; e += static_cast<int>(blockDim.x)) {
      const int j = e / dvi, d = e - j * dvi;
      vs[j * (dvi + 1) + d] = ld(vb + (t0 + j) * s.v_st[2] + d * s.v_st[3]);
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

// The GEMM path's softmax. Rows of up to kRowRegMax scores: `tpr` threads a row (a warp, or several warps of
// one block), each holding its C float4 chunks in registers, so the scores are read once and the probabilities
// written once, with one exp per score; max, sum and lse come from shuffles (and shared memory across warps).
// Longer rows: one block a row in two passes (attention_softmax_long_kernel).
constexpr int kSoftmaxBlock = 256;
constexpr int kRowChunks = 8;                                   // float4 chunks a thread holds at most
constexpr int kRowThreadsMax = 1024;                            // threads a row at most
constexpr int64_t kRowRegMax = int64_t{kRowThreadsMax} * 4 * kRowChunks;

template <class T>
__device__ __forceinline__ float add_bias(float x, const void* bias, const AttentionSpec& s, int64_t bo) {
  if (s.bias_dtype == dtype_code::kBool) return static_cast<const bool*>(bias)[bo] ? x : -INFINITY;
  return x + static_cast<float>(ld(static_cast<const T*>(bias) + bo));
}

template <class T>
__device__ __forceinline__ void store4(T* p, const float (&v)[4]) {
#pragma unroll
  for (int u = 0; u < 4; ++u) p[u] = cvt<T, float>(v[u]);
}
template <>
__device__ __forceinline__ void store4<float>(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

// Row R of the batch (entry e = R / rows, query row i0 + R % rows) starts at scores + e * entry_st + (R % rows) * ld;
// ld and entry_st are multiples of 4 and scores is 16-byte aligned, so float4 accesses are aligned.
template <class T, int C>
__global__ void __launch_bounds__(kRowThreadsMax)
    attention_softmax_rows_kernel(float* scores, T* probs, float* lse, const void* bias, AttentionSpec s, int64_t i0,
                                  int64_t rows, int64_t bh0, int64_t total_rows, int64_t ld, int64_t entry_st,
                                  int tpr) {
  __shared__ float red[kRowThreadsMax / 32];
  const int rows_per_block = static_cast<int>(blockDim.x) / tpr;
  const int t = static_cast<int>(threadIdx.x) % tpr, slot = static_cast<int>(threadIdx.x) / tpr;
  const int64_t R = static_cast<int64_t>(blockIdx.x) * rows_per_block + slot;
  const bool live = R < total_rows;
  const int64_t e = live ? R / rows : 0, r = live ? R % rows : 0;
  const int64_t i = i0 + r, bh = bh0 + e, b = bh / s.h, h = bh % s.h;
  const int64_t off = e * entry_st + r * ld;
  int64_t n_vis = s.n;
  if (s.causal) {
    const int64_t last = i + s.causal_offset + 1;
    n_vis = last < 0 ? 0 : (last < s.n ? last : s.n);
  }
  if (!live) n_vis = 0;
  const int64_t bias_row = b * s.bias_st[0] + h * s.bias_st[1] + i * s.bias_st[2];
  float x[C][4];
  float m = -INFINITY;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t j = (static_cast<int64_t>(c) * tpr + t) * 4;
    if (j < n_vis) {
      const float4 f = *reinterpret_cast<const float4*>(scores + off + j);
      x[c][0] = f.x, x[c][1] = f.y, x[c][2] = f.z, x[c][3] = f.w;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (j + u >= n_vis) {
        x[c][u] = -INFINITY;
      } else if (s.bias_dtype >= 0) {
        x[c][u] = add_bias<T>(x[c][u], bias, s, bias_row + (j + u) * s.bias_st[3]);
      }
      m = fmaxf(m, x[c][u]);
    }
  }
  const int warps = tpr / 32, lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (warps > 1) {
    if (lane == 0) red[warp] = m;
    __syncthreads();
    for (int w = 0; w < warps; ++w) m = fmaxf(m, red[slot * warps + w]);
    __syncthreads();  // red is reused for the sum
  }
  float l = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      x[c][u] = x[c][u] == -INFINITY ? 0.f : expf(x[c][u] - m);
      l += x[c][u];
    }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  if (warps > 1) {
    if (lane == 0) red[warp] = l;
    __syncthreads();
    l = 0.f;
    for (int w = 0; w < warps; ++w) l += red[slot * warps + w];
  }
  if (!live) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  const int64_t n_row = s.n;  // the row's width in the products' view: keys past n_vis get 0
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t j = (static_cast<int64_t>(c) * tpr + t) * 4;
    if (j >= n_row) continue;
    float p[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) p[u] = x[c][u] * inv;
    store4<T>(probs + off + j, p);  // probs may alias scores (float32): these were this thread's reads
  }
  if (lse != nullptr && t == 0)
    lse[b * s.lse_st[0] + h * s.lse_st[1] + i * s.lse_st[2]] = l > 0.f ? m + logf(l) : INFINITY;
}

__device__ __forceinline__ void softmax_combine(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.f : l * expf(m - mx)) + (m2 == -INFINITY ? 0.f : l2 * expf(m2 - mx));
  m = mx;
}

// Rows too long for registers: pass 1 keeps a running (max, sum of exp) of the biased scores per thread; the
// block combines them; pass 2 writes the normalized probabilities.
template <class T>
__global__ void __launch_bounds__(kSoftmaxBlock)
    attention_softmax_long_kernel(float* scores, T* probs, float* lse, const void* bias, AttentionSpec s, int64_t i0,
                                  int64_t rows, int64_t bh0, int64_t ld, int64_t entry_st) {
  __shared__ float red_m[kSoftmaxBlock / 32], red_l[kSoftmaxBlock / 32];
  const int64_t row = blockIdx.x;
  const int64_t e = row / rows, r = row % rows, i = i0 + r;
  const int64_t bh = bh0 + e, b = bh / s.h, h = bh % s.h;
  float* srow = scores + e * entry_st + r * ld;
  T* prow = probs + e * entry_st + r * ld;
  int64_t n_vis = s.n;
  if (s.causal) {
    const int64_t last = i + s.causal_offset + 1;
    n_vis = last < 0 ? 0 : (last < s.n ? last : s.n);
  }
  const int64_t bias_row = b * s.bias_st[0] + h * s.bias_st[1] + i * s.bias_st[2];
  auto score = [&](int64_t j) {
    const float x = srow[j];
    return s.bias_dtype >= 0 ? add_bias<T>(x, bias, s, bias_row + j * s.bias_st[3]) : x;
  };
  float m = -INFINITY, l = 0.f;
  for (int64_t j = threadIdx.x; j < n_vis; j += blockDim.x) {
    const float x = score(j);
    if (x == -INFINITY) continue;
    if (x > m) {
      l = (m == -INFINITY ? 0.f : l * expf(m - x)) + 1.f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
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

__global__ void attention_pointers_kernel(void** out, AttentionPtrSpec s) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= s.count) return;
  const int64_t bh = s.bh0 + e, b = bh / s.heads, h = bh % s.heads;
  const int64_t b0 = s.bh0 / s.heads, h0 = s.bh0 % s.heads;
  for (int t = 0; t < 6; ++t) {
    const int64_t rel = (b - b0) * s.st0[t] + (h - h0) * s.st1[t];
    char* p = const_cast<char*>(s.base[t]) + rel;
    if (t < 4) {
      out[t * s.count + e] = p;
      continue;
    }
    for (int64_t kb = 0; kb < s.blocks; ++kb) out[(4 + 2 * kb + (t - 4)) * s.count + e] = p + kb * s.row_step[t - 4];
  }
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

void launch_attention_pointers(void** out, const AttentionPtrSpec& spec, cudaStream_t stream) {
  if (spec.count == 0) return;
  const int64_t blocks = (spec.count + 255) / 256;
  attention_pointers_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(out, spec);
  AOTI_CUDA_CHECK(cudaGetLastError());
}

void launch_attention_softmax(int32_t dtype, float* scores, void* probs, float* lse, const void* bias,
                              const AttentionSpec& spec, int64_t i0, int64_t rows, int64_t bh0, int64_t batch,
                              int64_t ld, int64_t entry_st, cudaStream_t stream) {
  const int64_t total = rows * batch;
  if (total == 0) return;
  if (ld % 4 != 0 || entry_st % 4 != 0 || reinterpret_cast<uintptr_t>(scores) % 16 != 0 || ld < spec.n)
    throw Error("attention on cuda: internal error: the softmax's scores are not laid out in aligned rows");
  if (dtype == dtype_code::kFloat64) unsupported("scaled_dot_product_attention", dtype, "float32, float16, bfloat16");
  // threads a row and float4 chunks a thread: the fewest threads (a warp at least) that hold the row in at most
  // 4 chunks each (8 spill under the 1024-thread bound), up to kRowThreadsMax; then the fewest chunks
  int tpr = 32;
  while (static_cast<int64_t>(tpr) * 4 * 4 < spec.n && tpr < kRowThreadsMax) tpr *= 2;
  int chunks = 1;
  while (static_cast<int64_t>(tpr) * 4 * chunks < spec.n && chunks < kRowChunks) chunks *= 2;
  const bool in_registers = spec.n <= kRowRegMax;
  const int block = tpr > kSoftmaxBlock ? tpr : kSoftmaxBlock;
  const int64_t blocks = in_registers ? (total + block / tpr - 1) / (block / tpr) : total;
  if (blocks > 0x7fffffff) throw Error("attention on cuda: " + std::to_string(total) + " rows of scores are too many");
  dispatch_float(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(probs);
    const unsigned g = static_cast<unsigned>(blocks);
    if (!in_registers) {
      attention_softmax_long_kernel<T><<<g, kSoftmaxBlock, 0, stream>>>(scores, p, lse, bias, spec, i0, rows, bh0,
                                                                        ld, entry_st);
      return;
    }
    switch (chunks) {
#define AOTI_ATTN_SOFTMAX(C)                                                                                  \
  case C:                                                                                                    \
    attention_softmax_rows_kernel<T, C><<<g, block, 0, stream>>>(scores, p, lse, bias, spec, i0, rows, bh0, total, \
                                                                 ld, entry_st, tpr);                          \
    break;
      AOTI_ATTN_SOFTMAX(1)
      AOTI_ATTN_SOFTMAX(2)
      AOTI_ATTN_SOFTMAX(4)
      default: AOTI_ATTN_SOFTMAX(8)
#undef AOTI_ATTN_SOFTMAX
    }
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace aoti_host
