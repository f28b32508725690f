// ATen's pooling windows, one definition for the CPU kernels (pool.cpp) and the CUDA ones
// (cuda/ops/pool_kernels.cu): which input positions each output position of max_pool2d_with_indices,
// adaptive_max_pool2d/3d, _adaptive_avg_pool2d/3d and avg_pool2d/3d reads, and the averages' divisor. Plain data
// and inline functions only, so nvcc compiles the same code for the device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define AOTI_POOL_FN __host__ __device__ inline
#else
#define AOTI_POOL_FN inline
#endif

namespace aoti_host {
namespace ops {

constexpr int kPoolMaxDims = 3;

enum class PoolKind : int32_t { kMax, kAdaptiveMax, kAdaptiveAvg, kAvg };

// What a pooling op computes, per spatial dimension (2 or 3 of them); the arguments already checked.
struct PoolWindows {
  PoolKind kind;
  int nd;
  int64_t in_sp[kPoolMaxDims], out_sp[kPoolMaxDims];
  int64_t k[kPoolMaxDims], s[kPoolMaxDims], pad[kPoolMaxDims], dil[kPoolMaxDims];  // max and avg
  bool count_include_pad;                                                          // avg
  bool has_divisor;                                                                // avg: divisor_override
  int64_t divisor;
};

AOTI_POOL_FN bool pool_is_max(const PoolWindows& w) {
  return w.kind == PoolKind::kMax || w.kind == PoolKind::kAdaptiveMax;
}

// The input positions lo, lo + step, ... < hi that output position `pos` of dimension d reads, and for
// avg_pool the window's length counting padding (span).
struct PoolRange {
  int64_t lo, hi, step, span;
};

AOTI_POOL_FN PoolRange pool_range(const PoolWindows& w, int d, int64_t pos) {
  const int64_t in = w.in_sp[d], out = w.out_sp[d];
  PoolRange r{0, 0, 1, 0};
  switch (w.kind) {
    case PoolKind::kMax: {  // dilated window, padding never read
      int64_t start = pos * w.s[d] - w.pad[d];
      const int64_t end = start + (w.k[d] - 1) * w.dil[d] + 1;
      r.hi = end < in ? end : in;
      while (start < 0) start += w.dil[d];
      r.lo = start;
      r.step = w.dil[d];
      break;
    }
    case PoolKind::kAdaptiveMax:
    case PoolKind::kAdaptiveAvg:  // ATen's start_index / end_index
      r.lo = pos * in / out;
      r.hi = ((pos + 1) * in + out - 1) / out;
      break;
    case PoolKind::kAvg: {
      const int64_t a = pos * w.s[d] - w.pad[d];
      const int64_t b = a + w.k[d] < in + w.pad[d] ? a + w.k[d] : in + w.pad[d];
      r.span = b - a;
      r.lo = a > 0 ? a : 0;
      r.hi = b < in ? b : in;
      break;
    }
  }
  return r;
}

// Steps pos (one index per dim, starting at each range's lo) to the next input position the ranges cover,
// last dim fastest; false once they are all visited.
AOTI_POOL_FN bool pool_next(const PoolWindows& w, const PoolRange* r, int64_t* pos) {
  for (int d = w.nd - 1; d >= 0; --d) {
    pos[d] += r[d].step;
    if (pos[d] < r[d].hi) return true;
    pos[d] = r[d].lo;
  }
  return false;
}

// The divisor of an averaging window whose ranges are r[0..nd): avg_pool's divisor_override, else the
// window's size counting padding or not; an adaptive window's element count (it has neither override nor
// padding); 0 when the window holds no input element (the output is then 0).
AOTI_POOL_FN int64_t avg_divisor(const PoolWindows& w, const PoolRange* r) {
  int64_t span = 1, real = 1;
  for (int d = 0; d < w.nd; ++d) {
    span *= r[d].span;
    real *= r[d].hi > r[d].lo ? r[d].hi - r[d].lo : 0;
  }
  if (real == 0) return 0;
  if (w.has_divisor) return w.divisor;
  return w.count_include_pad ? span : real;
}

}  // namespace ops
}  // namespace aoti_host
