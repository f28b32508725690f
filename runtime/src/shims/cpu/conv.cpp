// aten::convolution on the CPU: im2col or an implicit GEMM against packed weights (float32, float64),
// GEMM + col2im for transposed float convolutions, a direct loop for every other dtype; the output in the
// memory format ATen's CPU backend would pick.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "shims/cpu/conv_depthwise.h"
#include "shims/cpu/strided.h"
#include "shims/cpu_gemm.h"
#include "shims/cpu_kernels.h"
#include "shims/packed_gemm.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

namespace {

bool channels_last_threads_gt1() {
  if (const char* v = std::getenv("OMP_NUM_THREADS")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n > 0) return n > 1;
  }
  return std::thread::hardware_concurrency() > 1;
}

bool cpu_has_bf16_mkldnn() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpu_has_fp16_mkldnn() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512fp16");
#else
  return false;
#endif
}

bool all_ones(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != 1) return false;
  return true;
}

// Mirrors ATen's ConvParams::use_mkldnn for CPU (which decides Mkldnn vs Slow3d, and so whether a
// channels_last_3d input gives a channels_last_3d output).
bool would_use_mkldnn(const Tensor& input, const Tensor& weight, const ConvParams& p) {
  switch (input.dtype()) {
    case kBFloat16: return cpu_has_bf16_mkldnn();
    case kFloat16: return cpu_has_fp16_mkldnn();
    case kFloat32: break;
    default: return false;
  }
  const auto& is = input.sizes();
  const auto& ws = weight.sizes();
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  const bool strided = !all_ones(p.stride), dilated = !all_ones(p.dilation);
  if (!(strided || dilated || !all_ones(kernel) || channels_last_threads_gt1())) return false;
  return p.groups > 1 || (ws[ws.size() - 1] > 3 && ws[ws.size() - 2] > 3) || is[0] > 1 ||
         is[0] * is[1] * is[2] * is[3] > 20480;
}

// 0: contiguous, 2: channels_last, 3: channels_last_3d (torch's memory_format codes).
int conv_output_memory_format(const Tensor& input, const Tensor& weight, const ConvParams& p) {
  if (input.numel() == 0) return 0;
  if (input.dim() == 4) {
    // Mkldnn, Slow2d, SlowDilated2d and SlowTranspose2d all agree: channels_last if either operand is.
    return (is_channels_last_strides_2d(input.sizes(), input.strides()) ||
            is_channels_last_strides_2d(weight.sizes(), weight.strides()))
               ? 2
               : 0;
  }
  if (input.dim() == 5) {
    // Only the mkldnn backend keeps channels_last_3d; Slow3d/SlowTranspose3d return contiguous.
    const bool cl = is_channels_last_strides_3d(input.sizes(), input.strides()) ||
                    is_channels_last_strides_3d(weight.sizes(), weight.strides());
    return cl && would_use_mkldnn(input, weight, p) ? 3 : 0;
  }
  return 0;  // 1-d convolution: ATen returns contiguous whatever the input strides.
}

std::vector<int64_t> strides_for_format(const std::vector<int64_t>& s, int fmt) {
  if (fmt == 2) {  // c10::get_channels_last_strides_2d
    return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]};
  }
  if (fmt == 3) {  // c10::get_channels_last_strides_3d
    return {s[2] * s[3] * s[4] * s[1], 1, s[3] * s[4] * s[1], s[4] * s[1], s[1]};
  }
  return Tensor::contiguous_strides(s);
}

std::vector<int64_t> expand_param(const std::vector<int64_t>& v, size_t k, const char* name, bool allow_empty,
                                  int64_t empty_default) {
  if (v.size() == k) return v;
  if (v.size() == 1) return std::vector<int64_t>(k, v[0]);
  if (v.empty() && allow_empty) return std::vector<int64_t>(k, empty_default);
  throw Error(std::string(name) + " has " + std::to_string(v.size()) + " elements " + list_str(v) + ", expected 1 or " +
              std::to_string(k) + " (one per spatial dimension)");
}


// A convolution's shape in 3 spatial dims (the form every kernel here works in): a 1-d or 2-d convolution
// gets leading spatial dims of size 1, stride 1, dilation 1 and no padding.
struct ConvGeometry {
  ConvGeometry(const Tensor& input, const Tensor& weight, const Tensor& out, const ConvParams& p)
      : k(static_cast<size_t>(input.dim() - 2)),
        I(spatial({input.sizes().begin() + 2, input.sizes().end()}, 1)),
        K(spatial({weight.sizes().begin() + 2, weight.sizes().end()}, 1)),
        O(spatial({out.sizes().begin() + 2, out.sizes().end()}, 1)),
        S(spatial(p.stride, 1)),
        P(spatial(p.padding, 0)),
        D(spatial(p.dilation, 1)),
        N(input.sizes()[0]),
        Cin(input.sizes()[1]),
        Cout(out.sizes()[1]),
        G(p.groups),
        Cin_g(Cin / G),
        Cout_g(Cout / G),
        Isp(I[0] * I[1] * I[2]),
        Osp(O[0] * O[1] * O[2]),
        Ksp(K[0] * K[1] * K[2]) {}
  // Per-spatial-dim values (sizes, strides) padded at the front to 3 dims with `fill`.
  std::vector<int64_t> spatial(const std::vector<int64_t>& v, int64_t fill) const {
    std::vector<int64_t> r(3 - k, fill);
    r.insert(r.end(), v.begin(), v.end());
    return r;
  }

  size_t k;  // spatial dims of the convolution itself (1-3); first, as the others are computed from it
  std::vector<int64_t> I, K, O, S, P, D;  // input, kernel, output sizes; stride, padding, dilation
  int64_t N, Cin, Cout, G, Cin_g, Cout_g;
  int64_t Isp, Osp, Ksp;  // input, output and kernel positions
};

// Convolution as GEMM: im2col + GEMM for convolutions, GEMM + col2im for transposed ones, per sample
// and group, into a packed NC(DHW) result that is then stored in the output's layout.
template <typename T>
void conv_gemm(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t N = geo.N, Cin = geo.Cin, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Isp = geo.Isp, Osp = geo.Osp, Ksp = geo.Ksp;
  std::vector<T> xbuf, wbuf, ybuf;
  const T* x = contiguous_data<T>(input, xbuf);
  const T* w = contiguous_data<T>(weight, wbuf);
  const bool direct = out.dtype() == dtype_of<T>() && out.is_contiguous();
  if (!direct) ybuf.assign(static_cast<size_t>(N * Cout * Osp), T(0));
  T* y = direct ? static_cast<T*>(out.data_ptr()) : ybuf.data();
  T beta = 0;
  if (bias != nullptr) {
    std::vector<T> bbuf;
    const T* b = contiguous_data<T>(*bias, bbuf);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cout; ++c) std::fill_n(y + (n * Cout + c) * Osp, Osp, b[c]);
    beta = 1;
  } else if (p.transposed) {
    std::fill_n(y, N * Cout * Osp, T(0));  // col2im accumulates
  }
  if (!p.transposed) {
    const int64_t Kc = Cin_g * Ksp;
    const bool pointwise = Ksp == 1 && all_ones(S) && P[0] == 0 && P[1] == 0 && P[2] == 0;
    for_blocks(N * Osp * Kc * Cout_g > (1 << 17), N * G, [&](int64_t ng0, int64_t ng1) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(Kc * Osp));
    for (int64_t ng = ng0; ng < ng1; ++ng) {
      {
        const int64_t n = ng / G, g = ng % G;
        const T* xg = x + (n * Cin + g * Cin_g) * Isp;
        if (!pointwise) {
          T* c = col.data();
          for (int64_t ci = 0; ci < Cin_g; ++ci)
            for (int64_t kd = 0; kd < K[0]; ++kd)
              for (int64_t kh = 0; kh < K[1]; ++kh)
                for (int64_t kw = 0; kw < K[2]; ++kw) {
                  const T* xc = xg + ci * Isp;
                  for (int64_t od = 0; od < O[0]; ++od) {
                    const int64_t id = od * S[0] - P[0] + kd * D[0];
                    for (int64_t oh = 0; oh < O[1]; ++oh) {
                      const int64_t ih = oh * S[1] - P[1] + kh * D[1];
                      const bool row_in = id >= 0 && id < I[0] && ih >= 0 && ih < I[1];
                      const T* xr = xc + (id * I[1] + ih) * I[2];
                      for (int64_t ow = 0; ow < O[2]; ++ow) {
                        const int64_t iw = ow * S[2] - P[2] + kw * D[2];
                        *c++ = (row_in && iw >= 0 && iw < I[2]) ? xr[iw] : T(0);
                      }
                    }
                  }
                }
        }
        const MatView<const T> A{w + g * Cout_g * Kc, Cout_g, Kc, Kc, 1};
        const MatView<const T> B{pointwise ? xg : col.data(), Kc, Osp, Osp, 1};
        const MatView<T> C{y + (n * Cout + g * Cout_g) * Osp, Cout_g, Osp, Osp, 1};
        gemm<T>(A, B, C, T(1), beta);
      }
    }
    });
  } else {
    const int64_t Kc = Cout_g * Ksp;
    for_blocks(N * Osp * Kc * Cin_g > (1 << 17), N * G, [&](int64_t ng0, int64_t ng1) {
    std::vector<T> cols(static_cast<size_t>(Kc * Isp));
    for (int64_t ng = ng0; ng < ng1; ++ng) {
      {
        const int64_t n = ng / G, g = ng % G;
        // weight [Cin, Cout_g, K...]: this group's rows form a [Cin_g, Cout_g * Ksp] matrix
        const MatView<const T> Wg{w + g * Cin_g * Kc, Cin_g, Kc, Kc, 1};
        const MatView<const T> Xg{x + (n * Cin + g * Cin_g) * Isp, Cin_g, Isp, Isp, 1};
        gemm<T>(Wg.t(), Xg, MatView<T>{cols.data(), Kc, Isp, Isp, 1}, T(1), T(0));
        const T* c = cols.data();
        for (int64_t co = 0; co < Cout_g; ++co) {
          T* yc = y + (n * Cout + g * Cout_g + co) * Osp;
          for (int64_t kd = 0; kd < K[0]; ++kd)
            for (int64_t kh = 0; kh < K[1]; ++kh)
              for (int64_t kw = 0; kw < K[2]; ++kw)
                for (int64_t id = 0; id < I[0]; ++id) {
                  const int64_t od = id * S[0] - P[0] + kd * D[0];
                  for (int64_t ih = 0; ih < I[1]; ++ih, c += I[2]) {
                    const int64_t oh = ih * S[1] - P[1] + kh * D[1];
                    if (od < 0 || od >= O[0] || oh < 0 || oh >= O[1]) continue;
                    T* yr = yc + (od * O[1] + oh) * O[2];
                    for (int64_t iw = 0; iw < I[2]; ++iw) {
                      const int64_t ow = iw * S[2] - P[2] + kw * D[2];
                      if (ow >= 0 && ow < O[2]) yr[ow] += c[iw];
                    }
                  }
                }
        }
      }
    }
    });
  }
  if (!direct) store_packed<T>(out, ybuf.data());
}

// ---- conv_im2col: a non-transposed convolution as im2col + GEMM (or an implicit GEMM), in phases ----

// The weight as GEMM operand: rows [Cout] of (kd, kh, kw, ci) columns, viewed in place when the weight's
// strides give that order one stride (1x1 kernels, channels-last weights), else gathered; for the AVX-512
// kernel (float) one packed B [(kd, kh, kw, ci), Cout_g] per group instead, cached when it is a constant.
template <typename T>
struct Im2colWeight {
  std::vector<T> gathered;
  MatView<const T> rows{nullptr, 0, 0, 0, 0};  // [Cout, Kc]
  std::vector<std::shared_ptr<const PackedB>> packed;
  MatView<const T> group(int64_t g, int64_t Cout_g) const {
    return {rows.p + g * Cout_g * rows.rs, Cout_g, rows.cols, rows.rs, rows.cs};
  }
};

template <typename T>
void gather_weight_rows(const Tensor& weight, const ConvGeometry& geo, int64_t co0, int64_t nco, T* dst) {
  std::vector<T> wbuf;
  std::vector<int64_t> wst;
  const T* w = typed_data<T>(weight, wbuf, wst);
  const std::vector<int64_t> wsp = geo.spatial({wst.begin() + 2, wst.end()}, 0);
  const std::vector<int64_t>& K = geo.K;
  for (int64_t co = co0; co < co0 + nco; ++co)
    for (int64_t kd = 0; kd < K[0]; ++kd)
      for (int64_t kh = 0; kh < K[1]; ++kh)
        for (int64_t kw = 0; kw < K[2]; ++kw)
          for (int64_t ci = 0; ci < geo.Cin_g; ++ci)
            *dst++ = w[co * wst[0] + ci * wst[1] + kd * wsp[0] + kh * wsp[1] + kw * wsp[2]];
}

// The one stride of the weight's (kd, kh, kw, ci) order within an output channel, or 0 when there is none.
int64_t weight_column_stride(const Tensor& weight, const ConvGeometry& geo) {
  const std::vector<int64_t> wsp = geo.spatial({weight.strides().begin() + 2, weight.strides().end()}, 0);
  const int64_t c = geo.Cin_g > 1 ? weight.strides()[1] : geo.Ksp > 1 ? wsp[2] : 1;
  int64_t expect = c * geo.Cin_g;
  for (int i = 2; i >= 0; --i) {
    const size_t d = static_cast<size_t>(i);
    if (geo.K[d] > 1 && wsp[d] != expect) return 0;
    expect *= geo.K[d];
  }
  return c > 0 ? c : 0;
}

template <typename T>
Im2colWeight<T> im2col_weight(const Tensor& weight, const ConvGeometry& geo, bool fast) {
  const int64_t Kc = geo.Ksp * geo.Cin_g;
  Im2colWeight<T> r;
  if (!fast) {
    const int64_t cs = weight.dtype() == dtype_of<T>() ? weight_column_stride(weight, geo) : 0;
    if (cs > 0) {
      r.rows = {static_cast<const T*>(weight.data_ptr()), geo.Cout, Kc, weight.strides()[0], cs};
    } else {
      r.gathered.resize(static_cast<size_t>(geo.Cout * Kc));
      gather_weight_rows(weight, geo, 0, geo.Cout, r.gathered.data());
      r.rows = {r.gathered.data(), geo.Cout, Kc, Kc, 1};
    }
    return r;
  }
  const auto& wsz = weight.sizes();
  const auto& wst = weight.strides();
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < wsz.size(); ++d) {
    const int64_t span = (wsz[d] - 1) * wst[d];
    (span < 0 ? lo : hi) += span;
  }
  const char* base = static_cast<const char*>(weight.data_ptr());
  const int64_t isz = static_cast<int64_t>(weight.itemsize());
  for (int64_t g = 0; g < geo.G; ++g) {
    auto build = [&] {
      std::vector<T> tmp(static_cast<size_t>(geo.Cout_g * Kc));
      gather_weight_rows(weight, geo, g * geo.Cout_g, geo.Cout_g, tmp.data());
      auto pb = std::make_shared<PackedB>(Kc, geo.Cout_g);
      pb->fill(MatView<const float>{reinterpret_cast<const float*>(tmp.data()), Kc, geo.Cout_g, 1, Kc});
      return pb;
    };
    std::vector<int64_t> key = {1, reinterpret_cast<int64_t>(base), weight.dtype(), geo.G, g};
    key.insert(key.end(), wsz.begin(), wsz.end());
    key.insert(key.end(), wst.begin(), wst.end());
    std::shared_ptr<const PackedB> pb =
        weight.dtype() == kFloat32 ? constant_packed(base + lo * isz, base + (hi + 1) * isz, key, build) : nullptr;
    r.packed.push_back(pb != nullptr ? pb : build());
  }
  return r;
}

// The output prefilled with the bias (beta 1 for the GEMMs) unless the kernel adds it in its epilogue
// (bias_row set); beta 0 without a bias.
template <typename T>
T im2col_bias(Tensor& out, const Tensor* bias, const ConvGeometry& geo, bool fast, bool channels_last_out,
              std::vector<T>& bias_buf, const T** bias_row) {
  *bias_row = nullptr;
  if (bias == nullptr) return T(0);
  if (fast) {
    *bias_row = contiguous_data<T>(*bias, bias_buf);
    return T(1);
  }
  std::vector<T> bbuf;
  const T* b = contiguous_data<T>(*bias, bbuf);
  T* y = static_cast<T*>(out.data_ptr());
  for (int64_t n = 0; n < geo.N; ++n) {
    T* yn = y + n * out.strides()[0];
    if (channels_last_out) {
      for (int64_t r = 0; r < geo.Osp; ++r) std::copy_n(b, geo.Cout, yn + r * geo.Cout);
    } else {
      for (int64_t c = 0; c < geo.Cout; ++c) std::fill_n(yn + c * geo.Osp, geo.Osp, b[c]);
    }
  }
  return T(1);
}

// The implicit GEMM's table: per output position and tap the input offset (-1: padding). It depends on
// the geometry only, so it is kept per thread for the last shapes seen (a plugin calls the same few
// convolutions on every run).
const std::vector<int64_t>& implicit_offsets(const ConvGeometry& geo, const std::vector<int64_t>& xsp) {
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  static thread_local std::map<std::vector<int64_t>, std::vector<int64_t>> offs_cache;
  std::vector<int64_t> geometry;
  for (const auto* v : {&I, &K, &O, &S, &P, &D, &xsp}) geometry.insert(geometry.end(), v->begin(), v->end());
  if (offs_cache.size() > 64 && offs_cache.find(geometry) == offs_cache.end()) offs_cache.clear();
  std::vector<int64_t>& offs = offs_cache[geometry];
  if (!offs.empty()) return offs;
  offs.resize(static_cast<size_t>(geo.Osp * geo.Ksp));
  int64_t* o = offs.data();
  for (int64_t od = 0; od < O[0]; ++od)
    for (int64_t oh = 0; oh < O[1]; ++oh)
      for (int64_t ow = 0; ow < O[2]; ++ow)
        for (int64_t kd = 0; kd < K[0]; ++kd)
          for (int64_t kh = 0; kh < K[1]; ++kh)
            for (int64_t kw = 0; kw < K[2]; ++kw) {
              const int64_t id = od * S[0] - P[0] + kd * D[0], ih = oh * S[1] - P[1] + kh * D[1],
                            iw = ow * S[2] - P[2] + kw * D[2];
              const bool in = id >= 0 && id < I[0] && ih >= 0 && ih < I[1] && iw >= 0 && iw < I[2];
              *o++ = in ? id * xsp[0] + ih * xsp[1] + iw * xsp[2] : -1;
            }
  return offs;
}

// Rows [p0, p1) of one sample and group's im2col matrix [Osp, (kd, kh, kw, ci)] from xg (channel stride
// xs_c, spatial xsp).
template <typename T>
void im2col_fill(const ConvGeometry& geo, const T* xg, int64_t xs_c, const std::vector<int64_t>& xsp, int64_t p0,
                 int64_t p1, T* c) {
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t Cin_g = geo.Cin_g;
  const bool run_kw = xs_c == 1 && xsp[2] == Cin_g && D[2] == 1;
  for (int64_t pos = p0; pos < p1; ++pos) {
    const int64_t od = pos / (O[1] * O[2]), oh = pos / O[2] % O[1], ow = pos % O[2];
        for (int64_t kd = 0; kd < K[0]; ++kd) {
          const int64_t id = od * S[0] - P[0] + kd * D[0];
          for (int64_t kh = 0; kh < K[1]; ++kh) {
            const int64_t ih = oh * S[1] - P[1] + kh * D[1];
            const int64_t iw0 = ow * S[2] - P[2];
            if (run_kw && id >= 0 && id < I[0] && ih >= 0 && ih < I[1] && iw0 >= 0 && iw0 + K[2] <= I[2]) {
              // the whole kernel row lies inside and is one contiguous run in a channels-last input
              const T* src = xg + id * xsp[0] + ih * xsp[1] + iw0 * xsp[2];
              if constexpr (std::is_same<T, float>::value) copy_floats(c, src, K[2] * Cin_g);
              else for (int64_t e = 0; e < K[2] * Cin_g; ++e) c[e] = src[e];
              c += K[2] * Cin_g;
              continue;
            }
            for (int64_t kw = 0; kw < K[2]; ++kw, c += Cin_g) {
              const int64_t iw = ow * S[2] - P[2] + kw * D[2];
              if (id < 0 || id >= I[0] || ih < 0 || ih >= I[1] || iw < 0 || iw >= I[2]) {
                std::fill_n(c, Cin_g, T(0));
                continue;
              }
              const T* src = xg + id * xsp[0] + ih * xsp[1] + iw * xsp[2];
              if (xs_c == 1) {
                if constexpr (std::is_same<T, float>::value) copy_floats(c, src, Cin_g);
                else for (int64_t ci = 0; ci < Cin_g; ++ci) c[ci] = src[ci];  // short runs: no memcpy call
              } else {
                for (int64_t ci = 0; ci < Cin_g; ++ci) c[ci] = src[ci * xs_c];
              }
            }
          }
        }
  }
}

// Whether im2col_gemm runs on gemm_nt_avx2 (no AVX-512 kernel, the AVX2 one available, a channels-last
// output, rows of im2col/input and of the weight with unit stride): it then adds the bias in its epilogue.
template <typename T>
bool takes_gemm_nt(const Im2colWeight<T>& wt, bool channels_last_out, bool cols_unit) {
  return std::is_same<T, float>::value && wt.packed.empty() && channels_last_out && cols_unit &&
         (wt.rows.cs == 1 || wt.rows.cols == 1) && gemm_nt_avx2_available();
}

// One sample and group's GEMM: cols [Osp, Kc] against the weight, into the output where it lies. A
// bias_row that no kernel's epilogue adds is stored into the output first (beta 1).
template <typename T>
void im2col_gemm(const MatView<const T>& cols, const Im2colWeight<T>& wt, int64_t g, const ConvGeometry& geo,
                 T* yn, bool channels_last_out, T beta, const T* bias_row, int64_t p0 = 0) {
  const int64_t Cout = geo.Cout, Cout_g = geo.Cout_g, Osp = geo.Osp, rows = cols.rows;
  yn += channels_last_out ? p0 * Cout : p0;  // the first of the rows' output positions
  if constexpr (std::is_same<T, float>::value) {
    if (!wt.packed.empty()) {
      // C as [positions, Cout_g]: channels-last rows, or a contiguous output's planes transposed.
      const MatView<float> C = channels_last_out ? MatView<float>{yn + g * Cout_g, rows, Cout_g, Cout, 1}
                                                 : MatView<float>{yn + g * Cout_g * Osp, rows, Cout_g, 1, Osp};
      const MatView<const float> unused{nullptr, cols.cols, Cout_g, Cout_g, 1};
      if (fast_gemm(cols, unused, wt.packed[static_cast<size_t>(g)].get(), C, 1.0f, beta,
                    bias_row != nullptr ? bias_row + g * Cout_g : nullptr, 1))
        return;
    }
  }
  const MatView<const T> Wg = wt.group(g, Cout_g);
  if constexpr (std::is_same<T, float>::value) {
    if (wt.packed.empty() && channels_last_out &&
        gemm_nt_avx2(cols, Wg, MatView<float>{yn + g * Cout_g, rows, Cout_g, Cout, 1}, 1.0f, beta,
                     bias_row != nullptr ? bias_row + g * Cout_g : nullptr))
      return;
  }
  if (bias_row != nullptr) {  // the bias was meant for a kernel's epilogue: into the output first
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < Cout_g; ++c)
        yn[channels_last_out ? r * Cout + g * Cout_g + c : (g * Cout_g + c) * Osp + r] = bias_row[g * Cout_g + c];
    beta = T(1);
  }
  if (channels_last_out) {
    gemm<T>(cols, Wg.t(), MatView<T>{yn + g * Cout_g, rows, Cout_g, Cout, 1}, T(1), beta);
  } else {
    gemm<T>(Wg, cols.t(), MatView<T>{yn + g * Cout_g * Osp, Cout_g, rows, Osp, 1}, T(1), beta);
  }
}

// Non-transposed convolution straight from the input's strides into the output's layout: per sample
// and group one im2col matrix [output positions, kernel positions x input channels] (channels
// innermost, so a channels-last input copies runs of channels), then one GEMM that writes the output
// where it lies: [positions, Cout] rows for channels-last, [Cout, positions] planes for contiguous.
template <typename T>
void conv_im2col(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p,
                 bool channels_last_out) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &S = geo.S, &P = geo.P;
  const int64_t N = geo.N, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Osp = geo.Osp, Ksp = geo.Ksp, Kc = Ksp * Cin_g;
  std::vector<T> xbuf;
  std::vector<int64_t> xs;
  const T* x = typed_data<T>(input, xbuf, xs);
  const std::vector<int64_t> xsp = geo.spatial({xs.begin() + 2, xs.end()}, 0);
  const bool fast = std::is_same<T, float>::value && fast_gemm_available() && Kc > 0;
  const Im2colWeight<T> wt = im2col_weight<T>(weight, geo, fast);
  T* y = static_cast<T*>(out.data_ptr());
  const int64_t ysn = out.strides()[0];
  // A 1x1 convolution with stride 1 and no padding reads the input as it is, when its spatial dims
  // flatten into one (true of contiguous and channels-last inputs).
  const bool pointwise = Ksp == 1 && all_ones(S) && P[0] == 0 && P[1] == 0 && P[2] == 0 &&
                         (I[0] == 1 || xsp[0] == I[1] * xsp[1]) && (I[1] == 1 || xsp[1] == I[2] * xsp[2]);
  std::vector<T> bias_buf;
  const T* bias_row = nullptr;
  const T beta = im2col_bias<T>(out, bias, geo, fast || takes_gemm_nt<T>(wt, channels_last_out, !pointwise || xs[1] == 1),
                                channels_last_out, bias_buf, &bias_row);
  const int64_t pos_stride = I[2] > 1 ? xsp[2] : I[1] > 1 ? xsp[1] : xsp[0];
  // A channels-last input into a channels-last output: no im2col, the kernel reads each output
  // position's taps straight from the input through a table of offsets (one per position and tap,
  // -1 for padding), the same for every sample and group.
  const bool implicit = fast && channels_last_out && !pointwise && xs[1] == 1;
  static const std::vector<int64_t> no_offsets;
  const std::vector<int64_t>& offs = implicit ? implicit_offsets(geo, xsp) : no_offsets;
  // Threads only where the work pays for waking them (~100k multiply-adds per call and more).
  for_blocks(N * Osp * Kc * Cout > (1 << 17), N * G, [&](int64_t ng0, int64_t ng1) {
    static thread_local std::vector<T> col;  // not zeroed: every element is written below
    for (int64_t ng = ng0; ng < ng1; ++ng) {
      const int64_t n = ng / G, g = ng % G;
      const T* xg = x + n * xs[0] + g * Cin_g * xs[1];
      if constexpr (std::is_same<T, float>::value) {
        if (implicit && fast_conv_rows(xg, offs.data(), Ksp, Cin_g, *wt.packed[static_cast<size_t>(g)],
                                       MatView<float>{y + n * ysn + g * Cout_g, Osp, Cout_g, Cout, 1}, beta,
                                       bias_row != nullptr ? bias_row + g * Cout_g : nullptr))
          continue;
      }
      MatView<const T> cols{xg, Osp, Cin_g, pos_stride, xs[1]};
      if (!pointwise) {
        if (col.size() < static_cast<size_t>(Osp * Kc)) col.resize(static_cast<size_t>(Osp * Kc));
        im2col_fill<T>(geo, xg, xs[1], xsp, 0, Osp, col.data());
        cols = MatView<const T>{col.data(), Osp, Kc, Kc, 1};
      }
      im2col_gemm<T>(cols, wt, g, geo, y + n * ysn, channels_last_out, beta, bias_row);
    }
  });
}

// One sample and group (the common batch-1 dense convolution) on several threads: each takes a block of
// output positions, fills their im2col rows and runs their GEMM, so that neither phase leaves a thread
// idle (the BLAS runs on the calling thread). False when that does not apply.
template <typename T>
bool conv_im2col_split(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
                       const ConvParams& p, bool channels_last_out) {
#ifdef _OPENMP
  const ConvGeometry geo(input, weight, out, p);
  const int64_t Kc = geo.Ksp * geo.Cin_g, nt = omp_get_max_threads();
  const bool fast = std::is_same<T, float>::value && fast_gemm_available();
  if (geo.N * geo.G != 1 || fast || nt < 2 || !outside_omp_regions() || Kc == 0 || geo.Osp < 8 * nt ||
      static_cast<double>(geo.Osp) * Kc * geo.Cout < kSplitGemmWork)
    return false;
  std::vector<T> xbuf;
  std::vector<int64_t> xs;
  const T* x = typed_data<T>(input, xbuf, xs);
  const std::vector<int64_t> xsp = geo.spatial({xs.begin() + 2, xs.end()}, 0);
  const Im2colWeight<T> wt = im2col_weight<T>(weight, geo, false);
  std::vector<T> bias_buf;
  const T* bias_row = nullptr;
  const T beta = im2col_bias<T>(out, bias, geo, takes_gemm_nt<T>(wt, channels_last_out, true), channels_last_out,
                                bias_buf, &bias_row);
  const int64_t block = (geo.Osp + nt - 1) / nt;
  T* y = static_cast<T*>(out.data_ptr());
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(nt))
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t p0 = t * block, p1 = std::min(geo.Osp, p0 + block);
    if (p0 >= p1) continue;
    static thread_local std::vector<T> col;
    if (col.size() < static_cast<size_t>((p1 - p0) * Kc)) col.resize(static_cast<size_t>((p1 - p0) * Kc));
    im2col_fill<T>(geo, x, xs[1], xsp, p0, p1, col.data());
    im2col_gemm<T>(MatView<const T>{col.data(), p1 - p0, Kc, Kc, 1}, wt, 0, geo, y, channels_last_out, beta,
                   bias_row, p0);
  }
  return true;
#else
  (void)out, (void)input, (void)weight, (void)bias, (void)p, (void)channels_last_out;
  return false;
#endif
}

// Depthwise (groups == input channels > 1): the direct kernel of conv_depthwise.h, any strides.
template <typename T>
void conv_depthwise(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p) {
  const ConvGeometry geo(input, weight, out, p);
  DepthwiseShape s{};
  s.N = geo.N, s.Cin = geo.Cin, s.mult = geo.Cout_g;
  for (size_t i = 0; i < 3; ++i) {
    s.I[i] = geo.I[i], s.K[i] = geo.K[i], s.O[i] = geo.O[i];
    s.S[i] = geo.S[i], s.P[i] = geo.P[i], s.D[i] = geo.D[i];
  }
  auto strides5 = [&](const Tensor& t) {
    const std::vector<int64_t> sp = geo.spatial({t.strides().begin() + 2, t.strides().end()}, 0);
    return std::vector<int64_t>{t.strides()[0], t.strides()[1], sp[0], sp[1], sp[2]};
  };
  std::vector<T> wbuf, bbuf;
  const T* x = static_cast<const T*>(input.data_ptr());  // the caller checked: input's dtype is T
  const std::vector<int64_t> xs = strides5(input);
  const T* w = contiguous_data<T>(weight, wbuf);
  const T* b = bias != nullptr ? contiguous_data<T>(*bias, bbuf) : nullptr;
  const std::vector<int64_t> ys = strides5(out);
  depthwise_conv<T>(s, x, xs.data(), w, b, static_cast<T*>(out.data_ptr()), ys.data());
}

template <typename Acc>
void conv_impl(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t N = geo.N, Cin = geo.Cin, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Isp = geo.Isp, Osp = geo.Osp, Ksp = geo.Ksp;
  const std::vector<Acc> x = gather<Acc>(input);
  const std::vector<Acc> w = gather<Acc>(weight);
  std::vector<Acc> b;
  if (bias != nullptr) b = gather<Acc>(*bias);
  std::vector<Acc> y(static_cast<size_t>(N * Cout * Osp), Acc(0));
  if (!b.empty()) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cout; ++c)
        for (int64_t o = 0; o < Osp; ++o) y[static_cast<size_t>((n * Cout + c) * Osp + o)] = b[static_cast<size_t>(c)];
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      if (!p.transposed) {
        // weight: [Cout, Cin_g, K...]
        for (int64_t co = 0; co < Cout_g; ++co) {
          const int64_t oc = g * Cout_g + co;
          for (int64_t od = 0; od < O[0]; ++od)
            for (int64_t oh = 0; oh < O[1]; ++oh)
              for (int64_t ow = 0; ow < O[2]; ++ow) {
                Acc acc = 0;
                for (int64_t ci = 0; ci < Cin_g; ++ci) {
                  const int64_t ic = g * Cin_g + ci;
                  const Acc* xp = x.data() + (n * Cin + ic) * Isp;
                  const Acc* wp = w.data() + (oc * Cin_g + ci) * Ksp;
                  for (int64_t kd = 0; kd < K[0]; ++kd) {
                    const int64_t id = od * S[0] - P[0] + kd * D[0];
                    if (id < 0 || id >= I[0]) continue;
                    for (int64_t kh = 0; kh < K[1]; ++kh) {
                      const int64_t ih = oh * S[1] - P[1] + kh * D[1];
                      if (ih < 0 || ih >= I[1]) continue;
                      for (int64_t kw = 0; kw < K[2]; ++kw) {
                        const int64_t iw = ow * S[2] - P[2] + kw * D[2];
                        if (iw < 0 || iw >= I[2]) continue;
                        acc += xp[(id * I[1] + ih) * I[2] + iw] * wp[(kd * K[1] + kh) * K[2] + kw];
                      }
                    }
                  }
                }
                y[static_cast<size_t>((n * Cout + oc) * Osp + (od * O[1] + oh) * O[2] + ow)] += acc;
              }
        }
      } else {
        // weight: [Cin, Cout_g, K...]; each input element scatters into the output.
        for (int64_t ci = 0; ci < Cin_g; ++ci) {
          const int64_t ic = g * Cin_g + ci;
          const Acc* xp = x.data() + (n * Cin + ic) * Isp;
          for (int64_t co = 0; co < Cout_g; ++co) {
            const int64_t oc = g * Cout_g + co;
            const Acc* wp = w.data() + (ic * Cout_g + co) * Ksp;
            Acc* yp = y.data() + (n * Cout + oc) * Osp;
            for (int64_t id = 0; id < I[0]; ++id)
              for (int64_t ih = 0; ih < I[1]; ++ih)
                for (int64_t iw = 0; iw < I[2]; ++iw) {
                  const Acc xv = xp[(id * I[1] + ih) * I[2] + iw];
                  for (int64_t kd = 0; kd < K[0]; ++kd) {
                    const int64_t od = id * S[0] - P[0] + kd * D[0];
                    if (od < 0 || od >= O[0]) continue;
                    for (int64_t kh = 0; kh < K[1]; ++kh) {
                      const int64_t oh = ih * S[1] - P[1] + kh * D[1];
                      if (oh < 0 || oh >= O[1]) continue;
                      for (int64_t kw = 0; kw < K[2]; ++kw) {
                        const int64_t ow = iw * S[2] - P[2] + kw * D[2];
                        if (ow < 0 || ow >= O[2]) continue;
                        yp[(od * O[1] + oh) * O[2] + ow] += xv * wp[(kd * K[1] + kh) * K[2] + kw];
                      }
                    }
                  }
                }
          }
        }
      }
    }
  }
  scatter<Acc>(out, y);
}

}  // namespace

Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p0) {
  require_supported(input, "input");
  require_supported(weight, "weight");
  if (input.dim() < 3 || input.dim() > 5) {
    throw Error("input must be 3-d, 4-d or 5-d (batched 1-d, 2-d or 3-d convolution), got shape " + list_str(input.sizes()));
  }
  if (weight.dim() != input.dim()) {
    throw Error("weight has shape " + list_str(weight.sizes()) + " (" + std::to_string(weight.dim()) + "-d) but input has shape " +
                list_str(input.sizes()) + " (" + std::to_string(input.dim()) + "-d)");
  }
  require_same_dtype(weight, "weight", input, "input");
  const size_t k = static_cast<size_t>(input.dim() - 2);
  ConvParams p = p0;
  p.stride = expand_param(p0.stride, k, "stride", false, 1);
  p.padding = expand_param(p0.padding, k, "padding", true, 0);
  p.dilation = expand_param(p0.dilation, k, "dilation", false, 1);
  p.output_padding = expand_param(p0.output_padding, k, "output_padding", true, 0);
  for (size_t i = 0; i < k; ++i) {
    if (p.stride[i] <= 0) throw Error("stride " + list_str(p.stride) + " must be positive");
    if (p.padding[i] < 0) throw Error("padding " + list_str(p.padding) + " must be non-negative");
    if (p.dilation[i] <= 0) throw Error("dilation " + list_str(p.dilation) + " must be positive");
    if (p.transposed && p.output_padding[i] < 0) throw Error("output_padding " + list_str(p.output_padding) + " must be non-negative");
    if (p.transposed && p.output_padding[i] >= p.stride[i] && p.output_padding[i] >= p.dilation[i]) {
      throw Error("output_padding " + list_str(p.output_padding) + " must be smaller than either stride " + list_str(p.stride) +
                  " or dilation " + list_str(p.dilation));
    }
  }
  if (p.groups <= 0) throw Error("groups must be positive, got " + std::to_string(p.groups));
  const auto& is = input.sizes();
  const auto& ws = weight.sizes();
  const int64_t G = p.groups;
  int64_t c_out;
  if (!p.transposed) {
    if (ws[0] % G != 0) {
      throw Error("weight has " + std::to_string(ws[0]) + " output channels (shape " + list_str(ws) + "), not divisible by groups=" +
                  std::to_string(G));
    }
    if (is[1] != ws[1] * G) {
      throw Error("input has " + std::to_string(is[1]) + " channels (shape " + list_str(is) + ") but weight of shape " + list_str(ws) +
                  " with groups=" + std::to_string(G) + " expects " + std::to_string(ws[1] * G));
    }
    c_out = ws[0];
  } else {
    if (is[1] != ws[0]) {
      throw Error("input has " + std::to_string(is[1]) + " channels (shape " + list_str(is) + ") but transposed weight of shape " +
                  list_str(ws) + " expects " + std::to_string(ws[0]));
    }
    if (ws[0] % G != 0) {
      throw Error("input channels " + std::to_string(ws[0]) + " are not divisible by groups=" + std::to_string(G));
    }
    c_out = ws[1] * G;
  }
  if (bias != nullptr) {
    require_supported(*bias, "bias");
    require_same_dtype(*bias, "bias", input, "input");
    if (bias->dim() != 1 || bias->sizes()[0] != c_out) {
      throw Error("bias has shape " + list_str(bias->sizes()) + ", expected [" + std::to_string(c_out) + "] (one per output channel)");
    }
  }
  std::vector<int64_t> out_sizes = {is[0], c_out};
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = is[2 + i], kk = ws[2 + i];
    int64_t o;
    if (!p.transposed) {
      const int64_t span = in + 2 * p.padding[i] - p.dilation[i] * (kk - 1) - 1;
      if (span < 0) {
        throw Error("input spatial size " + list_str({is.begin() + 2, is.end()}) + " with padding " + list_str(p.padding) +
                    " is smaller than the dilated kernel " + list_str({ws.begin() + 2, ws.end()}) + " (dilation " +
                    list_str(p.dilation) + ")");
      }
      o = span / p.stride[i] + 1;
    } else {
      o = (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (kk - 1) + p.output_padding[i] + 1;
      if (o <= 0) throw Error("calculated output size is " + std::to_string(o) + " in spatial dimension " + std::to_string(i) + ": too small");
    }
    out_sizes.push_back(o);
  }
  const int fmt = conv_output_memory_format(input, weight, p);
  std::unique_ptr<Tensor> out(Tensor::empty_strided(input.dtype(), out_sizes, strides_for_format(out_sizes, fmt),
                                                    input.device_type(), input.device_index()));
  const bool depthwise = !p.transposed && p.groups > 1 && is[1] == p.groups;
  if (out->numel() > 0 && depthwise && (input.dtype() == kFloat32 || input.dtype() == kFloat64)) {
    if (input.dtype() == kFloat32) {
      conv_depthwise<float>(*out, input, weight, bias, p);
    } else {
      conv_depthwise<double>(*out, input, weight, bias, p);
    }
  } else if (out->numel() > 0 && !p.transposed && (input.dtype() == kFloat32 || input.dtype() == kFloat64)) {
    if (input.dtype() == kFloat32) {
      if (!conv_im2col_split<float>(*out, input, weight, bias, p, fmt != 0))
        conv_im2col<float>(*out, input, weight, bias, p, fmt != 0);
    } else {
      if (!conv_im2col_split<double>(*out, input, weight, bias, p, fmt != 0))
        conv_im2col<double>(*out, input, weight, bias, p, fmt != 0);
    }
  } else if (out->numel() > 0 && input.dtype() == kFloat32) {
    conv_gemm<float>(*out, input, weight, bias, p);
  } else if (out->numel() > 0 && input.dtype() == kFloat64) {
    conv_gemm<double>(*out, input, weight, bias, p);
  } else {
    dispatch_acc(input.dtype(), [&](auto acc) { conv_impl<decltype(acc)>(*out, input, weight, bias, p); });
  }
  return out.release();
}

}  // namespace cpu
}  // namespace aoti_host
