// Vector math of the CPU kernels, one algorithm at both x86 vector widths: exp8 (AVX2 + FMA, 8 floats)
// and exp16 (AVX-512F, 16 floats). Each is compiled with its target attribute; call it only from a kernel
// of the same target that the CPU was checked to have (simd.h's cpu_has_*).
#pragma once

#include "shims/cpu/simd.h"

#if AOTI_X86_SIMD

namespace aoti_host {
namespace cpu {

// Cephes expf: n = round(x * log2(e)), r = x - n * ln(2) (ln(2) in two parts, so r stays exact), exp(r) by
// a degree-6 polynomial on |r| <= ln(2)/2, times 2^n. Within 2 ulp of expf where the result is normal.
namespace cephes_exp {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                         4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
constexpr float kMax = 88.3762626647949f;  // expf overflows above
}  // namespace cephes_exp

// The min/max below take x as their second operand: x86's min/max return the second operand when either is
// NaN, so a NaN input stays NaN (a softmax row holding one comes out NaN, as ATen's does).

// exp of 8 floats. 2^n is built in the exponent bits, so n must stay in [-127, 127]: x is clamped to
// [-88, 88] (above, exp(88) ~ 1.65e38 instead of up to FLT_MAX or inf; below -87.3, 0 or a tiny normal
// instead of a denormal: the softmax and sigmoid/tanh callers saturate long before either).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 exp8(__m256 x) {
  using namespace cephes_exp;
  x = _mm256_max_ps(_mm256_set1_ps(-88.0f), _mm256_min_ps(_mm256_set1_ps(88.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#if defined(__GNUC__) && !defined(__clang__)
// gcc 12 reports its own headers' _mm512_undefined_ps() (behind roundscale/scalef) as "may be used
// uninitialized" once inlined: a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// exp of 16 floats; 2^n through scalef, so results underflow gradually to 0 (x clamped to [-104, kMax]).
__attribute__((target("avx512f"), always_inline)) inline __m512 exp16(__m512 x) {
  using namespace cephes_exp;
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(kMax), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace cpu
}  // namespace aoti_host

#endif  // AOTI_X86_SIMD
