// aten::max_pool2d_with_indices, adaptive_max_pool2d, _adaptive_avg_pool2d, avg_pool2d/3d on [C, *] or
// [N, C, *] inputs. Window rules, NaN handling (a NaN wins a max window), index encoding (flat
// position in the input plane) and output memory format (channels-last in, channels-last out) follow
// ATen's CPU kernels; sums in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "../cpu_kernels.h"
#include "op_util.h"
#include "ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

// ATen's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// An int list of 1 or nd values (or empty, taking `fallback`) as nd values.
Shape expand(const Shape& v, size_t nd, const char* name, const Shape* fallback = nullptr) {
  if (v.empty() && fallback != nullptr) return *fallback;
  if (v.size() == 1) return Shape(nd, v[0]);
  if (v.size() != nd) {
    throw Error(std::string(name) + " has " + std::to_string(v.size()) + " values; expected 1 or " + std::to_string(nd));
  }
  return v;
}

struct Geometry {
  int nd;                // spatial dims (2 or 3)
  int64_t planes;        // product of the leading (N, C) dims
  Shape in_sp, out_sp;   // spatial sizes
  Shape out_sizes;       // full output sizes
  Shape out_strides;     // ATen's output memory format
};

Geometry geometry(const Tensor& self, int nd, const Shape& out_sp) {
  check_cpu(self, "self");
  if (!is_floating(self.dtype()) && !is_integral(self.dtype())) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating or integer dtype");
  }
  if (self.dim() != nd + 1 && self.dim() != nd + 2) {
    throw Error("self has sizes " + str(self.sizes()) + "; expected " + std::to_string(nd + 1) + " or " +
                std::to_string(nd + 2) + " dimensions");
  }
  Geometry g;
  g.nd = nd;
  const int64_t lead = self.dim() - nd;
  g.planes = 1;
  for (int64_t d = 0; d < lead; ++d) g.planes *= self.sizes()[d];
  g.in_sp.assign(self.sizes().begin() + lead, self.sizes().end());
  for (int64_t s : g.in_sp) {
    if (s <= 0 && g.planes > 0) throw Error("self has sizes " + str(self.sizes()) + ": empty spatial dimensions");
  }
  g.out_sp = out_sp;
  g.out_sizes.assign(self.sizes().begin(), self.sizes().begin() + lead);
  g.out_sizes.insert(g.out_sizes.end(), out_sp.begin(), out_sp.end());
  // ATen's 2-d pools keep a channels-last input's format; its 3-d average pool always returns contiguous.
  const bool cl = nd == 2 && self.dim() == 4 && cpu::is_channels_last_strides_2d(self.sizes(), self.strides());
  if (cl) {  // channels-last: C innermost, then W, H(, D), N
    const Shape& o = g.out_sizes;
    g.out_strides.assign(o.size(), 0);
    int64_t s = 1;
    g.out_strides[1] = s;
    s *= o[1];
    for (size_t d = o.size() - 1; d >= 2; --d) {
      g.out_strides[d] = s;
      s *= o[d];
    }
    g.out_strides[0] = s;
  } else {
    g.out_strides = Tensor::contiguous_strides(g.out_sizes);
  }
  return g;
}

// Offset of (plane p, spatial position sp) in a tensor whose first dims are the planes.
int64_t at(const Tensor& t, const Shape& sizes, const Shape& strides, int nd, int64_t p, const Shape& sp) {
  const size_t lead = sizes.size() - static_cast<size_t>(nd);
  int64_t off = offset_of(p, Shape(sizes.begin(), sizes.begin() + static_cast<int64_t>(lead)),
                          Shape(strides.begin(), strides.begin() + static_cast<int64_t>(lead)));
  for (int d = 0; d < nd; ++d) off += sp[static_cast<size_t>(d)] * strides[lead + static_cast<size_t>(d)];
  (void)t;
  return off;
}

// Calls f(plane, output position) for every output element.
template <typename F>
void for_each_out(const Geometry& g, F&& f) {
  const int64_t per = numel_of(g.out_sp);
  Shape pos(static_cast<size_t>(g.nd));
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t i = 0; i < per; ++i) {
      int64_t rem = i;
      for (int d = g.nd; d-- > 0;) {
        pos[static_cast<size_t>(d)] = rem % g.out_sp[static_cast<size_t>(d)];
        rem /= g.out_sp[static_cast<size_t>(d)];
      }
      f(p, pos);
    }
  }
}

// Max over a window given per-dim [start, end) and step; returns (value, flat input-plane index).
std::pair<double, int64_t> window_max(const Tensor& self, const Geometry& g, int64_t p, const Shape& lo,
                                      const Shape& hi, const Shape& step) {
  double best = -std::numeric_limits<double>::infinity();
  int64_t best_i = 0;
  for (int d = 0; d < g.nd; ++d) best_i = best_i * g.in_sp[static_cast<size_t>(d)] + lo[static_cast<size_t>(d)];
  Shape pos = lo;
  bool any = true;
  for (int d = 0; d < g.nd; ++d) any = any && lo[static_cast<size_t>(d)] < hi[static_cast<size_t>(d)];
  while (any) {
    const double v = load_f(self.data_ptr(), self.dtype(), at(self, self.sizes(), self.strides(), g.nd, p, pos));
    if (v > best || std::isnan(v)) {
      best = v;
      best_i = 0;
      for (int d = 0; d < g.nd; ++d) best_i = best_i * g.in_sp[static_cast<size_t>(d)] + pos[static_cast<size_t>(d)];
    }
    int d = g.nd - 1;
    for (; d >= 0; --d) {
      pos[static_cast<size_t>(d)] += step[static_cast<size_t>(d)];
      if (pos[static_cast<size_t>(d)] < hi[static_cast<size_t>(d)]) break;
      pos[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)];
    }
    if (d < 0) break;
  }
  return {best, best_i};
}

double window_sum(const Tensor& self, const Geometry& g, int64_t p, const Shape& lo, const Shape& hi) {
  double sum = 0.0;
  Shape pos = lo;
  for (int d = 0; d < g.nd; ++d) {
    if (lo[static_cast<size_t>(d)] >= hi[static_cast<size_t>(d)]) return 0.0;
  }
  while (true) {
    sum += load_f(self.data_ptr(), self.dtype(), at(self, self.sizes(), self.strides(), g.nd, p, pos));
    int d = g.nd - 1;
    for (; d >= 0; --d) {
      if (++pos[static_cast<size_t>(d)] < hi[static_cast<size_t>(d)]) break;
      pos[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)];
    }
    if (d < 0) break;
  }
  return sum;
}

void check_positive(const Shape& v, const char* name) {
  for (int64_t x : v) {
    if (x <= 0) throw Error(std::string(name) + " " + str(v) + " must be positive");
  }
}

}  // namespace

void max_pool2d_with_indices(const Tensor& self, const Shape& kernel_in, const Shape& stride_in, const Shape& padding_in,
                             const Shape& dilation_in, bool ceil_mode, Tensor** out, Tensor** indices) {
  const Shape k = expand(kernel_in, 2, "kernel_size");
  const Shape s = expand(stride_in, 2, "stride", &k);
  const Shape pad = expand(padding_in, 2, "padding");
  const Shape dil = expand(dilation_in, 2, "dilation");
  check_positive(k, "kernel_size");
  check_positive(s, "stride");
  check_positive(dil, "dilation");
  for (int d = 0; d < 2; ++d) {
    if (pad[d] < 0 || pad[d] * 2 > k[d]) {
      throw Error("padding " + str(pad) + " must be non-negative and at most half of kernel_size " + str(k));
    }
  }
  const int64_t lead = self.dim() - 2;
  if (lead < 1) throw Error("self has sizes " + str(self.sizes()) + "; expected 3 or 4 dimensions");
  Shape osp(2);
  for (int d = 0; d < 2; ++d) {
    osp[d] = pooled_size(self.sizes()[lead + d], k[d], pad[d], s[d], dil[d], ceil_mode);
    if (osp[d] <= 0) throw Error("the output size " + str(osp) + " is too small for input " + str(self.sizes()));
  }
  const Geometry g = geometry(self, 2, osp);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), g.out_sizes, g.out_strides));
  std::unique_ptr<Tensor> ix(new_strided(kInt64, g.out_sizes, g.out_strides));
  for_each_out(g, [&](int64_t p, const Shape& pos) {
    Shape lo(2), hi(2);
    for (int d = 0; d < 2; ++d) {
      int64_t start = pos[d] * s[d] - pad[d];
      hi[d] = std::min(start + (k[d] - 1) * dil[d] + 1, g.in_sp[d]);
      while (start < 0) start += dil[d];
      lo[d] = start;
    }
    const auto best = window_max(self, g, p, lo, hi, dil);
    const int64_t off = at(*o, o->sizes(), o->strides(), 2, p, pos);
    store_f(o->data_ptr(), o->dtype(), off, best.first);
    store_i(ix->data_ptr(), kInt64, off, best.second);
  });
  *out = o.release();
  *indices = ix.release();
}

void adaptive_max_pool2d(const Tensor& self, const Shape& output_size, Tensor** out, Tensor** indices) {
  if (output_size.size() != 2) throw Error("output_size " + str(output_size) + " must have 2 values");
  for (int64_t x : output_size) {
    if (x < 0) throw Error("output_size " + str(output_size) + " must be non-negative");
  }
  const Geometry g = geometry(self, 2, output_size);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), g.out_sizes, g.out_strides));
  std::unique_ptr<Tensor> ix(new_strided(kInt64, g.out_sizes, g.out_strides));
  const Shape one{1, 1};
  for_each_out(g, [&](int64_t p, const Shape& pos) {
    Shape lo(2), hi(2);
    for (int d = 0; d < 2; ++d) {
      lo[d] = pos[d] * g.in_sp[d] / g.out_sp[d];
      hi[d] = ((pos[d] + 1) * g.in_sp[d] + g.out_sp[d] - 1) / g.out_sp[d];
    }
    const auto best = window_max(self, g, p, lo, hi, one);
    const int64_t off = at(*o, o->sizes(), o->strides(), 2, p, pos);
    store_f(o->data_ptr(), o->dtype(), off, best.first);
    store_i(ix->data_ptr(), kInt64, off, best.second);
  });
  *out = o.release();
  *indices = ix.release();
}

Tensor* adaptive_avg_pool2d(const Tensor& self, const Shape& output_size) {
  if (output_size.size() != 2) throw Error("output_size " + str(output_size) + " must have 2 values");
  for (int64_t x : output_size) {
    if (x < 0) throw Error("output_size " + str(output_size) + " must be non-negative");
  }
  if (!is_floating(self.dtype())) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating dtype");
  }
  const Geometry g = geometry(self, 2, output_size);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), g.out_sizes, g.out_strides));
  for_each_out(g, [&](int64_t p, const Shape& pos) {
    Shape lo(2), hi(2);
    for (int d = 0; d < 2; ++d) {
      lo[d] = pos[d] * g.in_sp[d] / g.out_sp[d];
      hi[d] = ((pos[d] + 1) * g.in_sp[d] + g.out_sp[d] - 1) / g.out_sp[d];
    }
    const double n = static_cast<double>((hi[0] - lo[0]) * (hi[1] - lo[1]));
    store_f(o->data_ptr(), o->dtype(), at(*o, o->sizes(), o->strides(), 2, p, pos), window_sum(self, g, p, lo, hi) / n);
  });
  return o.release();
}

Tensor* avg_pool(int nd, const Tensor& self, const Shape& kernel_in, const Shape& stride_in, const Shape& padding_in,
                 bool ceil_mode, bool count_include_pad, const int64_t* divisor_override) {
  const size_t n = static_cast<size_t>(nd);
  const Shape k = expand(kernel_in, n, "kernel_size");
  const Shape s = expand(stride_in, n, "stride", &k);
  const Shape pad = expand(padding_in, n, "padding");
  check_positive(k, "kernel_size");
  check_positive(s, "stride");
  if (divisor_override != nullptr && *divisor_override == 0) throw Error("divisor_override must be non-zero");
  if (!is_floating(self.dtype()) && self.dtype() != kInt64) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating dtype or int64");
  }
  for (size_t d = 0; d < n; ++d) {
    if (pad[d] < 0 || pad[d] * 2 > k[d]) {
      throw Error("padding " + str(pad) + " must be non-negative and at most half of kernel_size " + str(k));
    }
  }
  const int64_t lead = self.dim() - nd;
  if (lead < 1) throw Error("self has sizes " + str(self.sizes()) + "; too few dimensions");
  Shape osp(n);
  for (size_t d = 0; d < n; ++d) {
    osp[d] = pooled_size(self.sizes()[static_cast<size_t>(lead) + d], k[d], pad[d], s[d], 1, ceil_mode);
    if (osp[d] <= 0) throw Error("the output size " + str(osp) + " is too small for input " + str(self.sizes()));
  }
  const Geometry g = geometry(self, nd, osp);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), g.out_sizes, g.out_strides));
  for_each_out(g, [&](int64_t p, const Shape& pos) {
    Shape lo(n), hi(n);
    int64_t pool_size = 1, real = 1;
    for (size_t d = 0; d < n; ++d) {
      const int64_t a = pos[d] * s[d] - pad[d];
      const int64_t b = std::min(a + k[d], g.in_sp[d] + pad[d]);
      pool_size *= b - a;
      lo[d] = std::max<int64_t>(a, 0);
      hi[d] = std::min(b, g.in_sp[d]);
      real *= std::max<int64_t>(hi[d] - lo[d], 0);
    }
    const int64_t off = at(*o, o->sizes(), o->strides(), nd, p, pos);
    if (real == 0) {
      store_f(o->data_ptr(), o->dtype(), off, 0.0);
      return;
    }
    const int64_t div = divisor_override ? *divisor_override : (count_include_pad ? pool_size : real);
    const double sum = window_sum(self, g, p, lo, hi);
    if (self.dtype() == kInt64) {  // integer average: truncating division, as ATen's int64 kernel
      store_i(o->data_ptr(), kInt64, off, static_cast<int64_t>(sum) / div);
    } else {
      store_f(o->data_ptr(), o->dtype(), off, sum / static_cast<double>(div));
    }
  });
  return o.release();
}

}  // namespace ops
}  // namespace aoti_host
