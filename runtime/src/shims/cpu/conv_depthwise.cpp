#include "shims/cpu/conv_depthwise.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "shims/cpu/simd.h"
#include "shims/cpu/strided.h"

namespace aoti_host {
namespace cpu {
namespace {

// One output row (n, od, oh) of a channels-last depthwise convolution: the taps (kd, kh) whose input row
// lies inside, and everything along w. Channels are contiguous in x, w's rows and y.
template <typename T>
struct Row {
  const T* x;           // sample n of the (channels-last) input
  int64_t xs_w;         // between input positions along w
  const int64_t* roff;  // per valid (kd, kh): offset of input row (id, ih) from x
  const int64_t* rtap;  // per valid (kd, kh): index of its first tap, (kd * Kh + kh) * Kw
  int64_t nr;
  const T* w;     // [taps][C]
  const T* bias;  // [C] or null
  T* y;           // output row (n, od, oh)
  int64_t ys_w;   // between output positions along w
  int64_t C, Kw, Sw, Pw, Dw, Iw, Ow;
  int64_t ow_lo, ow_hi;  // output positions [ow_lo, ow_hi) have every tap along w inside
};

// Any T, any CPU: per position, channel loops the compiler can vectorise.
template <typename T>
void row_generic(const Row<T>& r) {
  for (int64_t ow = 0; ow < r.Ow; ++ow) {
    T* y = r.y + ow * r.ys_w;
    for (int64_t c = 0; c < r.C; ++c) y[c] = r.bias != nullptr ? r.bias[c] : T(0);
    const int64_t iw0 = ow * r.Sw - r.Pw;
    for (int64_t t = 0; t < r.nr; ++t) {
      for (int64_t kw = 0; kw < r.Kw; ++kw) {
        const int64_t iw = iw0 + kw * r.Dw;
        if (iw < 0 || iw >= r.Iw) continue;
        const T* x = r.x + r.roff[t] + iw * r.xs_w;
        const T* w = r.w + (r.rtap[t] + kw) * r.C;
        for (int64_t c = 0; c < r.C; ++c) y[c] += x[c] * w[c];
      }
    }
  }
}

#if AOTI_X86_SIMD
// 8 channels at c; Full: all 8 exist, else the masked tail (masked stores are slow on some CPUs: only
// the last block of a row takes them).
template <bool Full>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 load8(const float* p, __m256i m) {
  if constexpr (Full) {
    (void)m;
    return _mm256_loadu_ps(p);
  } else {
    return _mm256_maskload_ps(p, m);
  }
}
template <bool Full>
__attribute__((target("avx2,fma"), always_inline)) inline void store8(float* p, __m256i m, __m256 v) {
  if constexpr (Full) {
    (void)m;
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, m, v);
  }
}

// One position near the input's edges: the taps along w that land inside, [k0, k1), found once for the
// position rather than tested per tap and row (on LRASPP's 14-wide dilated maps most positions are edges).
template <bool Full>
__attribute__((target("avx2,fma"))) void position8(const Row<float>& r, int64_t ow, int64_t c, __m256i m,
                                                   __m256 init) {
  __m256 acc = init;
  const int64_t iw0 = ow * r.Sw - r.Pw;
  const int64_t k0 = iw0 < 0 ? (-iw0 + r.Dw - 1) / r.Dw : 0;
  const int64_t k1 = iw0 >= r.Iw ? 0 : std::min<int64_t>(r.Kw, (r.Iw - 1 - iw0) / r.Dw + 1);
  const int64_t xstep = r.Dw * r.xs_w;
  for (int64_t t = 0; t < r.nr; ++t) {
    const float* xp = r.x + r.roff[t] + (iw0 + k0 * r.Dw) * r.xs_w + c;
    const float* wt = r.w + (r.rtap[t] + k0) * r.C + c;
    for (int64_t kw = k0; kw < k1; ++kw, xp += xstep, wt += r.C)
      acc = _mm256_fmadd_ps(load8<Full>(xp, m), load8<Full>(wt, m), acc);
  }
  store8<Full>(r.y + ow * r.ys_w + c, m, acc);
}

// Four interior positions: each weight vector loaded once for the four.
template <bool Full>
__attribute__((target("avx2,fma"))) void quad8(const Row<float>& r, int64_t ow, int64_t c, __m256i m, __m256 init) {
  __m256 a0 = init, a1 = init, a2 = init, a3 = init;
  const int64_t step = r.Sw * r.xs_w, dstep = r.Dw * r.xs_w;
  for (int64_t t = 0; t < r.nr; ++t) {
    const float* xp = r.x + r.roff[t] + (ow * r.Sw - r.Pw) * r.xs_w + c;
    const float* wt = r.w + r.rtap[t] * r.C + c;
    for (int64_t kw = 0; kw < r.Kw; ++kw, xp += dstep, wt += r.C) {
      const __m256 wv = load8<Full>(wt, m);
      a0 = _mm256_fmadd_ps(load8<Full>(xp, m), wv, a0);
      a1 = _mm256_fmadd_ps(load8<Full>(xp + step, m), wv, a1);
      a2 = _mm256_fmadd_ps(load8<Full>(xp + 2 * step, m), wv, a2);
      a3 = _mm256_fmadd_ps(load8<Full>(xp + 3 * step, m), wv, a3);
    }
  }
  float* y = r.y + ow * r.ys_w + c;
  store8<Full>(y, m, a0);
  store8<Full>(y + r.ys_w, m, a1);
  store8<Full>(y + 2 * r.ys_w, m, a2);
  store8<Full>(y + 3 * r.ys_w, m, a3);
}

template <bool Full>
__attribute__((target("avx2,fma"))) void block8(const Row<float>& r, int64_t c) {
  const int64_t n = std::min<int64_t>(8, r.C - c);
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 init = r.bias != nullptr ? load8<Full>(r.bias + c, m) : _mm256_setzero_ps();
  for (int64_t ow = 0; ow < r.Ow;) {
    if (ow >= r.ow_lo && ow + 4 <= r.ow_hi) {
      quad8<Full>(r, ow, c, m, init);
      ow += 4;
    } else {
      position8<Full>(r, ow, c, m, init);
      ++ow;
    }
  }
}

// One position, 32 channels from c (four whole blocks): the valid taps along w found once for the four,
// each tap a weight load and a multiply-add per block (edge positions, and interior ones left over
// from the quads).
__attribute__((target("avx2,fma"))) void position32(const Row<float>& r, int64_t ow, int64_t c) {
  __m256 a0, a1, a2, a3;
  if (r.bias != nullptr) {
    a0 = _mm256_loadu_ps(r.bias + c), a1 = _mm256_loadu_ps(r.bias + c + 8);
    a2 = _mm256_loadu_ps(r.bias + c + 16), a3 = _mm256_loadu_ps(r.bias + c + 24);
  } else {
    a0 = a1 = a2 = a3 = _mm256_setzero_ps();
  }
  const int64_t iw0 = ow * r.Sw - r.Pw;
  const int64_t k0 = iw0 < 0 ? (-iw0 + r.Dw - 1) / r.Dw : 0;
  const int64_t k1 = iw0 >= r.Iw ? 0 : std::min<int64_t>(r.Kw, (r.Iw - 1 - iw0) / r.Dw + 1);
  const int64_t xstep = r.Dw * r.xs_w;
  for (int64_t t = 0; t < r.nr; ++t) {
    const float* xp = r.x + r.roff[t] + (iw0 + k0 * r.Dw) * r.xs_w + c;
    const float* wt = r.w + (r.rtap[t] + k0) * r.C + c;
    for (int64_t kw = k0; kw < k1; ++kw, xp += xstep, wt += r.C) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wt), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wt + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wt + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wt + 24), a3);
    }
  }
  float* y = r.y + ow * r.ys_w + c;
  _mm256_storeu_ps(y, a0);
  _mm256_storeu_ps(y + 8, a1);
  _mm256_storeu_ps(y + 16, a2);
  _mm256_storeu_ps(y + 24, a3);
}

// Four interior positions, 16 channels from c (two whole blocks): each pair of weight vectors loaded once
// for the four.
__attribute__((target("avx2,fma"))) void quad16(const Row<float>& r, int64_t ow, int64_t c) {
  __m256 a[4][2];
  const __m256 b0 = r.bias != nullptr ? _mm256_loadu_ps(r.bias + c) : _mm256_setzero_ps();
  const __m256 b1 = r.bias != nullptr ? _mm256_loadu_ps(r.bias + c + 8) : _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) a[q][0] = b0, a[q][1] = b1;
  const int64_t step = r.Sw * r.xs_w, dstep = r.Dw * r.xs_w;
  const int64_t x0 = (ow * r.Sw - r.Pw) * r.xs_w + c;
  for (int64_t t = 0; t < r.nr; ++t) {
    const float* xp = r.x + r.roff[t] + x0;
    const float* wt = r.w + r.rtap[t] * r.C + c;
    for (int64_t kw = 0; kw < r.Kw; ++kw, xp += dstep, wt += r.C) {
      const __m256 w0 = _mm256_loadu_ps(wt), w1 = _mm256_loadu_ps(wt + 8);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        a[q][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + q * step), w0, a[q][0]);
        a[q][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + q * step + 8), w1, a[q][1]);
      }
    }
  }
  float* y = r.y + ow * r.ys_w + c;
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(y + q * r.ys_w, a[q][0]);
    _mm256_storeu_ps(y + q * r.ys_w + 8, a[q][1]);
  }
}

// 32 channels from c over the row: interior quads per two blocks of 8, every other position for the four.
__attribute__((target("avx2,fma"))) void block32(const Row<float>& r, int64_t c) {
  for (int64_t ow = 0; ow < r.Ow;) {
    if (ow >= r.ow_lo && ow + 4 <= r.ow_hi) {
      quad16(r, ow, c);
      quad16(r, ow, c + 16);
      ow += 4;
    } else {
      position32(r, ow, c);
      ++ow;
    }
  }
}

__attribute__((target("avx2,fma"))) void row_avx2(const Row<float>& r) {
  int64_t c = 0;
  for (; c + 32 <= r.C; c += 32) block32(r, c);
  for (; c + 8 <= r.C; c += 8) block8<true>(r, c);
  if (c < r.C) block8<false>(r, c);
}
#endif

template <typename T>
void run_row(const Row<T>& r) {
#if AOTI_X86_SIMD
  if constexpr (std::is_same<T, float>::value) {
    if (cpu_has_avx2_fma()) return row_avx2(r);
  }
#endif
  row_generic(r);
}

// Output positions [lo, hi) along one dim whose every tap lies inside the input.
void interior(int64_t I, int64_t K, int64_t O, int64_t S, int64_t P, int64_t D, int64_t* lo, int64_t* hi) {
  *lo = O, *hi = 0;
  for (int64_t o = 0; o < O; ++o) {
    if (o * S - P >= 0 && o * S - P + (K - 1) * D < I) {
      *lo = std::min(*lo, o);
      *hi = o + 1;
    }
  }
  if (*lo >= *hi) *lo = *hi = 0;
}

}  // namespace

template <typename T>
void depthwise_conv(const DepthwiseShape& s, const T* x, const int64_t* xs, const T* w, const T* bias, T* y,
                    const int64_t* ys) {
  const int64_t C = s.Cin * s.mult, Isp = s.I[0] * s.I[1] * s.I[2], Osp = s.O[0] * s.O[1] * s.O[2];
  const int64_t taps = s.K[0] * s.K[1] * s.K[2];
  // The input as channels-last with one channel per output channel (copied when it is not that already).
  std::vector<T> xbuf;
  int64_t xn = xs[0], xsp[3] = {xs[2], xs[3], xs[4]};
  if (xs[1] != 1 || s.mult != 1) {
    xbuf.resize(static_cast<size_t>(s.N * Isp * C));
    T* dst = xbuf.data();
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t id = 0; id < s.I[0]; ++id)
        for (int64_t ih = 0; ih < s.I[1]; ++ih)
          for (int64_t iw = 0; iw < s.I[2]; ++iw) {
            const T* src = x + n * xs[0] + id * xs[2] + ih * xs[3] + iw * xs[4];
            for (int64_t co = 0; co < C; ++co) *dst++ = src[(co / s.mult) * xs[1]];
          }
    x = xbuf.data();
    xn = Isp * C, xsp[0] = s.I[1] * s.I[2] * C, xsp[1] = s.I[2] * C, xsp[2] = C;
  }
  // The output channels-last, or a channels-last buffer scattered afterwards.
  std::vector<T> ybuf;
  T* yc = y;
  int64_t yn = ys[0], ysp[3] = {ys[2], ys[3], ys[4]};
  if (ys[1] != 1) {
    ybuf.resize(static_cast<size_t>(s.N * Osp * C));
    yc = ybuf.data();
    yn = Osp * C, ysp[0] = s.O[1] * s.O[2] * C, ysp[1] = s.O[2] * C, ysp[2] = C;
  }
  std::vector<T> wt(static_cast<size_t>(taps * C));  // [taps][C]
  for (int64_t co = 0; co < C; ++co)
    for (int64_t k = 0; k < taps; ++k) wt[static_cast<size_t>(k * C + co)] = w[co * taps + k];
  int64_t ow_lo, ow_hi;
  interior(s.I[2], s.K[2], s.O[2], s.S[2], s.P[2], s.D[2], &ow_lo, &ow_hi);
  const int64_t rows = s.N * s.O[0] * s.O[1];
  [[maybe_unused]] const double work = static_cast<double>(rows) * static_cast<double>(s.O[2] * C * taps);  // read by the OpenMP clause only
AOTI_OMP(omp parallel for schedule(static) if (rows > 1 && work > (1 << 17)))
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row / (s.O[0] * s.O[1]), od = row / s.O[1] % s.O[0], oh = row % s.O[1];
    std::vector<int64_t> roff, rtap;
    for (int64_t kd = 0; kd < s.K[0]; ++kd) {
      const int64_t id = od * s.S[0] - s.P[0] + kd * s.D[0];
      if (id < 0 || id >= s.I[0]) continue;
      for (int64_t kh = 0; kh < s.K[1]; ++kh) {
        const int64_t ih = oh * s.S[1] - s.P[1] + kh * s.D[1];
        if (ih < 0 || ih >= s.I[1]) continue;
        roff.push_back(id * xsp[0] + ih * xsp[1]);
        rtap.push_back((kd * s.K[1] + kh) * s.K[2]);
      }
    }
    Row<T> r{x + n * xn, xsp[2], roff.data(), rtap.data(), static_cast<int64_t>(roff.size()), wt.data(), bias,
             yc + n * yn + od * ysp[0] + oh * ysp[1], ysp[2], C, s.K[2], s.S[2], s.P[2], s.D[2], s.I[2], s.O[2],
             ow_lo, ow_hi};
    run_row(r);
  }
  if (ys[1] != 1) {
    const T* src = ybuf.data();
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t od = 0; od < s.O[0]; ++od)
        for (int64_t oh = 0; oh < s.O[1]; ++oh)
          for (int64_t ow = 0; ow < s.O[2]; ++ow) {
            T* dst = y + n * ys[0] + od * ys[2] + oh * ys[3] + ow * ys[4];
            for (int64_t co = 0; co < C; ++co) dst[co * ys[1]] = *src++;
          }
  }
}

template void depthwise_conv<float>(const DepthwiseShape&, const float*, const int64_t*, const float*, const float*,
                                    float*, const int64_t*);
template void depthwise_conv<double>(const DepthwiseShape&, const double*, const int64_t*, const double*,
                                     const double*, double*, const int64_t*);

}  // namespace cpu
}  // namespace aoti_host
