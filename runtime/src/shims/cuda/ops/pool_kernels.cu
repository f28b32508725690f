// Pooling windows, max and average (pool.cpp).
#include <cfloat>
#include <cmath>

#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
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

}  // namespace cuda
}  // namespace aoti_host
