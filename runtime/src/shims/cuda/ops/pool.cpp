// The pooling ops on CUDA: ops/pool.cpp's plans (arguments checked, ATen's output layout), run by one kernel.
#include <vector>

#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

// Runs a pooling plan (ops::plan_*: arguments checked, ATen's output layout) on self's device; indices
// (int64, out's layout) for the max kinds.
void run_pool(const Tensor& self, const aoti_host::ops::PoolPlan& plan, Tensor** out, Tensor** indices) {
  const int device = self.device_index();
  Owned o(new_cuda(self.dtype(), plan.out_sizes, plan.out_strides, device));
  Owned ix(indices != nullptr ? new_cuda(dc::kInt64, plan.out_sizes, plan.out_strides, device) : nullptr);
  PoolSpec sp{};
  sp.w = plan.w;
  const int nd = plan.w.nd;
  sp.lead = static_cast<int>(self.dim()) - nd;
  sp.total = plan.planes;
  for (int d = 0; d < sp.lead; ++d) {
    sp.lead_sizes[d] = self.sizes()[static_cast<size_t>(d)];
    sp.in_lead_st[d] = self.strides()[static_cast<size_t>(d)];
    sp.out_lead_st[d] = plan.out_strides[static_cast<size_t>(d)];
  }
  for (int d = 0; d < nd; ++d) {
    sp.in_sp_st[d] = self.strides()[static_cast<size_t>(sp.lead + d)];
    sp.out_sp_st[d] = plan.out_strides[static_cast<size_t>(sp.lead + d)];
    sp.total *= plan.w.out_sp[d];
  }
  cu::launch_pool(self.dtype(), self.data_ptr(), o->data_ptr(), ix ? static_cast<int64_t*>(ix->data_ptr()) : nullptr,
                  sp, cu::stream_of(device));
  *out = o.release();
  if (indices != nullptr) *indices = ix.release();
}

}  // namespace

void max_pool2d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                             const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode,
                             Tensor** out, Tensor** indices) {
  require_cuda(self, "self", self.device_index());
  run_pool(self, aoti_host::ops::plan_max_pool2d(self, kernel, stride, padding, dilation, ceil_mode), out, indices);
}

void adaptive_max_pool(int nd, const Tensor& self, const std::vector<int64_t>& output_size, Tensor** out,
                       Tensor** indices) {
  require_cuda(self, "self", self.device_index());
  run_pool(self, aoti_host::ops::plan_adaptive_pool(nd, self, output_size, true), out, indices);
}

Tensor* adaptive_avg_pool(int nd, const Tensor& self, const std::vector<int64_t>& output_size) {
  require_cuda(self, "self", self.device_index());
  Tensor* out = nullptr;
  run_pool(self, aoti_host::ops::plan_adaptive_pool(nd, self, output_size, false), &out, nullptr);
  return out;
}

Tensor* avg_pool(int nd, const Tensor& self, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& padding, bool ceil_mode, bool count_include_pad,
                 const int64_t* divisor_override) {
  require_cuda(self, "self", self.device_index());
  Tensor* out = nullptr;
  run_pool(self,
           aoti_host::ops::plan_avg_pool(nd, self, kernel, stride, padding, ceil_mode, count_include_pad,
                                         divisor_override),
           &out, nullptr);
  return out;
}

}  // namespace cuda
}  // namespace aoti_host
