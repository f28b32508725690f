// Scans along a dimension: cumulative sums, products, maxima and minima (scan.cpp).
#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

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

}  // namespace

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

}  // namespace cuda
}  // namespace aoti_host
