// aten::_weight_int8pack_mm (weight-only int8 linear: out = (self @ mat2^T) * scales per output channel)
// and aten::_int_mm (int8 x int8 -> int32 matrix product); their argument checks serve the CUDA shims too.
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

void check_weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales) {
  const int32_t dt = self.dtype();
  if (dt != kFloat32 && dt != kFloat16 && dt != kBFloat16) {
    throw Error(std::string("self has dtype ") + dtype_name(dt) + "; expected float32, float16 or bfloat16");
  }
  check_dtype(mat2, kInt8, "mat2");
  check_dtype(scales, dt, "scales");
  if (self.dim() != 2 || mat2.dim() != 2 || scales.dim() != 1 || mat2.sizes()[1] != self.sizes()[1] ||
      scales.sizes()[0] != mat2.sizes()[0]) {
    throw Error("expected self [M, K], mat2 [N, K] and scales [N]; got " + str(self.sizes()) + ", " +
                str(mat2.sizes()) + " and " + str(scales.sizes()));
  }
}

void check_int_mm(const Tensor& out, const Tensor& self, const Tensor& mat2) {
  check_dtype(self, kInt8, "self");
  check_dtype(mat2, kInt8, "mat2");
  check_dtype(out, kInt32, "out");
  if (self.dim() != 2 || mat2.dim() != 2 || self.sizes()[1] != mat2.sizes()[0]) {
    throw Error("expected self [M, K] and mat2 [K, N]; got " + str(self.sizes()) + " and " + str(mat2.sizes()));
  }
  const Shape want{self.sizes()[0], mat2.sizes()[1]};
  if (out.sizes() != want) throw Error("out has sizes " + str(out.sizes()) + "; expected " + str(want));
}

Tensor* weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales) {
  check_cpu(self, "self");
  check_cpu(mat2, "mat2");
  check_cpu(scales, "scales");
  check_weight_int8pack_mm(self, mat2, scales);
  const int32_t dt = self.dtype();
  const int64_t M = self.sizes()[0], K = self.sizes()[1], N = mat2.sizes()[0];
  std::unique_ptr<Tensor> out(new_contiguous(dt, {M, N}));
  const std::vector<double> a = to_doubles(self), w = to_doubles(mat2), s = to_doubles(scales);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += a[static_cast<size_t>(m * K + k)] * w[static_cast<size_t>(n * K + k)];
      store_f(out->data_ptr(), dt, m * N + n, round_to(kFloat32, acc) * s[static_cast<size_t>(n)]);
    }
  }
  return out.release();
}

void int_mm(Tensor& out, const Tensor& self, const Tensor& mat2) {
  check_cpu(out, "out");
  check_cpu(self, "self");
  check_cpu(mat2, "mat2");
  check_int_mm(out, self, mat2);
  const int64_t M = self.sizes()[0], K = self.sizes()[1], N = mat2.sizes()[1];
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += load_i(self.data_ptr(), kInt8, m * self.strides()[0] + k * self.strides()[1]) *
               load_i(mat2.data_ptr(), kInt8, k * mat2.strides()[0] + n * mat2.strides()[1]);
      }
      store_i(out.data_ptr(), kInt32, m * out.strides()[0] + n * out.strides()[1], acc);
    }
  }
}

}  // namespace ops
}  // namespace aoti_host
