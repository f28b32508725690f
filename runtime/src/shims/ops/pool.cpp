// aten::max_pool2d_with_indices, adaptive_max_pool2d/3d, _adaptive_avg_pool2d/3d, avg_pool2d/3d on [C, *] or
// [N, C, *] inputs. The windows are pool_window.h's (shared with the CUDA kernels); NaN handling (a NaN
// wins a max window), index encoding (flat position in the input plane) and output memory format
// (channels-last in, channels-last out) follow ATen's CPU kernels; sums in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "shims/cpu_kernels.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

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

// Checks self's rank and spatial sizes, and fills the plan's leading planes and ATen's output layout for
// the output spatial sizes already in w.
PoolPlan finish(const Tensor& self, PoolWindows w) {
  const int nd = w.nd;
  if (self.dim() != nd + 1 && self.dim() != nd + 2) {
    throw Error("self has sizes " + str(self.sizes()) + "; expected " + std::to_string(nd + 1) + " or " +
                std::to_string(nd + 2) + " dimensions");
  }
  PoolPlan plan{};
  const int64_t lead = self.dim() - nd;
  plan.planes = 1;
  for (int64_t d = 0; d < lead; ++d) plan.planes *= self.sizes()[static_cast<size_t>(d)];
  for (int d = 0; d < nd; ++d) {
    w.in_sp[d] = self.sizes()[static_cast<size_t>(lead + d)];
    if (w.in_sp[d] <= 0 && plan.planes > 0) {
      throw Error("self has sizes " + str(self.sizes()) + ": empty spatial dimensions");
    }
  }
  plan.out_sizes.assign(self.sizes().begin(), self.sizes().begin() + lead);
  plan.out_sizes.insert(plan.out_sizes.end(), w.out_sp, w.out_sp + nd);
  // ATen's 2-d pools keep a channels-last input's format; its 3-d average pool always returns contiguous.
  const bool cl = nd == 2 && self.dim() == 4 && cpu::is_channels_last_strides_2d(self.sizes(), self.strides());
  if (cl) {  // channels-last: C innermost, then W, H, N
    const Shape& o = plan.out_sizes;
    plan.out_strides.assign(o.size(), 0);
    int64_t st = 1;
    plan.out_strides[1] = st;
    st *= o[1];
    for (size_t d = o.size() - 1; d >= 2; --d) {
      plan.out_strides[d] = st;
      st *= o[d];
    }
    plan.out_strides[0] = st;
  } else {
    plan.out_strides = Tensor::contiguous_strides(plan.out_sizes);
  }
  plan.w = w;
  return plan;
}

void check_positive(const Shape& v, const char* name) {
  for (int64_t x : v) {
    if (x <= 0) throw Error(std::string(name) + " " + str(v) + " must be positive");
  }
}

void check_padding(const Shape& pad, const Shape& k) {
  for (size_t d = 0; d < k.size(); ++d) {
    if (pad[d] < 0 || pad[d] * 2 > k[d]) {
      throw Error("padding " + str(pad) + " must be non-negative and at most half of kernel_size " + str(k));
    }
  }
}

// The windowed pools' output sizes (ATen's pooling_output_shape) into w.out_sp.
void pooled_sizes(const Tensor& self, PoolWindows& w, bool ceil_mode) {
  const int64_t lead = self.dim() - w.nd;
  if (lead < 1) {
    throw Error("self has sizes " + str(self.sizes()) + "; expected " + std::to_string(w.nd + 1) + " or " +
                std::to_string(w.nd + 2) + " dimensions");
  }
  Shape osp(static_cast<size_t>(w.nd));
  for (int d = 0; d < w.nd; ++d) {
    osp[static_cast<size_t>(d)] = w.out_sp[d] =
        pooled_size(self.sizes()[static_cast<size_t>(lead + d)], w.k[d], w.pad[d], w.s[d], w.dil[d], ceil_mode);
  }
  for (int64_t o : osp) {
    if (o <= 0) throw Error("the output size " + str(osp) + " is too small for input " + str(self.sizes()));
  }
}

void copy_to(int64_t* dst, const Shape& v) {
  for (size_t i = 0; i < v.size(); ++i) dst[i] = v[i];
}

// Offset of (plane p, spatial position sp) in a tensor of the given sizes and strides.
int64_t at(const Shape& sizes, const Shape& strides, int nd, int64_t p, const int64_t* sp) {
  const auto lead = static_cast<std::ptrdiff_t>(sizes.size()) - nd;
  int64_t off = offset_of(p, Shape(sizes.begin(), sizes.begin() + lead), Shape(strides.begin(), strides.begin() + lead));
  for (int d = 0; d < nd; ++d) off += sp[d] * strides[static_cast<size_t>(lead + d)];
  return off;
}

// Calls f(plane, output position, the ranges it reads) for every output element.
template <typename F>
void for_each_out(const PoolPlan& plan, F&& f) {
  const PoolWindows& w = plan.w;
  int64_t per = 1;
  for (int d = 0; d < w.nd; ++d) per *= w.out_sp[d];
  int64_t pos[kPoolMaxDims] = {};
  PoolRange r[kPoolMaxDims] = {};
  for (int64_t p = 0; p < plan.planes; ++p) {
    for (int64_t i = 0; i < per; ++i) {
      int64_t rem = i;
      for (int d = w.nd; d-- > 0;) {
        pos[d] = rem % w.out_sp[d];
        rem /= w.out_sp[d];
        r[d] = pool_range(w, d, pos[d]);
      }
      f(p, pos, r);
    }
  }
}

// Calls f(input offset, flat index in the input plane) for every input element the ranges cover.
template <typename F>
void for_each_in(const Tensor& self, const PoolWindows& w, int64_t p, const PoolRange* r, F&& f) {
  int64_t sp[kPoolMaxDims];
  for (int d = 0; d < w.nd; ++d) {
    if (r[d].lo >= r[d].hi) return;
    sp[d] = r[d].lo;
  }
  while (true) {
    int64_t flat = 0;
    for (int d = 0; d < w.nd; ++d) flat = flat * w.in_sp[d] + sp[d];
    f(at(self.sizes(), self.strides(), w.nd, p, sp), flat);
    if (!pool_next(w, r, sp)) return;
  }
}

// Max pools: the largest value (a NaN wins) and its flat index in the input plane.
void max_kernel(const Tensor& self, const PoolPlan& plan, Tensor** out, Tensor** indices) {
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), plan.out_sizes, plan.out_strides));
  std::unique_ptr<Tensor> ix(new_strided(kInt64, plan.out_sizes, plan.out_strides));
  const PoolWindows& w = plan.w;
  for_each_out(plan, [&](int64_t p, const int64_t* pos, const PoolRange* r) {
    double best = -std::numeric_limits<double>::infinity();
    int64_t best_i = 0;
    for (int d = 0; d < w.nd; ++d) best_i = best_i * w.in_sp[d] + r[d].lo;
    for_each_in(self, w, p, r, [&](int64_t off, int64_t flat) {
      const double v = load_f(self.data_ptr(), self.dtype(), off);
      if (v > best || std::isnan(v)) {
        best = v;
        best_i = flat;
      }
    });
    const int64_t off = at(plan.out_sizes, plan.out_strides, w.nd, p, pos);
    store_f(o->data_ptr(), o->dtype(), off, best);
    store_i(ix->data_ptr(), kInt64, off, best_i);
  });
  *out = o.release();
  *indices = ix.release();
}

void check_max_dtype(const Tensor& self) {
  check_cpu(self, "self");
  if (!is_floating(self.dtype()) && !is_integral(self.dtype())) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating or integer dtype");
  }
}

}  // namespace

PoolPlan plan_max_pool2d(const Tensor& self, const Shape& kernel_in, const Shape& stride_in, const Shape& padding_in,
                         const Shape& dilation_in, bool ceil_mode) {
  const Shape k = expand(kernel_in, 2, "kernel_size");
  const Shape s = expand(stride_in, 2, "stride", &k);
  const Shape pad = expand(padding_in, 2, "padding");
  const Shape dil = expand(dilation_in, 2, "dilation");
  check_positive(k, "kernel_size");
  check_positive(s, "stride");
  check_positive(dil, "dilation");
  check_padding(pad, k);
  PoolWindows w{};
  w.kind = PoolKind::kMax;
  w.nd = 2;
  copy_to(w.k, k), copy_to(w.s, s), copy_to(w.pad, pad), copy_to(w.dil, dil);
  pooled_sizes(self, w, ceil_mode);
  return finish(self, w);
}

PoolPlan plan_adaptive_pool(int nd, const Tensor& self, const Shape& output_size, bool max) {
  if (output_size.size() != static_cast<size_t>(nd))
    throw Error("output_size " + str(output_size) + " must have " + std::to_string(nd) + " values");
  for (int64_t x : output_size) {
    if (x < 0) throw Error("output_size " + str(output_size) + " must be non-negative");
  }
  PoolWindows w{};
  w.kind = max ? PoolKind::kAdaptiveMax : PoolKind::kAdaptiveAvg;
  w.nd = nd;
  copy_to(w.out_sp, output_size);
  return finish(self, w);
}

PoolPlan plan_avg_pool(int nd, const Tensor& self, const Shape& kernel_in, const Shape& stride_in,
                       const Shape& padding_in, bool ceil_mode, bool count_include_pad,
                       const int64_t* divisor_override) {
  const size_t n = static_cast<size_t>(nd);
  const Shape k = expand(kernel_in, n, "kernel_size");
  const Shape s = expand(stride_in, n, "stride", &k);
  const Shape pad = expand(padding_in, n, "padding");
  check_positive(k, "kernel_size");
  check_positive(s, "stride");
  if (divisor_override != nullptr && *divisor_override == 0) throw Error("divisor_override must be non-zero");
  check_padding(pad, k);
  PoolWindows w{};
  w.kind = PoolKind::kAvg;
  w.nd = nd;
  copy_to(w.k, k), copy_to(w.s, s), copy_to(w.pad, pad);
  for (int d = 0; d < nd; ++d) w.dil[d] = 1;
  w.count_include_pad = count_include_pad;
  w.has_divisor = divisor_override != nullptr;
  w.divisor = divisor_override != nullptr ? *divisor_override : 0;
  pooled_sizes(self, w, ceil_mode);
  return finish(self, w);
}

void max_pool2d_with_indices(const Tensor& self, const Shape& kernel, const Shape& stride, const Shape& padding,
                             const Shape& dilation, bool ceil_mode, Tensor** out, Tensor** indices) {
  check_max_dtype(self);
  max_kernel(self, plan_max_pool2d(self, kernel, stride, padding, dilation, ceil_mode), out, indices);
}

void adaptive_max_pool(int nd, const Tensor& self, const Shape& output_size, Tensor** out, Tensor** indices) {
  check_max_dtype(self);
  max_kernel(self, plan_adaptive_pool(nd, self, output_size, true), out, indices);
}

Tensor* adaptive_avg_pool(int nd, const Tensor& self, const Shape& output_size) {
  check_cpu(self, "self");
  if (!is_floating(self.dtype())) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating dtype");
  }
  const PoolPlan plan = plan_adaptive_pool(nd, self, output_size, false);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), plan.out_sizes, plan.out_strides));
  for_each_out(plan, [&](int64_t p, const int64_t* pos, const PoolRange* r) {
    double sum = 0.0;
    for_each_in(self, plan.w, p, r, [&](int64_t off, int64_t) { sum += load_f(self.data_ptr(), self.dtype(), off); });
    store_f(o->data_ptr(), o->dtype(), at(plan.out_sizes, plan.out_strides, nd, p, pos),
            sum / static_cast<double>(avg_divisor(plan.w, r)));
  });
  return o.release();
}

Tensor* avg_pool(int nd, const Tensor& self, const Shape& kernel, const Shape& stride, const Shape& padding,
                 bool ceil_mode, bool count_include_pad, const int64_t* divisor_override) {
  check_cpu(self, "self");
  if (!is_floating(self.dtype()) && self.dtype() != kInt64) {
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected a floating dtype or int64");
  }
  const PoolPlan plan = plan_avg_pool(nd, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
  std::unique_ptr<Tensor> o(new_strided(self.dtype(), plan.out_sizes, plan.out_strides));
  for_each_out(plan, [&](int64_t p, const int64_t* pos, const PoolRange* r) {
    const int64_t off = at(plan.out_sizes, plan.out_strides, nd, p, pos);
    const int64_t div = avg_divisor(plan.w, r);
    if (div == 0) {
      store_f(o->data_ptr(), o->dtype(), off, 0.0);
      return;
    }
    double sum = 0.0;
    for_each_in(self, plan.w, p, r, [&](int64_t in, int64_t) { sum += load_f(self.data_ptr(), self.dtype(), in); });
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
