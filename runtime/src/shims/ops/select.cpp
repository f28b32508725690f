// aten::kthvalue and median (the full reduction): order statistics with NaN greater than every number,
// as ATen orders them (a NaN anywhere makes median NaN); and aten::_cdist_forward, the p-norm distances
// between the rows of two batches of matrices (kNN and retrieval heads), computed directly in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

void kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim, Tensor** values, Tensor** indices) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  dim = wrap_dim(dim, self.dim(), "dim");
  const int64_t n = self.dim() == 0 ? 1 : self.sizes()[static_cast<size_t>(dim)];
  if (k < 1 || k > n) {
    throw Error("k " + std::to_string(k) + " is out of range for dimension " + std::to_string(dim) + " of size " +
                std::to_string(n) + " (kthvalue's k counts from 1)");
  }
  // The k smallest along dim, sorted (topk's order: NaN greatest), then the k-th of them.
  Tensor *tv = nullptr, *ti = nullptr;
  topk(self, k, dim, false, true, &tv, &ti);
  std::unique_ptr<Tensor> top_v(tv), top_i(ti);
  Shape out_sizes = self.sizes();
  if (self.dim() > 0) {
    if (keepdim) {
      out_sizes[static_cast<size_t>(dim)] = 1;
    } else {
      out_sizes.erase(out_sizes.begin() + dim);
    }
  }
  std::unique_ptr<Tensor> v(new_contiguous(self.dtype(), out_sizes));
  std::unique_ptr<Tensor> ix(new_contiguous(kInt64, out_sizes));
  if (v->numel() > 0) {
    Shape sizes = top_v->sizes(), vst = top_v->strides(), ist = top_i->strides();
    int64_t voff = top_v->storage_offset(), ioff = top_i->storage_offset();
    if (self.dim() > 0) {  // the slice at k - 1 along dim, without that dim
      const auto d = static_cast<size_t>(dim);
      voff += (k - 1) * vst[d], ioff += (k - 1) * ist[d];
      sizes.erase(sizes.begin() + dim), vst.erase(vst.begin() + dim), ist.erase(ist.begin() + dim);
    }
    const size_t isz = self.itemsize();
    const char* vb = static_cast<const char*>(top_v->storage_data());
    const auto* ib = static_cast<const int64_t*>(top_i->storage_data());
    for (int64_t i = 0; i < v->numel(); ++i) {
      std::memcpy(static_cast<char*>(v->data_ptr()) + static_cast<size_t>(i) * isz,
                  vb + static_cast<size_t>(voff + offset_of(i, sizes, vst)) * isz, isz);
      static_cast<int64_t*>(ix->data_ptr())[i] = ib[ioff + offset_of(i, sizes, ist)];
    }
  }
  *values = v.release();
  *indices = ix.release();
}

Tensor* median(const Tensor& self) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  if (self.numel() == 0) throw Error("self is empty; median needs at least one element");
  std::unique_ptr<Tensor> out(new_contiguous(self.dtype(), {}));
  const bool floating = is_floating(self.dtype());
  const std::vector<double> all = to_doubles(self);
  if (floating && std::any_of(all.begin(), all.end(), [](double x) { return std::isnan(x); })) {
    store_f(out->data_ptr(), self.dtype(), 0, std::numeric_limits<double>::quiet_NaN());
    return out.release();
  }
  // The lower median, element (n - 1) / 2 of the sorted values; copied exactly (integers beyond 2^53
  // included) by picking the position, not the double.
  std::vector<int64_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto mid = order.begin() + static_cast<std::ptrdiff_t>((order.size() - 1) / 2);
  if (floating) {
    std::nth_element(order.begin(), mid, order.end(), [&](int64_t a, int64_t b) {
      return all[static_cast<size_t>(a)] < all[static_cast<size_t>(b)];
    });
  } else {
    std::vector<int64_t> ints(all.size());
    for (int64_t i = 0; i < self.numel(); ++i)
      ints[static_cast<size_t>(i)] = load_i(self.data_ptr(), self.dtype(), offset_of(i, self.sizes(), self.strides()));
    std::nth_element(order.begin(), mid, order.end(), [&](int64_t a, int64_t b) {
      return ints[static_cast<size_t>(a)] < ints[static_cast<size_t>(b)];
    });
  }
  const int64_t src = offset_of(*mid, self.sizes(), self.strides());
  std::memcpy(out->data_ptr(), static_cast<const char*>(self.data_ptr()) + static_cast<size_t>(src) * self.itemsize(),
              self.itemsize());
  return out.release();
}

Tensor* cdist(const Tensor& x1, const Tensor& x2, double p, const int64_t* compute_mode) {
  // compute_mode picks ATen's matrix-product shortcut for p = 2 or not: the same distances, computed
  // directly here either way.
  if (compute_mode != nullptr && (*compute_mode < 0 || *compute_mode > 2))
    throw Error("compute_mode " + std::to_string(*compute_mode) + " is not 0, 1 or 2");
  check_cpu(x1, "x1");
  check_cpu(x2, "x2");
  if (x1.dtype() != kFloat32 && x1.dtype() != kFloat64)
    throw Error(std::string("x1 has dtype ") + dtype_name(x1.dtype()) + "; cdist takes float32 or float64");
  check_dtype(x2, x1.dtype(), "x2");
  if (x1.dim() < 2 || x2.dim() < 2)
    throw Error("x1 " + str(x1.sizes()) + " and x2 " + str(x2.sizes()) + " must have at least 2 dimensions");
  const int64_t P = x1.sizes()[x1.sizes().size() - 2], R = x2.sizes()[x2.sizes().size() - 2];
  const int64_t M = x1.sizes().back();
  if (x2.sizes().back() != M)
    throw Error("x1 " + str(x1.sizes()) + " and x2 " + str(x2.sizes()) + " must have the same last dimension");
  if (!(p >= 0)) throw Error("p " + std::to_string(p) + " must be non-negative");
  // Batch dimensions broadcast (numpy rules).
  Shape batch(x1.sizes().begin(), x1.sizes().end() - 2);
  if (!broadcast_into(batch, Shape(x2.sizes().begin(), x2.sizes().end() - 2)))
    throw Error("the batch dimensions of x1 " + str(x1.sizes()) + " and x2 " + str(x2.sizes()) + " do not broadcast");
  const size_t nb = batch.size();
  Shape out_sizes = batch;
  out_sizes.push_back(P);
  out_sizes.push_back(R);
  std::unique_ptr<Tensor> out(new_contiguous(x1.dtype(), out_sizes));
  Shape s1 = batch, s2 = batch;
  s1.push_back(P), s1.push_back(M), s2.push_back(R), s2.push_back(M);
  const Shape st1 = cpu::detail::broadcast_strides(x1, s1, "x1"), st2 = cpu::detail::broadcast_strides(x2, s2, "x2");
  const int64_t nbatch = numel_of(batch);
  const Shape bst1(st1.begin(), st1.end() - 2), bst2(st2.begin(), st2.end() - 2);
  const int64_t r1 = st1[nb], c1 = st1[nb + 1], r2 = st2[nb], c2 = st2[nb + 1];
  const bool inf = std::isinf(p);
  for (int64_t b = 0; b < nbatch; ++b) {
    const int64_t o1 = offset_of(b, batch, bst1), o2 = offset_of(b, batch, bst2);
    for (int64_t i = 0; i < P; ++i) {
      for (int64_t j = 0; j < R; ++j) {
        double acc = 0.0;
        for (int64_t m = 0; m < M; ++m) {
          const double d = std::fabs(load_f(x1.data_ptr(), x1.dtype(), o1 + i * r1 + m * c1) -
                                     load_f(x2.data_ptr(), x2.dtype(), o2 + j * r2 + m * c2));
          if (inf) {
            acc = std::max(acc, d);
          } else if (p == 0) {
            acc += d != 0 ? 1.0 : 0.0;
          } else if (p == 1) {
            acc += d;
          } else if (p == 2) {
            acc += d * d;
          } else {
            acc += std::pow(d, p);
          }
        }
        const double r = (inf || p == 0 || p == 1) ? acc : p == 2 ? std::sqrt(acc) : std::pow(acc, 1.0 / p);
        store_f(out->data_ptr(), x1.dtype(), (b * P + i) * R + j, r);
      }
    }
  }
  return out.release();
}

}  // namespace ops
}  // namespace aoti_host
