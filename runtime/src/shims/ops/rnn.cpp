// aten::mkldnn_rnn_layer: one direction of one LSTM layer, as torch's LSTM decomposition calls it
// (mode 2, num_layers 1, not bidirectional). Weights: w0 = weight_ih [4H, I], w1 = weight_hh [4H, H],
// w2 = bias_ih, w3 = bias_hh [4H] (ignored when has_biases is false: the decomposition then passes
// zero matrices). Gates in PyTorch's order i, f, g, o.
// float32 and float64 (every operand of that dtype) run as oneDNN does: one GEMM for the input projection
// of all time steps, then per step one GEMM of the previous hidden state against weight_hh, accumulated
// into that step's gates, and the gate activations; computed in the input's dtype, like ATen. Other
// dtypes (float16, bfloat16) take a plain loop computed in double and stored in the input's dtype.
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>

#include "shims/cpu/simd_math.h"
#include "shims/cpu_gemm.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

// One layer's sizes and how its sequence tensors are laid out, in elements.
struct LstmDims {
  int64_t T, B, I, H;
  int64_t st_t, st_b, st_i;  // input strides along time, batch and features
  int64_t ot_t, ot_b;        // the contiguous output's strides along time and batch
  bool reverse;
};

// hx/cx (any strides and shapes holding B*H elements) as a contiguous [B, H] copy in T.
template <typename V>
void load_state(const Tensor& t, V* dst) {
  const std::vector<double> v = to_doubles(t);
  for (size_t k = 0; k < v.size(); ++k) dst[k] = static_cast<V>(v[k]);
}

// The gate activations of one step for one batch row: gates (i, f, g, o pre-activations without the
// bias) -> c updated in place, h written to h_out.
template <typename V>
void lstm_cell(const V* gates, const V* bias, V* c, V* h_out, int64_t H) {
  const V one = 1;
  for (int64_t j = 0; j < H; ++j) {
    const V ig = one / (one + std::exp(-(gates[j] + bias[j])));
    const V fg = one / (one + std::exp(-(gates[H + j] + bias[H + j])));
    const V gg = std::tanh(gates[2 * H + j] + bias[2 * H + j]);
    const V og = one / (one + std::exp(-(gates[3 * H + j] + bias[3 * H + j])));
    c[j] = fg * c[j] + ig * gg;
    h_out[j] = og * std::tanh(c[j]);
  }
}

#if AOTI_X86_SIMD
__attribute__((target("avx2,fma"), always_inline)) inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, cpu::exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): exact at 0 and saturating at +-1.
__attribute__((target("avx2,fma"), always_inline)) inline __m256 tanh8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = cpu::exp8(_mm256_add_ps(x, x));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

__attribute__((target("avx2,fma"), always_inline)) inline __m256 gate8(const float* gates, const float* bias,
                                                                       int64_t k) {
  return _mm256_add_ps(_mm256_loadu_ps(gates + k), _mm256_loadu_ps(bias + k));
}

// lstm_cell for float, 8 hidden units at a time; the tail by the scalar cell.
__attribute__((target("avx2,fma"))) void lstm_cell_avx2(const float* gates, const float* bias, float* c, float* h,
                                                        int64_t H) {
  int64_t j = 0;
  for (; j + 8 <= H; j += 8) {
    const __m256 ig = sigmoid8(gate8(gates, bias, 0 * H + j)), fg = sigmoid8(gate8(gates, bias, H + j));
    const __m256 gg = tanh8(gate8(gates, bias, 2 * H + j)), og = sigmoid8(gate8(gates, bias, 3 * H + j));
    const __m256 cn = _mm256_fmadd_ps(fg, _mm256_loadu_ps(c + j), _mm256_mul_ps(ig, gg));
    _mm256_storeu_ps(c + j, cn);
    _mm256_storeu_ps(h + j, _mm256_mul_ps(og, tanh8(cn)));
  }
  for (; j < H; ++j) {
    const float one = 1;
    const float ig = one / (one + std::exp(-(gates[j] + bias[j])));
    const float fg = one / (one + std::exp(-(gates[H + j] + bias[H + j])));
    const float gg = std::tanh(gates[2 * H + j] + bias[2 * H + j]);
    const float og = one / (one + std::exp(-(gates[3 * H + j] + bias[3 * H + j])));
    c[j] = fg * c[j] + ig * gg;
    h[j] = og * std::tanh(c[j]);
  }
}
#endif

// The cell of lstm_blas: vectorised for float where the CPU has AVX2.
template <typename V>
void lstm_cell_fast(const V* gates, const V* bias, V* c, V* h, int64_t H) {
#if AOTI_X86_SIMD
  if constexpr (std::is_same<V, float>::value) {
    if (cpu::cpu_has_avx2_fma()) return lstm_cell_avx2(gates, bias, c, h, H);
  }
#endif
  lstm_cell(gates, bias, c, h, H);
}

// float32/float64: the input projection of every step in one GEMM per batch row (M = T), then per step
// the recurrent GEMM (M = B) accumulated into that step's gates; h is read back from the output rows
// written the step before.
template <typename V>
void lstm_blas(const LstmDims& d, const Tensor& input, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
               const Tensor& b_hh, bool has_biases, const Tensor& hx, const Tensor& cx, Tensor& out, Tensor& hy,
               Tensor& cy) {
  using cpu::MatView;
  const int64_t T = d.T, B = d.B, H = d.H, G4 = 4 * H;
  std::vector<V> gates(static_cast<size_t>(T * B * G4)), bias(static_cast<size_t>(G4), V(0));
  if (has_biases) {
    const std::vector<double> b1 = to_doubles(b_ih), b2 = to_doubles(b_hh);
    for (size_t k = 0; k < bias.size(); ++k) bias[k] = static_cast<V>(b1[k] + b2[k]);
  }
  const MatView<const V> wi{static_cast<const V*>(w_ih.data_ptr()), G4, d.I, w_ih.strides()[0], w_ih.strides()[1]};
  const MatView<const V> wh{static_cast<const V*>(w_hh.data_ptr()), G4, H, w_hh.strides()[0], w_hh.strides()[1]};
  const V* x = static_cast<const V*>(input.data_ptr());
  // gates[t][b] = x[t][b] @ w_ih^T: rows of one batch entry are T apart in gates, st_t in x
  for (int64_t b = 0; b < B; ++b) {
    cpu::gemm<V>(MatView<const V>{x + b * d.st_b, T, d.I, d.st_t, d.st_i}, wi.t(),
                 MatView<V>{gates.data() + b * G4, T, G4, B * G4, 1}, V(1), V(0));
  }
  std::vector<V> h0(static_cast<size_t>(B * H)), c(static_cast<size_t>(B * H));
  load_state(hx, h0.data());
  load_state(cx, c.data());
  V* y = static_cast<V*>(out.data_ptr());
  const V* h_prev = h0.data();
  int64_t h_rs = H;
  for (int64_t step = 0; step < T; ++step) {
    const int64_t t = d.reverse ? T - 1 - step : step;
    V* g = gates.data() + t * B * G4;
    cpu::gemm<V>(MatView<const V>{h_prev, B, H, h_rs, 1}, wh.t(), MatView<V>{g, B, G4, G4, 1}, V(1), V(1));
    V* yt = y + t * d.ot_t;
    for (int64_t b = 0; b < B; ++b) lstm_cell_fast(g + b * G4, bias.data(), c.data() + b * H, yt + b * d.ot_b, H);
    h_prev = yt, h_rs = d.ot_b;
  }
  V* hyp = static_cast<V*>(hy.data_ptr());
  for (int64_t b = 0; b < B; ++b) std::memcpy(hyp + b * H, h_prev + b * h_rs, static_cast<size_t>(H) * sizeof(V));
  std::memcpy(cy.data_ptr(), c.data(), c.size() * sizeof(V));
}

// Any floating dtype: computed in double, stored in the operands' dtypes.
void lstm_reference(const LstmDims& d, const Tensor& input, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& b_ih, const Tensor& b_hh, bool has_biases, const Tensor& hx, const Tensor& cx,
                    Tensor& out, Tensor& hy, Tensor& cy) {
  const int64_t T = d.T, B = d.B, I = d.I, H = d.H;
  const std::vector<double> wi = to_doubles(w_ih), wh = to_doubles(w_hh);
  std::vector<double> bias(static_cast<size_t>(4 * H), 0.0);
  if (has_biases) {
    const std::vector<double> b1 = to_doubles(b_ih), b2 = to_doubles(b_hh);
    for (size_t k = 0; k < bias.size(); ++k) bias[k] = b1[k] + b2[k];
  }
  std::vector<double> h = to_doubles(hx), c = to_doubles(cx);
  std::vector<double> x(static_cast<size_t>(I)), gates(static_cast<size_t>(4 * H)), hn(h.size());
  for (int64_t step = 0; step < T; ++step) {
    const int64_t t = d.reverse ? T - 1 - step : step;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < I; ++k) {
        x[static_cast<size_t>(k)] = load_f(input.data_ptr(), input.dtype(), t * d.st_t + b * d.st_b + k * d.st_i);
      }
      const double* hb = h.data() + b * H;
      for (int64_t g = 0; g < 4 * H; ++g) {
        double acc = 0;
        const double* wr = wi.data() + g * I;
        for (int64_t k = 0; k < I; ++k) acc += wr[k] * x[static_cast<size_t>(k)];
        const double* ur = wh.data() + g * H;
        for (int64_t k = 0; k < H; ++k) acc += ur[k] * hb[k];
        gates[static_cast<size_t>(g)] = acc;
      }
      lstm_cell(gates.data(), bias.data(), c.data() + b * H, hn.data() + b * H, H);
      for (int64_t j = 0; j < H; ++j) {
        store_f(out.data_ptr(), input.dtype(), t * d.ot_t + b * d.ot_b + j, hn[static_cast<size_t>(b * H + j)]);
      }
    }
    h.swap(hn);
  }
  for (int64_t k = 0; k < B * H; ++k) {
    store_f(hy.data_ptr(), hx.dtype(), k, h[static_cast<size_t>(k)]);
    store_f(cy.data_ptr(), cx.dtype(), k, c[static_cast<size_t>(k)]);
  }
}

}  // namespace

void mkldnn_rnn_layer(const Tensor& input, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh, const Tensor& hx, const Tensor& cx, bool reverse,
                      const std::vector<int64_t>& batch_sizes, int64_t mode, int64_t hidden_size, int64_t num_layers,
                      bool has_biases, bool bidirectional, bool batch_first, bool train, Tensor** output,
                      Tensor** hy_out, Tensor** cy_out, Tensor** workspace_out) {
  for (const Tensor* t : {&input, &w_ih, &w_hh, &b_ih, &b_hh, &hx, &cx}) check_cpu(*t, "an argument");
  if (mode != 2) throw Error("mode is " + std::to_string(mode) + "; only LSTM (mode 2) is supported");
  if (!batch_sizes.empty()) throw Error("packed sequences (non-empty batch_sizes) are not supported");
  if (num_layers != 1 || bidirectional) {
    throw Error("expected one layer in one direction (num_layers 1, bidirectional false), got num_layers " +
                std::to_string(num_layers) + (bidirectional ? ", bidirectional" : ""));
  }
  if (train) throw Error("train=True is not supported (inference only)");
  if (!is_floating(input.dtype())) {
    throw Error(std::string("input has dtype ") + dtype_name(input.dtype()) + "; expected a floating dtype");
  }
  if (input.dim() != 3) throw Error("input has sizes " + str(input.sizes()) + "; expected 3 dimensions");
  LstmDims d{};
  d.T = batch_first ? input.sizes()[1] : input.sizes()[0];
  d.B = batch_first ? input.sizes()[0] : input.sizes()[1];
  d.I = input.sizes()[2];
  d.H = hidden_size;
  const int64_t B = d.B, I = d.I, H = d.H, T = d.T;
  if (H <= 0) throw Error("hidden_size is " + std::to_string(H) + "; it must be positive");
  if (w_ih.sizes() != Shape{4 * H, I}) {
    throw Error("weight0 (weight_ih) has sizes " + str(w_ih.sizes()) + "; expected " + str({4 * H, I}));
  }
  if (w_hh.sizes() != Shape{4 * H, H}) {
    throw Error("weight1 (weight_hh) has sizes " + str(w_hh.sizes()) + "; expected " + str({4 * H, H}));
  }
  if (has_biases && (b_ih.sizes() != Shape{4 * H} || b_hh.sizes() != Shape{4 * H})) {
    throw Error("biases have sizes " + str(b_ih.sizes()) + " and " + str(b_hh.sizes()) + "; expected [" +
                std::to_string(4 * H) + "]");
  }
  if (hx.numel() != B * H || cx.numel() != B * H) {
    throw Error("hx and cx have sizes " + str(hx.sizes()) + " and " + str(cx.sizes()) + "; expected " +
                std::to_string(B * H) + " elements ([1, " + std::to_string(B) + ", " + std::to_string(H) + "])");
  }
  const Shape out_sizes = batch_first ? Shape{B, T, H} : Shape{T, B, H};
  std::unique_ptr<Tensor> out(new_contiguous(input.dtype(), out_sizes));
  std::unique_ptr<Tensor> hy(new_contiguous(hx.dtype(), hx.sizes()));
  std::unique_ptr<Tensor> cy(new_contiguous(cx.dtype(), cx.sizes()));
  std::unique_ptr<Tensor> workspace(new_contiguous(kUInt8, {0}));
  const Shape& ist = input.strides();
  d.st_t = batch_first ? ist[1] : ist[0];
  d.st_b = batch_first ? ist[0] : ist[1];
  d.st_i = ist[2];
  d.ot_t = batch_first ? H : B * H;
  d.ot_b = batch_first ? T * H : H;
  d.reverse = reverse;
  const int32_t dt = input.dtype();
  bool same = true;
  for (const Tensor* t : {&w_ih, &w_hh, &hx, &cx}) same = same && t->dtype() == dt;
  if (has_biases) same = same && b_ih.dtype() == dt && b_hh.dtype() == dt;
  if (same && dt == kFloat32 && T > 0 && B > 0) {
    lstm_blas<float>(d, input, w_ih, w_hh, b_ih, b_hh, has_biases, hx, cx, *out, *hy, *cy);
  } else if (same && dt == kFloat64 && T > 0 && B > 0) {
    lstm_blas<double>(d, input, w_ih, w_hh, b_ih, b_hh, has_biases, hx, cx, *out, *hy, *cy);
  } else {
    lstm_reference(d, input, w_ih, w_hh, b_ih, b_hh, has_biases, hx, cx, *out, *hy, *cy);
  }
  *output = out.release();
  *hy_out = hy.release();
  *cy_out = cy.release();
  *workspace_out = workspace.release();
}

}  // namespace ops
}  // namespace aoti_host
