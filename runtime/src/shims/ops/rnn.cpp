// aten::mkldnn_rnn_layer: one direction of one LSTM layer, as torch's LSTM decomposition calls it
// (mode 2, num_layers 1, not bidirectional). Weights: w0 = weight_ih [4H, I], w1 = weight_hh [4H, H],
// w2 = bias_ih, w3 = bias_hh [4H] (ignored when has_biases is false: the decomposition then passes
// zero matrices). Gates in PyTorch's order i, f, g, o; computed in double, stored in input's dtype.
#include <cmath>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

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
  const int64_t T = batch_first ? input.sizes()[1] : input.sizes()[0];
  const int64_t B = batch_first ? input.sizes()[0] : input.sizes()[1];
  const int64_t I = input.sizes()[2];
  const int64_t H = hidden_size;
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
  const std::vector<double> wi = to_doubles(w_ih), wh = to_doubles(w_hh);
  std::vector<double> bias(static_cast<size_t>(4 * H), 0.0);
  if (has_biases) {
    const std::vector<double> b1 = to_doubles(b_ih), b2 = to_doubles(b_hh);
    for (size_t k = 0; k < bias.size(); ++k) bias[k] = b1[k] + b2[k];
  }
  std::vector<double> h = to_doubles(hx), c = to_doubles(cx);
  const Shape out_sizes = batch_first ? Shape{B, T, H} : Shape{T, B, H};
  std::unique_ptr<Tensor> out(new_contiguous(input.dtype(), out_sizes));
  std::unique_ptr<Tensor> hy(new_contiguous(hx.dtype(), hx.sizes()));
  std::unique_ptr<Tensor> cy(new_contiguous(cx.dtype(), cx.sizes()));
  std::unique_ptr<Tensor> workspace(new_contiguous(kUInt8, {0}));
  const Shape& ist = input.strides();
  const int64_t st_t = batch_first ? ist[1] : ist[0], st_b = batch_first ? ist[0] : ist[1];
  const int64_t ot_t = batch_first ? H : B * H, ot_b = batch_first ? T * H : H;
  std::vector<double> x(static_cast<size_t>(I)), gates(static_cast<size_t>(4 * H)), hn(h.size());
  for (int64_t step = 0; step < T; ++step) {
    const int64_t t = reverse ? T - 1 - step : step;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < I; ++k) {
        x[static_cast<size_t>(k)] = load_f(input.data_ptr(), input.dtype(), t * st_t + b * st_b + k * ist[2]);
      }
      const double* hb = h.data() + b * H;
      for (int64_t g = 0; g < 4 * H; ++g) {
        double acc = bias[static_cast<size_t>(g)];
        const double* wr = wi.data() + g * I;
        for (int64_t k = 0; k < I; ++k) acc += wr[k] * x[static_cast<size_t>(k)];
        const double* ur = wh.data() + g * H;
        for (int64_t k = 0; k < H; ++k) acc += ur[k] * hb[k];
        gates[static_cast<size_t>(g)] = acc;
      }
      for (int64_t j = 0; j < H; ++j) {
        const double ig = sigmoid(gates[static_cast<size_t>(j)]);
        const double fg = sigmoid(gates[static_cast<size_t>(H + j)]);
        const double gg = std::tanh(gates[static_cast<size_t>(2 * H + j)]);
        const double og = sigmoid(gates[static_cast<size_t>(3 * H + j)]);
        double& cc = c[static_cast<size_t>(b * H + j)];
        cc = fg * cc + ig * gg;
        hn[static_cast<size_t>(b * H + j)] = og * std::tanh(cc);
        store_f(out->data_ptr(), input.dtype(), t * ot_t + b * ot_b + j, hn[static_cast<size_t>(b * H + j)]);
      }
    }
    h.swap(hn);
  }
  for (int64_t k = 0; k < B * H; ++k) {
    store_f(hy->data_ptr(), hx.dtype(), k, h[static_cast<size_t>(k)]);
    store_f(cy->data_ptr(), cx.dtype(), k, c[static_cast<size_t>(k)]);
  }
  *output = out.release();
  *hy_out = hy.release();
  *cy_out = cy.release();
  *workspace_out = workspace.release();
}

}  // namespace ops
}  // namespace aoti_host
