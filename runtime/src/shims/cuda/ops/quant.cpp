// The int8 matrix products on CUDA (_int_mm, _weight_int8pack_mm): ops/quant.cpp's checks, then one kernel.
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

MatmulSpec matmul_spec(const Tensor& a, const Tensor& b, const Tensor& out) {
  MatmulSpec s{};
  s.m = a.sizes()[0], s.k = a.sizes()[1], s.n = out.sizes()[1];
  for (int i = 0; i < 2; ++i) s.a_st[i] = a.strides()[i], s.b_st[i] = b.strides()[i], s.out_st[i] = out.strides()[i];
  return s;
}

}  // namespace

void int_mm(Tensor& out, const Tensor& self, const Tensor& mat2) {
  const int device = self.device_index();
  require_cuda(self, "self", device), require_cuda(mat2, "mat2", device), require_cuda(out, "out", device);
  aoti_host::ops::check_int_mm(out, self, mat2);
  cu::launch_int_mm(static_cast<const int8_t*>(self.data_ptr()), static_cast<const int8_t*>(mat2.data_ptr()),
                    static_cast<int32_t*>(out.data_ptr()), matmul_spec(self, mat2, out), cu::stream_of(device));
}

Tensor* weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales) {
  const int device = self.device_index();
  require_cuda(self, "self", device), require_cuda(mat2, "mat2", device), require_cuda(scales, "scales", device);
  aoti_host::ops::check_weight_int8pack_mm(self, mat2, scales);
  const int32_t dt = self.dtype();
  Owned out(new_cuda(dt, {self.sizes()[0], mat2.sizes()[0]}, device));
  MatmulSpec s = matmul_spec(self, mat2, *out);
  s.scale_step = scales.strides()[0];
  cu::launch_weight_int8pack_mm(dt, self.data_ptr(), static_cast<const int8_t*>(mat2.data_ptr()), scales.data_ptr(),
                                out->data_ptr(), s, cu::stream_of(device));
  return out.release();
}

}  // namespace cuda
}  // namespace aoti_host
