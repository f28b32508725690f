#include "shims/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "shims/cpu/simd_math.h"

namespace aoti_host {
namespace cpu {
namespace {

#if AOTI_X86_SIMD
// gcc 12 reports its own headers' _mm512_undefined_ps() (behind max/reduce) as "may be used uninitialized"
// once inlined here: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(vmx, m, row + j), vmx));
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

// The same three passes on 8 floats at a time; the tail (n % 8) reads through a lane mask, so a row of
// any length stays in one vector loop.
__attribute__((target("avx2,fma"))) float softmax_row_avx2(float* row, int64_t n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t body = n & ~int64_t{7}, tail = n - body;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i tmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(tail)), lanes);
  __m256 vmax = _mm256_set1_ps(ninf);
  for (int64_t j = 0; j < body; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
  if (tail) {
    const __m256 t = _mm256_blendv_ps(_mm256_set1_ps(ninf), _mm256_maskload_ps(row + body, tmask),
                                      _mm256_castsi256_ps(tmask));
    vmax = _mm256_max_ps(vmax, t);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float mx = _mm_cvtss_f32(m4);
  if (mx == ninf) {
    std::fill_n(row, n, 0.0f);
    return mx;
  }
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmx));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_storeu_ps(row + j, e);
  }
  if (tail) {
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(row + body, tmask), vmx)),
                                   _mm256_castsi256_ps(tmask));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_maskstore_ps(row + body, tmask, e);
  }
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(vsum), _mm256_extractf128_ps(vsum, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
  const float sum = _mm_cvtss_f32(s4);
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (int64_t j = 0; j < body; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
  if (tail) _mm256_maskstore_ps(row + body, tmask, _mm256_mul_ps(_mm256_maskload_ps(row + body, tmask), inv));
  return mx + std::log(sum);
}
#endif

}  // namespace

float softmax_row(float* row, int64_t n) {
#if AOTI_X86_SIMD
  if (cpu_has_avx512f()) return softmax_row_avx512(row, n);
  if (cpu_has_avx2_fma()) return softmax_row_avx2(row, n);
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
