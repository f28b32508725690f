// aten::sort (stable and not: both sort stably here, a valid order for the unstable variant too) and
// aten::topk. NaN compares greater than every number, as in ATen.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

template <typename K>
bool nan_(K v) {
  return v != v;  // NOLINT(misc-redundant-expression): true only for NaN
}

// a < b with NaN greatest; ascending order.
template <typename K>
bool less_nan(K a, K b) {
  if (nan_(a)) return false;
  if (nan_(b)) return true;
  return a < b;
}

// Sorts each line of self along dim into (values, indices); the first `keep` of each sorted line go to
// the outputs (keep == line length for sort).
template <typename K>
void sort_lines(const Tensor& self, int64_t dim, bool descending, int64_t keep, Tensor& values, Tensor& indices) {
  const Shape& sizes = self.sizes();
  const int64_t n = sizes[dim];
  const int32_t dt = self.dtype();
  const void* src = self.data_ptr();
  void* vdst = values.data_ptr();
  void* idst = indices.data_ptr();
  const int64_t ss = self.strides()[dim], vs = values.strides()[dim], is = indices.strides()[dim];
  std::vector<K> keys(static_cast<size_t>(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for_each_line(sizes, dim, {&self.strides(), &values.strides(), &indices.strides()}, [&](const std::vector<int64_t>& b) {
    for (int64_t j = 0; j < n; ++j) keys[j] = load_key<K>(src, dt, b[0] + j * ss);
    std::iota(order.begin(), order.end(), int64_t{0});
    if (descending) {
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return less_nan(keys[y], keys[x]); });
    } else {
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return less_nan(keys[x], keys[y]); });
    }
    for (int64_t j = 0; j < keep; ++j) {
      // Copy the element itself (exact for every dtype), not the key.
      const int64_t from = b[0] + order[j] * ss;
      std::memcpy(static_cast<char*>(vdst) + (b[1] + j * vs) * static_cast<int64_t>(self.itemsize()),
                  static_cast<const char*>(src) + from * static_cast<int64_t>(self.itemsize()), self.itemsize());
      store_i(idst, kInt64, b[2] + j * is, order[j]);
    }
  });
}

void dispatch_sort(const Tensor& self, int64_t dim, bool descending, int64_t keep, Tensor& values, Tensor& indices) {
  if (is_floating(self.dtype())) {
    sort_lines<double>(self, dim, descending, keep, values, indices);
  } else {
    sort_lines<int64_t>(self, dim, descending, keep, values, indices);
  }
}

}  // namespace

void sort(const Tensor& self, int64_t dim, bool descending, Tensor** values, Tensor** indices) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  dim = wrap_dim(dim, self.dim(), "dim");
  // ATen's sort.stable meta: self's strides when non-overlapping and dense, else dense in self's order.
  const Shape strides = empty_like_strides(self);
  std::unique_ptr<Tensor> v(new_strided(self.dtype(), self.sizes(), strides));
  std::unique_ptr<Tensor> ix(new_strided(kInt64, self.sizes(), strides));
  if (self.dim() == 0) {
    std::memcpy(v->data_ptr(), self.data_ptr(), self.itemsize());
    store_i(ix->data_ptr(), kInt64, 0, 0);
  } else if (self.numel() > 0) {
    dispatch_sort(self, dim, descending, self.sizes()[dim], *v, *ix);
  }
  *values = v.release();
  *indices = ix.release();
}

void sort_stable(const Tensor& self, const int32_t* stable, int64_t dim, bool descending, Tensor** values,
                 Tensor** indices) {
  (void)stable;  // stable sorting is a valid result of the unstable variant too
  sort(self, dim, descending, values, indices);
}

void topk(const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted, Tensor** values, Tensor** indices) {
  (void)sorted;  // results come sorted, a valid order for sorted=False too
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  dim = wrap_dim(dim, self.dim(), "dim");
  const int64_t n = self.dim() == 0 ? 1 : self.sizes()[dim];
  if (k < 0 || k > n) {
    throw Error("k " + std::to_string(k) + " is out of range for dimension " + std::to_string(dim) + " of size " +
                std::to_string(n) + " (selected index k out of range)");
  }
  Shape out_sizes = self.sizes();
  if (self.dim() > 0) out_sizes[dim] = k;
  // ATen's topk meta: contiguous outputs.
  std::unique_ptr<Tensor> v(new_contiguous(self.dtype(), out_sizes));
  std::unique_ptr<Tensor> ix(new_contiguous(kInt64, out_sizes));
  if (self.dim() == 0) {
    if (k == 1) {
      std::memcpy(v->data_ptr(), self.data_ptr(), self.itemsize());
      store_i(ix->data_ptr(), kInt64, 0, 0);
    }
  } else if (self.numel() > 0 && k > 0) {
    dispatch_sort(self, dim, largest, k, *v, *ix);
  }
  *values = v.release();
  *indices = ix.release();
}

}  // namespace ops
}  // namespace aoti_host
