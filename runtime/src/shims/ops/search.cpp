// aten::searchsorted, bucketize, histc, repeat_interleave.Tensor, nonzero, masked_select: lookups
// and ops whose output size depends on the data (a new tensor of whatever size the data gives).
#include <algorithm>
#include <cmath>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

// ATen's cus_lower_bound / cus_upper_bound, negated comparisons included (they place NaN values).
template <typename K>
int64_t bound(const std::vector<K>& seq, K val, bool right) {
  int64_t start = 0, end = static_cast<int64_t>(seq.size());
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    const K m = seq[static_cast<size_t>(mid)];
    const bool go_right = right ? !(m > val) : !(m >= val);
    if (go_right) {
      start = mid + 1;
    } else {
      end = mid;
    }
  }
  return start;
}

// The sequence (row `row` of a 2-d view of sorted_sequence), in sorter's order when one is given.
template <typename K>
void load_row(const Tensor& seq, const Tensor* sorter, int64_t row, std::vector<K>& out) {
  const Shape& sz = seq.sizes();
  const int64_t n = sz.back();
  Shape outer(sz.begin(), sz.end() - 1);
  Shape outer_st(seq.strides().begin(), seq.strides().end() - 1);
  const int64_t base = offset_of(row, outer, outer_st);
  int64_t sbase = 0;
  if (sorter != nullptr) {
    Shape sst(sorter->strides().begin(), sorter->strides().end() - 1);
    sbase = offset_of(row, outer, sst);
  }
  out.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t src = j;
    if (sorter != nullptr) {
      src = load_i(sorter->data_ptr(), sorter->dtype(), sbase + j * sorter->strides().back());
      if (src < 0 || src >= n) {
        throw Error("sorter index " + std::to_string(src) + " is out of range for a sequence of length " +
                    std::to_string(n));
      }
    }
    const int64_t at = base + src * seq.strides().back();
    if constexpr (std::is_same<K, double>::value) {
      out[static_cast<size_t>(j)] = load_f(seq.data_ptr(), seq.dtype(), at);
    } else {
      out[static_cast<size_t>(j)] = load_i(seq.data_ptr(), seq.dtype(), at);
    }
  }
}

template <typename K>
void search_impl(const Tensor& seq, const Tensor* self, double scalar, bool right, const Tensor* sorter, Tensor& out) {
  const int64_t total = out.numel();
  const bool one_d = seq.dim() == 1;
  const int64_t inner = (self == nullptr || self->dim() == 0) ? 1 : self->sizes().back();
  std::vector<K> row;
  int64_t loaded = -1;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t r = one_d ? 0 : i / inner;
    if (r != loaded) {
      load_row<K>(seq, sorter, r, row);
      loaded = r;
    }
    K v;
    if (self == nullptr) {
      v = static_cast<K>(scalar);
    } else {
      const int64_t at = offset_of(i, self->sizes(), self->strides());
      if constexpr (std::is_same<K, double>::value) {
        v = load_f(self->data_ptr(), self->dtype(), at);
      } else {
        v = load_i(self->data_ptr(), self->dtype(), at);
      }
    }
    store_i(out.data_ptr(), out.dtype(), i, bound<K>(row, v, right));
  }
}

void check_numeric(const Tensor& t, const char* arg) {
  check_cpu(t, arg);
  if (!is_floating(t.dtype()) && !is_integral(t.dtype())) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) + "; expected a floating or integer dtype");
  }
}

}  // namespace

bool searchsorted_right(const char* side, bool right) {
  if (side == nullptr) return right;
  const std::string s(side);
  if (s != "left" && s != "right") throw Error("side is '" + s + "'; expected 'left' or 'right'");
  if (s == "left" && right) throw Error("side 'left' contradicts right=True");
  return s == "right";
}

Tensor* searchsorted(const Tensor& seq, const Tensor* self, double scalar, bool out_int32, bool right,
                     const char* side, const Tensor* sorter) {
  check_numeric(seq, "sorted_sequence");
  if (self != nullptr) check_numeric(*self, "self");
  right = searchsorted_right(side, right);
  if (seq.dim() == 0) throw Error("sorted_sequence is 0-dimensional; it needs at least one dimension");
  if (seq.dim() > 1) {
    const Shape lead(seq.sizes().begin(), seq.sizes().end() - 1);
    const bool ok = self != nullptr && self->dim() == seq.dim() &&
                    Shape(self->sizes().begin(), self->sizes().end() - 1) == lead;
    if (!ok) {
      throw Error("sorted_sequence has sizes " + str(seq.sizes()) + ": a multi-dimensional sequence needs input " +
                  "values with the same leading dimensions (got " + (self ? str(self->sizes()) : "a scalar") + ")");
    }
  }
  if (sorter != nullptr) {
    check_cpu(*sorter, "sorter");
    check_dtype(*sorter, kInt64, "sorter");
    check_same_sizes(*sorter, seq, "sorter", "sorted_sequence");
  }
  const Shape out_sizes = self == nullptr ? Shape{} : self->sizes();
  std::unique_ptr<Tensor> out(new_contiguous(out_int32 ? kInt32 : kInt64, out_sizes));
  if (out->numel() > 0) {
    const bool ints = is_integral(seq.dtype()) && (self == nullptr ? scalar == std::floor(scalar)
                                                                   : is_integral(self->dtype()));
    if (ints) {
      search_impl<int64_t>(seq, self, scalar, right, sorter, *out);
    } else {
      search_impl<double>(seq, self, scalar, right, sorter, *out);
    }
  }
  return out.release();
}

Tensor* searchsorted_tensor(const Tensor& seq, const Tensor& self, bool out_int32, bool right, const char* side,
                            const Tensor* sorter) {
  return searchsorted(seq, &self, 0.0, out_int32, right, side, sorter);
}

Tensor* searchsorted_scalar(const Tensor& seq, double self, bool out_int32, bool right, const char* side,
                            const Tensor* sorter) {
  return searchsorted(seq, nullptr, self, out_int32, right, side, sorter);
}

Tensor* bucketize(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right) {
  if (boundaries.dim() != 1) {
    throw Error("boundaries has " + std::to_string(boundaries.dim()) + " dimensions; bucketize needs a 1-d tensor");
  }
  return searchsorted(boundaries, &self, 0.0, out_int32, right, nullptr, nullptr);
}

// Intermediates round to the input dtype, as arithmetic on c10::Half / BFloat16 / float does.
Tensor* histc(const Tensor& self, int64_t bins, double min, double max) {
  check_cpu(self, "self");
  const int32_t dt = self.dtype();
  if (!is_floating(dt)) throw Error(std::string("self has dtype ") + dtype_name(dt) + "; histc takes a floating dtype");
  if (bins <= 0) throw Error("bins is " + std::to_string(bins) + "; it must be positive");
  if (min > max) throw Error("max (" + std::to_string(max) + ") is less than min (" + std::to_string(min) + ")");
  const int64_t n = self.numel();
  double lo = round_to(dt, min), hi = round_to(dt, max);
  if (lo == hi && n > 0) {  // the data's own range (aminmax: a NaN makes it NaN, refused below)
    lo = hi = load_f(self.data_ptr(), dt, offset_of(0, self.sizes(), self.strides()));
    for (int64_t i = 1; i < n; ++i) {
      const double v = load_f(self.data_ptr(), dt, offset_of(i, self.sizes(), self.strides()));
      if (std::isnan(v) || std::isnan(lo)) {
        lo = hi = v + lo;
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    throw Error("range of [" + std::to_string(lo) + ", " + std::to_string(hi) + "] is not finite");
  }
  std::unique_ptr<Tensor> out(new_contiguous(dt, {bins}));
  std::vector<double> counts(static_cast<size_t>(bins), 0.0);
  // ATen's linear-interpolation histogram: the edges are linspace(lo, hi, bins + 1) in self's dtype.
  const double left = round_to(dt, lo), right_edge = round_to(dt, hi);
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_f(self.data_ptr(), dt, offset_of(i, self.sizes(), self.strides()));
    if (!(v >= left && v <= right_edge)) continue;
    const double num = round_to(dt, round_to(dt, v - left) * static_cast<double>(bins));
    int64_t pos = static_cast<int64_t>(round_to(dt, num / round_to(dt, right_edge - left)));
    if (pos >= bins) pos = bins - 1;
    if (pos < 0) pos = 0;
    counts[static_cast<size_t>(pos)] += 1.0;
  }
  for (int64_t b = 0; b < bins; ++b) store_f(out->data_ptr(), dt, b, counts[static_cast<size_t>(b)]);
  return out.release();
}

Tensor* repeat_interleave(const Tensor& repeats, const int64_t* output_size) {
  check_cpu(repeats, "repeats");
  if (repeats.dtype() != kInt32 && repeats.dtype() != kInt64) {
    throw Error(std::string("repeats has dtype ") + dtype_name(repeats.dtype()) + "; expected int32 or int64");
  }
  if (repeats.dim() != 1) {
    throw Error("repeats has " + std::to_string(repeats.dim()) + " dimensions; expected a 1-d tensor");
  }
  const int64_t n = repeats.sizes()[0];
  std::vector<int64_t> r(static_cast<size_t>(n));
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    r[static_cast<size_t>(i)] = load_i(repeats.data_ptr(), repeats.dtype(), i * repeats.strides()[0]);
    if (r[static_cast<size_t>(i)] < 0) throw Error("repeats has a negative value at index " + std::to_string(i));
    total += r[static_cast<size_t>(i)];
  }
  if (output_size != nullptr && *output_size != total) {
    throw Error("output_size is " + std::to_string(*output_size) + " but the repeats sum to " + std::to_string(total));
  }
  std::unique_ptr<Tensor> out(new_contiguous(repeats.dtype(), {total}));
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r[static_cast<size_t>(i)]; ++j) store_i(out->data_ptr(), repeats.dtype(), k++, i);
  }
  return out.release();
}

Tensor* nonzero(const Tensor& self) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  const int64_t n = self.numel();
  const int64_t nd = self.dim();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = offset_of(i, self.sizes(), self.strides());
    const bool nz = is_floating(self.dtype()) ? load_f(self.data_ptr(), self.dtype(), at) != 0.0
                                              : load_i(self.data_ptr(), self.dtype(), at) != 0;
    if (nz) hits.push_back(i);
  }
  const int64_t count = static_cast<int64_t>(hits.size());
  // ATen's CPU nonzero: [count, ndim] int64 stored column-major (strides [1, count]); row k holds the
  // coordinates of the k-th hit in row-major order.
  std::unique_ptr<Tensor> out(new_strided(kInt64, {count, nd}, {1, count}));
  auto* dst = static_cast<int64_t*>(out->data_ptr());
  for (int64_t k = 0; k < count; ++k) {
    int64_t rem = hits[static_cast<size_t>(k)];
    for (int64_t d = nd; d-- > 0;) {
      dst[d * count + k] = rem % self.sizes()[d];
      rem /= self.sizes()[d];
    }
  }
  return out.release();
}

Tensor* masked_select(const Tensor& self, const Tensor& mask) {
  check_cpu(self, "self");
  check_cpu(mask, "mask");
  if (mask.dtype() != kBool) {
    throw Error(std::string("mask has dtype ") + dtype_name(mask.dtype()) + "; masked_select expects a bool mask");
  }
  // Broadcast self and mask to a common shape (right-aligned; size-1 dimensions stretch).
  Shape shape = self.sizes();
  if (!broadcast_into(shape, mask.sizes())) {
    throw Error("self with sizes " + str(self.sizes()) + " and mask with sizes " + str(mask.sizes()) +
                " do not broadcast");
  }
  const Shape sst = cpu::detail::broadcast_strides(self, shape, "self");
  const Shape mst = cpu::detail::broadcast_strides(mask, shape, "mask");
  const int64_t total = numel_of(shape);
  std::vector<int64_t> picks;
  for (int64_t i = 0; i < total; ++i) {
    if (load_i(mask.data_ptr(), kBool, offset_of(i, shape, mst)) != 0) picks.push_back(offset_of(i, shape, sst));
  }
  std::unique_ptr<Tensor> out(new_contiguous(self.dtype(), {static_cast<int64_t>(picks.size())}));
  const size_t item = self.itemsize();
  for (size_t k = 0; k < picks.size(); ++k) {
    std::memcpy(static_cast<char*>(out->data_ptr()) + k * item,
                static_cast<const char*>(self.data_ptr()) + picks[k] * static_cast<int64_t>(item), item);
  }
  return out.release();
}

}  // namespace ops
}  // namespace aoti_host
