#include "shims/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "shims/cpu/simd.h"

namespace aoti_host {
namespace cpu {
namespace {

#if AOTI_X86_SIMD
// gcc 12 reports its own headers' _mm512_undefined_ps() (behind roundscale/scalef/max/reduce) as
// "may be used uninitialized" once inlined here: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// exp(x) for x <= 0 region and beyond (Cephes expf's polynomial, 2^n through scalef: underflows to 0).
__attribute__((target("avx512f"))) inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) float softmax_row_avx512(float* row, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmax = ninf;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, m, row + j));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill_n(row, n, 0.0f);
    return mx;
  }
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_mask_loadu_ps(vmx, m, row + j), vmx));
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    _mm512_mask_storeu_ps(row + j, m, e);
  }
  const float sum = _mm512_reduce_add_ps(vsum);
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv));
  }
  return mx + std::log(sum);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

float softmax_row(float* row, int64_t n) {
#if AOTI_X86_SIMD
  if (cpu_has_avx512f()) return softmax_row_avx512(row, n);
#endif
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  if (mx == ninf) {
    std::fill_n(row, n, 0.0f);
    return ninf;
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - mx));
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  return mx + std::log(sum);
}

}  // namespace cpu
}  // namespace aoti_host
