// aten::_embedding_bag / _embedding_bag_forward_only on the CPU, for inference (no gradient state):
// sum, mean and max bags over rows of weight, with offsets, optional per-sample weights (sum only),
// include_last_offset and padding_idx (-1: none). The auxiliary outputs follow ATen's CPU kernel:
// offset2bag is [num_indices] except on its sum fast path (float/half/bfloat16 weight with unit row
// stride, no padding_idx), where it is empty; bag_size holds bag lengths (less padding) for mean and
// max and for _embedding_bag (which ATen treats as needing gradients), else it has offsets' size
// (_embedding_bag_forward_only's sum); max_indices is [bags, dim] for max, else bag_size's size.
#include <algorithm>
#include <cmath>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

void embedding_bag(bool forward_only, const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                   bool scale_grad_by_freq, int64_t mode, bool sparse, const Tensor* psw, bool include_last_offset,
                   int64_t padding_idx, Tensor** output, Tensor** offset2bag_out, Tensor** bag_size_out,
                   Tensor** max_indices_out) {
  (void)scale_grad_by_freq;  // gradient-only options: no effect on the forward result
  (void)sparse;
  check_cpu(weight, "weight");
  check_cpu(indices, "indices");
  check_cpu(offsets, "offsets");
  if (!is_floating(weight.dtype())) {
    throw Error(std::string("weight has dtype ") + dtype_name(weight.dtype()) + "; expected a floating dtype");
  }
  if (weight.dim() != 2) throw Error("weight has sizes " + str(weight.sizes()) + "; expected 2 dimensions");
  for (const Tensor* t : {&indices, &offsets}) {
    const char* name = t == &indices ? "indices" : "offsets";
    if (t->dtype() != kInt32 && t->dtype() != kInt64) {
      throw Error(std::string(name) + " has dtype " + dtype_name(t->dtype()) + "; expected int32 or int64");
    }
    if (t->dim() != 1) throw Error(std::string(name) + " has sizes " + str(t->sizes()) + "; expected 1 dimension");
  }
  if (mode < 0 || mode > 2) throw Error("mode is " + std::to_string(mode) + "; expected 0 (sum), 1 (mean) or 2 (max)");
  const int64_t n = indices.sizes()[0];
  if (psw != nullptr) {
    check_cpu(*psw, "per_sample_weights");
    if (mode != 0) throw Error("per_sample_weights are only supported for mode='sum'");
    if (psw->dtype() != weight.dtype()) {
      throw Error(std::string("per_sample_weights has dtype ") + dtype_name(psw->dtype()) + " but weight has " +
                  dtype_name(weight.dtype()));
    }
    if (psw->dim() != 1 || psw->sizes()[0] != n) {
      throw Error("per_sample_weights has sizes " + str(psw->sizes()) + "; expected [" + std::to_string(n) + "]");
    }
  }
  const int64_t noff = offsets.sizes()[0];
  if (include_last_offset && noff < 1) throw Error("include_last_offset needs at least one offset");
  const int64_t bags = include_last_offset ? noff - 1 : noff;
  const int64_t rows = weight.sizes()[0], dim = weight.sizes()[1];
  std::vector<int64_t> start(static_cast<size_t>(bags) + 1);
  for (int64_t b = 0; b < bags; ++b) {
    start[static_cast<size_t>(b)] = load_i(offsets.data_ptr(), offsets.dtype(), b * offsets.strides()[0]);
  }
  start[static_cast<size_t>(bags)] =
      include_last_offset ? load_i(offsets.data_ptr(), offsets.dtype(), bags * offsets.strides()[0]) : n;
  if (include_last_offset) start[static_cast<size_t>(bags)] = std::min(start[static_cast<size_t>(bags)], n);
  for (int64_t b = 0; b <= bags; ++b) {
    const int64_t s = start[static_cast<size_t>(b)];
    const bool bad = s < 0 || s > n || (b > 0 && s < start[static_cast<size_t>(b) - 1]) || (b == 0 && bags > 0 && s != 0);
    if (bad) {
      throw Error("offsets must start at 0 and be non-decreasing up to the number of indices (" + std::to_string(n) +
                  "); offset " + std::to_string(b) + " is " + std::to_string(s));
    }
  }
  const int32_t wdt = weight.dtype();
  const bool fast_sum = mode == 0 && (wdt == kFloat32 || wdt == kFloat16 || wdt == kBFloat16) &&
                        weight.strides()[1] == 1 && padding_idx < 0 && (psw == nullptr || psw->strides()[0] == 1);
  std::unique_ptr<Tensor> out(new_contiguous(wdt, {bags, dim}));
  std::unique_ptr<Tensor> offset2bag(new_contiguous(offsets.dtype(), {fast_sum ? 0 : n}));
  const bool counted = mode == 1 || mode == 2 || !forward_only;
  std::unique_ptr<Tensor> bag_size(new_contiguous(offsets.dtype(), counted ? Shape{bags} : offsets.sizes()));
  std::unique_ptr<Tensor> max_indices(new_contiguous(indices.dtype(), mode == 2 ? Shape{bags, dim} : bag_size->sizes()));
  for (Tensor* t : {offset2bag.get(), bag_size.get(), max_indices.get()}) {  // entries no bag reaches stay 0
    if (t->numel() > 0) std::memset(t->data_ptr(), 0, static_cast<size_t>(t->numel()) * t->itemsize());
  }
  // Accumulation: double for float32/float64 (exact enough to match float's order), float for 16-bit.
  const bool half = wdt == kFloat16 || wdt == kBFloat16;
  std::vector<double> acc(static_cast<size_t>(dim));
  std::vector<int64_t> arg(static_cast<size_t>(dim));
  for (int64_t b = 0; b < bags; ++b) {
    std::fill(acc.begin(), acc.end(), 0.0);
    int64_t count = 0;
    bool empty = true;
    for (int64_t i = start[static_cast<size_t>(b)]; i < start[static_cast<size_t>(b) + 1]; ++i) {
      const int64_t idx = load_i(indices.data_ptr(), indices.dtype(), i * indices.strides()[0]);
      if (idx < 0 || idx >= rows) {
        throw Error("index " + std::to_string(idx) + " at position " + std::to_string(i) +
                    " is out of range for a weight of " + std::to_string(rows) + " rows");
      }
      if (!fast_sum) store_i(offset2bag->data_ptr(), offsets.dtype(), i, b);
      if (idx == padding_idx) continue;
      ++count;
      const double scale = psw ? load_f(psw->data_ptr(), wdt, i * psw->strides()[0]) : 1.0;
      for (int64_t d = 0; d < dim; ++d) {
        const double w = load_f(weight.data_ptr(), wdt, idx * weight.strides()[0] + d * weight.strides()[1]);
        double& a = acc[static_cast<size_t>(d)];
        if (mode == 2) {
          if (empty || w > a) {
            a = w;
            arg[static_cast<size_t>(d)] = idx;
          }
        } else if (half) {
          a = static_cast<float>(static_cast<float>(a) + static_cast<float>(w) * static_cast<float>(scale));
        } else if (wdt == kFloat32 && psw != nullptr) {
          a += static_cast<double>(static_cast<float>(w) * static_cast<float>(scale));
        } else {
          a += w * scale;
        }
      }
      empty = false;
    }
    for (int64_t d = 0; d < dim; ++d) {
      double v = acc[static_cast<size_t>(d)];
      if (mode == 1) {
        // ATen divides the (rounded) sum by max(bag_size, 1) in the weight's dtype.
        v = round_to(wdt, v) / static_cast<double>(std::max<int64_t>(count, 1));
      }
      store_f(out->data_ptr(), wdt, b * dim + d, v);
      if (mode == 2) store_i(max_indices->data_ptr(), indices.dtype(), b * dim + d, empty ? 0 : arg[static_cast<size_t>(d)]);
    }
    if (counted) store_i(bag_size->data_ptr(), offsets.dtype(), b, count);
  }
  *output = out.release();
  *offset2bag_out = offset2bag.release();
  *bag_size_out = bag_size.release();
  *max_indices_out = max_indices.release();
}

}  // namespace ops
}  // namespace aoti_host
