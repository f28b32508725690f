// sort, sort.stable and topk on CUDA: one kernel sorts each line along the dimension (sort_kernels.cu).
#include "shims/cpu/strided.h"
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

void sort_into(const Tensor& self, int64_t dim, bool descending, int64_t keep, Tensor& values, Tensor& indices) {
  const Shape one{1};
  const bool zd = self.dim() == 0;
  const Shape& sst = zd ? one : self.strides();
  const Shape& vst = zd ? one : values.strides();
  const Shape& ist = zd ? one : indices.strides();
  const LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &vst, &ist});
  cu::launch_sort(self.dtype(), self.data_ptr(), values.data_ptr(), static_cast<int64_t*>(indices.data_ptr()), ls,
                  keep, descending, cu::stream_of(self.device_index()));
}

}  // namespace

void sort(const Tensor& self, int64_t dim, bool descending, Tensor** ret0, Tensor** ret1) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  // ATen's sort.stable meta: self's strides when non-overlapping and dense, else dense in self's order.
  const Shape strides = aoti_host::cpu::detail::empty_like_strides(self);
  Owned v(new_cuda(self.dtype(), self.sizes(), strides, device));
  Owned ix(new_cuda(dc::kInt64, self.sizes(), strides, device));
  if (self.numel() > 0) sort_into(self, dim, descending, self.dim() == 0 ? 1 : self.sizes()[dim], *v, *ix);
  *ret0 = v.release();
  *ret1 = ix.release();
}

// Sorts stably whatever `stable` says (a stable order is a valid result of the unstable sort too).
void sort_stable(const Tensor& self, const int32_t* stable, int64_t dim, bool descending, Tensor** values,
                 Tensor** indices) {
  (void)stable;
  sort(self, dim, descending, values, indices);
}

// Results come sorted (largest first for largest=True), ties in index order; a valid order for
// sorted=False too. Outputs are contiguous, as ATen's topk meta makes them.
void topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted, Tensor** ret0, Tensor** ret1) {
  (void)sorted;
  const int device = t.device_index();
  require_cuda(t, "self", device);
  dim = wrap_dim(dim, t.dim());
  const int64_t n = t.dim() == 0 ? 1 : t.sizes()[static_cast<size_t>(dim)];
  if (k < 0 || k > n)
    throw Error("k " + std::to_string(k) + " is out of range for dimension " + std::to_string(dim) + " of size " +
                std::to_string(n));
  Shape sizes = t.sizes();
  if (t.dim() > 0) sizes[static_cast<size_t>(dim)] = k;
  Owned v(new_cuda(t.dtype(), sizes, device));
  Owned ix(new_cuda(dc::kInt64, sizes, device));
  if (t.numel() > 0 && k > 0) sort_into(t, dim, largest, k, *v, *ix);
  *ret0 = v.release();
  *ret1 = ix.release();
}

}  // namespace cuda
}  // namespace aoti_host
