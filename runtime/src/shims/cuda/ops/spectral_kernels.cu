// Complex magnitude and phase, and scaling (spectral.cpp).
#include <cmath>

#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

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
