// cumsum and cumprod (scan), cummax and cummin (cum_extreme) on CUDA: one kernel scans each line along the
// dimension (scan_kernels.cu).
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

int32_t scan_out_dtype(const Tensor& self, const int32_t* dtype) {
  if (dtype != nullptr) return *dtype;
  const int32_t dt = self.dtype();
  const bool integral = dt == dc::kUInt8 || dt == dc::kInt8 || dt == dc::kInt16 || dt == dc::kInt32 ||
                        dt == dc::kInt64 || dt == dc::kBool;
  return integral ? dc::kInt64 : dt;
}

}  // namespace

Tensor* scan(bool product, const Tensor& self, int64_t dim, const int32_t* dtype) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  const int32_t odt = scan_out_dtype(self, dtype);
  Owned out(new_cuda(odt, self.sizes(), device));  // ATen: contiguous
  if (self.numel() > 0) {
    const Shape one{1};
    const bool zd = self.dim() == 0;
    const Shape& sst = zd ? one : self.strides();
    const Shape& ost = zd ? one : out->strides();
    const LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &ost});
    cu::launch_scan(self.dtype(), odt, self.data_ptr(), out->data_ptr(), ls, product, cu::stream_of(device));
  }
  return out.release();
}

void cum_extreme(bool max, const Tensor& self, int64_t dim, Tensor** ret0, Tensor** ret1) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  dim = wrap_dim(dim, self.dim());
  Owned v(new_cuda(self.dtype(), self.sizes(), device));
  Owned ix(new_cuda(dc::kInt64, self.sizes(), device));
  if (self.numel() > 0) {
    const Shape one{1};
    const bool zd = self.dim() == 0;
    const Shape& sst = zd ? one : self.strides();
    const Shape& vst = zd ? one : v->strides();
    const Shape& ist = zd ? one : ix->strides();
    const LineSpec ls = make_lines(zd ? Shape{} : self.sizes(), dim, {&sst, &vst, &ist});
    cu::launch_cum_extreme(self.dtype(), self.data_ptr(), v->data_ptr(), static_cast<int64_t*>(ix->data_ptr()), ls,
                           max, cu::stream_of(device));
  }
  *ret0 = v.release();
  *ret1 = ix.release();
}

}  // namespace cuda
}  // namespace aoti_host
