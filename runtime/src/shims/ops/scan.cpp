// aten::cumsum, cumprod, cummax, cummin. Outputs are contiguous (ATen allocates them with at::empty).
// cumsum/cumprod convert the input to the output dtype first, then accumulate in ATen's CPU
// accumulation type: double for float32/float64, float for float16/bfloat16, int64 for integers.
#include <cmath>
#include <memory>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

Tensor* cum_op(const Tensor& self, int64_t dim, const int32_t* dtype, bool product) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  dim = wrap_dim(dim, self.dim(), "dim");
  int32_t odt = self.dtype();
  if (dtype != nullptr) {
    odt = *dtype;
  } else if (is_integral(odt) || odt == kBool) {
    odt = kInt64;
  }
  check_compute_dtype(odt, "dtype");
  std::unique_ptr<Tensor> out(new_contiguous(odt, self.sizes()));
  if (self.numel() == 0) return out.release();
  const Shape sizes = self.dim() == 0 ? Shape{1} : self.sizes();
  const Shape sst = self.dim() == 0 ? Shape{1} : self.strides();
  const Shape ost = self.dim() == 0 ? Shape{1} : out->strides();
  const int64_t n = sizes[dim];
  const int32_t idt = self.dtype();
  const void* src = self.data_ptr();
  void* dst = out->data_ptr();
  const bool half_acc = odt == kFloat16 || odt == kBFloat16;
  for_each_line(sizes, dim, {&sst, &ost}, [&](const std::vector<int64_t>& b) {
    if (is_floating(odt)) {
      double acc_d = product ? 1.0 : 0.0;
      float acc_f = product ? 1.0f : 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const double x = round_to(odt, load_f(src, idt, b[0] + j * sst[dim]));
        if (half_acc) {
          acc_f = product ? acc_f * static_cast<float>(x) : acc_f + static_cast<float>(x);
          store_f(dst, odt, b[1] + j * ost[dim], acc_f);
        } else {
          acc_d = product ? acc_d * x : acc_d + x;
          store_f(dst, odt, b[1] + j * ost[dim], acc_d);
        }
      }
    } else {
      uint64_t acc = product ? 1 : 0;  // unsigned: wraps like ATen's int64 accumulation, without UB
      for (int64_t j = 0; j < n; ++j) {
        const uint64_t x = static_cast<uint64_t>(load_i(src, idt, b[0] + j * sst[dim]));
        acc = product ? acc * x : acc + x;
        store_i(dst, odt, b[1] + j * ost[dim], static_cast<int64_t>(acc));
      }
    }
  });
  return out.release();
}

// ATen's cummax_cummin_helper: the running extreme with >= (max) or <= (min), so ties move the index
// to the later element; a NaN is taken and then kept by every later NaN.
template <typename K>
void cum_extreme_lines(const Tensor& self, int64_t dim, bool is_max, Tensor& values, Tensor& indices,
                       const Shape& sizes, const Shape& sst, const Shape& vst, const Shape& ist) {
  const int64_t n = sizes[dim];
  const int32_t dt = self.dtype();
  const size_t item = self.itemsize();
  const char* src = static_cast<const char*>(self.data_ptr());
  char* vdst = static_cast<char*>(values.data_ptr());
  void* idst = indices.data_ptr();
  for_each_line(sizes, dim, {&sst, &vst, &ist}, [&](const std::vector<int64_t>& b) {
    K best = load_key<K>(src, dt, b[0]);
    int64_t best_j = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = b[0] + j * sst[dim];
      const K cur = load_key<K>(src, dt, at);
      const bool cur_nan = cur != cur;  // NOLINT(misc-redundant-expression)
      const bool best_nan = best != best;  // NOLINT(misc-redundant-expression)
      if (cur_nan || (!best_nan && (is_max ? cur >= best : cur <= best))) {
        best = cur;
        best_j = j;
      }
      std::memcpy(vdst + (b[1] + j * vst[dim]) * static_cast<int64_t>(item),
                  src + (b[0] + best_j * sst[dim]) * static_cast<int64_t>(item), item);
      store_i(idst, kInt64, b[2] + j * ist[dim], best_j);
    }
  });
}

void cum_extreme(const Tensor& self, int64_t dim, bool is_max, Tensor** values, Tensor** indices) {
  check_cpu(self, "self");
  check_compute_dtype(self.dtype(), "self");
  dim = wrap_dim(dim, self.dim(), "dim");
  std::unique_ptr<Tensor> v(new_contiguous(self.dtype(), self.sizes()));
  std::unique_ptr<Tensor> ix(new_contiguous(kInt64, self.sizes()));
  if (self.numel() > 0) {
    const bool zd = self.dim() == 0;
    const Shape sizes = zd ? Shape{1} : self.sizes();
    const Shape sst = zd ? Shape{1} : self.strides(), vst = zd ? Shape{1} : v->strides(),
                ist = zd ? Shape{1} : ix->strides();
    if (is_floating(self.dtype())) {
      cum_extreme_lines<double>(self, dim, is_max, *v, *ix, sizes, sst, vst, ist);
    } else {
      cum_extreme_lines<int64_t>(self, dim, is_max, *v, *ix, sizes, sst, vst, ist);
    }
  }
  *values = v.release();
  *indices = ix.release();
}

}  // namespace

Tensor* cumsum(const Tensor& self, int64_t dim, const int32_t* dtype) { return cum_op(self, dim, dtype, false); }
Tensor* cumprod(const Tensor& self, int64_t dim, const int32_t* dtype) { return cum_op(self, dim, dtype, true); }
void cummax(const Tensor& self, int64_t dim, Tensor** values, Tensor** indices) {
  cum_extreme(self, dim, true, values, indices);
}
void cummin(const Tensor& self, int64_t dim, Tensor** values, Tensor** indices) {
  cum_extreme(self, dim, false, values, indices);
}

}  // namespace ops
}  // namespace aoti_host
