// searchsorted and bucketize, histc, repeat_interleave, and the data-sized nonzero and masked_select on CUDA.
#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

#include "shims/cpu/strided.h"
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"
#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace cuda {

using ops::is_floating;
using ops::is_integral;

namespace {

// ATen's searchsorted: out has self's sizes (contiguous), int32 or int64.
Tensor* searchsorted(const Tensor& seq, const Tensor& self, bool out_int32, bool right, const char* side,
                     const Tensor* sorter) {
  const int device = seq.device_index();
  require_cuda(seq, "sorted_sequence", device);
  require_cuda(self, "self", device);
  for (const Tensor* t : {&seq, &self})
    if (!is_integral(t->dtype()) && !is_floating(t->dtype()))
      throw Error(std::string(t == &seq ? "sorted_sequence" : "self") + " has dtype " +
                  aoti_host::dtype_name(t->dtype()) + "; expected a floating or integer dtype");
  right = aoti_host::ops::searchsorted_right(side, right);
  if (seq.dim() == 0) throw Error("sorted_sequence is 0-dimensional; it needs at least one dimension");
  const Shape lead(seq.sizes().begin(), seq.sizes().end() - 1);
  if (seq.dim() > 1 && (self.dim() != seq.dim() || Shape(self.sizes().begin(), self.sizes().end() - 1) != lead))
    throw Error("sorted_sequence has sizes " + list_str(seq.sizes()) +
                ": a multi-dimensional sequence needs input values with the same leading dimensions (got " +
                list_str(self.sizes()) + ")");
  if (sorter != nullptr) {
    require_cuda(*sorter, "sorter", device);
    require_dtype(*sorter, dc::kInt64, "sorter");
    if (sorter->sizes() != seq.sizes())
      throw Error("sorter " + list_str(sorter->sizes()) + " must have sorted_sequence's sizes " +
                  list_str(seq.sizes()));
  }
  if (self.dim() > cu::kMaxDims || seq.dim() > cu::kMaxDims)
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  Owned out(new_cuda(out_int32 ? dc::kInt32 : dc::kInt64, self.sizes(), device));
  cu::SearchSpec s{};
  s.nd = static_cast<int>(self.dim());
  for (int d = 0; d < s.nd; ++d) {
    s.sizes[d] = self.sizes()[static_cast<size_t>(d)];
    s.self_st[d] = self.strides()[static_cast<size_t>(d)];
  }
  s.numel = self.numel();
  s.inner = self.dim() == 0 ? 1 : self.sizes().back();
  s.one_d = seq.dim() == 1;
  s.outer_nd = static_cast<int>(seq.dim() - 1);
  for (int d = 0; d < s.outer_nd; ++d) {
    s.outer_sizes[d] = lead[static_cast<size_t>(d)];
    s.seq_outer_st[d] = seq.strides()[static_cast<size_t>(d)];
    s.sorter_outer_st[d] = sorter != nullptr ? sorter->strides()[static_cast<size_t>(d)] : 0;
  }
  s.n = seq.sizes().back();
  s.seq_step = seq.strides().back();
  s.sorter_step = sorter != nullptr ? sorter->strides().back() : 0;
  s.seq_dtype = seq.dtype(), s.self_dtype = self.dtype();
  s.ints = is_integral(seq.dtype()) && is_integral(self.dtype());
  s.right = right, s.out_int32 = out_int32;
  if (s.numel > 0) {
    const cudaStream_t stream = cu::stream_of(device);
    if (s.n == 0) {
      cu::zero(*out);
    } else {
      BadIndexFlag bad(device, stream);
      cu::launch_searchsorted(seq.data_ptr(), self.data_ptr(),
                              sorter != nullptr ? static_cast<const int64_t*>(sorter->data_ptr()) : nullptr,
                              out->data_ptr(), s, bad.ptr(), stream);
      bad.check("a sorter index is out of range for a sequence of length " + std::to_string(s.n));
    }
  }
  return out.release();
}

void refuse_capture(cudaStream_t stream, const char* op) {
  if (capturing(stream))
    throw Error(std::string(op) +
                ": the output's size depends on the data, which needs a synchronisation that a CUDA graph "
                "capture forbids; run this model without CUDA graphs");
}

SelectSpec select_spec(const Shape& sizes, const Shape& pred_st, const Shape& src_st, size_t pred_size,
                           uint64_t pred_bits) {
  if (sizes.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  SelectSpec s{};
  s.nd = static_cast<int>(sizes.size());
  s.numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    s.sizes[d] = sizes[d], s.pred_st[d] = pred_st[d], s.src_st[d] = src_st[d];
    s.numel *= sizes[d];
  }
  s.pred_size = static_cast<int>(pred_size);
  s.pred_bits = pred_bits;
  return s;
}

// The two passes of an ordered selection: per-block counts, their exclusive prefix sums (on the host,
// after one synchronisation) as the blocks' output offsets on the device; returns the total.
int64_t select_offsets(const void* pred, const SelectSpec& s, int device, Owned& offsets) {
  const cudaStream_t stream = cu::stream_of(device);
  const int64_t blocks = (s.numel + cu::kSelectBlock - 1) / cu::kSelectBlock;
  offsets.reset(new_cuda(dc::kInt64, {blocks}, device));
  if (blocks == 0) return 0;
  cu::launch_select_count(pred, s, static_cast<int64_t*>(offsets->data_ptr()), stream);
  std::vector<int64_t> host(static_cast<size_t>(blocks));
  AOTI_CUDA_CHECK(cudaMemcpyAsync(host.data(), offsets->data_ptr(), host.size() * sizeof(int64_t),
                                  cudaMemcpyDeviceToHost, stream));
  AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
  int64_t total = 0;
  for (int64_t& c : host) {
    const int64_t n = c;
    c = total;
    total += n;
  }
  AOTI_CUDA_CHECK(cudaMemcpyAsync(offsets->data_ptr(), host.data(), host.size() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` is read until the copy is done
  return total;
}

// Bits of an element that make it non-zero (the sign bit alone does not, for floating dtypes).
uint64_t nonzero_bits(int32_t dt) {
  switch (dt) {
    case dc::kBool:
    case dc::kUInt8:
    case dc::kInt8:
    case dc::kInt16:
    case dc::kInt32:
    case dc::kInt64: return ~uint64_t{0};
    case dc::kFloat16:
    case dc::kBFloat16: return 0x7fffu;
    case dc::kFloat32: return 0x7fffffffu;
    case dc::kFloat64: return 0x7fffffffffffffffull;
    default:
      throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) +
                  "; nonzero takes bool, integer and floating dtypes");
  }
}

}  // namespace

Tensor* searchsorted_tensor(const Tensor& seq, const Tensor& self, bool out_int32, bool right, const char* side,
                            const Tensor* sorter) {
  return searchsorted(seq, self, out_int32, right, side, sorter);
}

Tensor* searchsorted_scalar(const Tensor& seq, double self, bool out_int32, bool right, const char* side,
                            const Tensor* sorter) {
  const int device = seq.device_index();
  require_cuda(seq, "sorted_sequence", device);
  if (seq.dim() != 1)
    throw Error("sorted_sequence has sizes " + list_str(seq.sizes()) +
                "; a scalar value needs a 1-d sorted sequence");
  // ATen wraps the scalar as a number and compares in the promoted dtype: the sequence's for a floating
  // sequence, float32 for an integer one; the rounded value, held as float64, compares the same way.
  const double v = aoti_host::ops::round_to(is_floating(seq.dtype()) ? seq.dtype() : dc::kFloat32, self);
  Owned value(new_cuda(dc::kFloat64, {}, device));
  cu::launch_fill_f64(static_cast<double*>(value->data_ptr()), v, cu::stream_of(device));
  return searchsorted(seq, *value, out_int32, right, side, sorter);
}

Tensor* bucketize(const Tensor& self, const Tensor& b, bool out_int32, bool right) {
  if (b.dim() != 1)
    throw Error("boundaries has " + std::to_string(b.dim()) + " dimensions; bucketize needs a 1-d tensor");
  return searchsorted(b, self, out_int32, right, nullptr, nullptr);
}

// ATen's CUDA nonzero: int64 [count, ndim] stored column-major (strides [1, count]), rows in row-major
// order of the hits.
Tensor* nonzero(const Tensor& self) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  const cudaStream_t stream = cu::stream_of(device);
  refuse_capture(stream, "nonzero");
  const uint64_t bits = nonzero_bits(self.dtype());
  const cu::SelectSpec s = select_spec(self.sizes(), self.strides(), self.strides(), self.itemsize(), bits);
  Owned offsets;
  const int64_t count = self.numel() == 0 ? 0 : select_offsets(self.data_ptr(), s, device, offsets);
  const int64_t nd = self.dim();
  Owned out(new_cuda(dc::kInt64, {count, nd}, {1, std::max<int64_t>(count, 1)}, device));
  if (count > 0 && nd > 0)
    cu::launch_select_write(self.data_ptr(), s, static_cast<const int64_t*>(offsets->data_ptr()),
                            static_cast<int64_t*>(out->data_ptr()), count, nullptr, nullptr, 0, stream);
  return out.release();
}

// self and mask broadcast together; the selected elements of self in row-major order, 1-d contiguous.
Tensor* masked_select(const Tensor& self, const Tensor& mask) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  require_cuda(mask, "mask", device);
  if (mask.dtype() != dc::kBool)
    throw Error(std::string("mask has dtype ") + aoti_host::dtype_name(mask.dtype()) +
                "; masked_select expects a bool mask");
  const cudaStream_t stream = cu::stream_of(device);
  refuse_capture(stream, "masked_select");
  Shape shape = self.sizes();
  if (!aoti_host::ops::broadcast_into(shape, mask.sizes()))
    throw Error("self with sizes " + list_str(self.sizes()) + " and mask with sizes " + list_str(mask.sizes()) +
                " do not broadcast");
  const Shape sst = aoti_host::cpu::detail::broadcast_strides(self, shape, "self");
  const Shape mst = aoti_host::cpu::detail::broadcast_strides(mask, shape, "mask");
  const size_t item = self.itemsize();
  if (item != 1 && item != 2 && item != 4 && item != 8 && item != 16)
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(self.dtype()) + ", which masked_select on cuda does not take");
  const cu::SelectSpec s = select_spec(shape, mst, sst, 1, ~uint64_t{0});
  Owned offsets;
  const int64_t count = s.numel == 0 ? 0 : select_offsets(mask.data_ptr(), s, device, offsets);
  Owned out(new_cuda(self.dtype(), {count}, device));
  if (count > 0)
    cu::launch_select_write(mask.data_ptr(), s, static_cast<const int64_t*>(offsets->data_ptr()), nullptr, 0,
                            self.data_ptr(), out->data_ptr(), item, stream);
  return out.release();
}

// ATen's CUDA histc: bins of equal width over [min, max] (the data's own range when min == max),
// counted in self's dtype, contiguous [bins].
Tensor* histc(const Tensor& self, int64_t bins, double min, double max) {
  const int device = self.device_index();
  require_cuda(self, "self", device);
  const int32_t dt = self.dtype();
  if (!is_floating(dt))
    throw Error(std::string("self has dtype ") + aoti_host::dtype_name(dt) + "; histc takes a floating dtype");
  if (bins <= 0) throw Error("bins is " + std::to_string(bins) + "; it must be positive");
  if (min > max) throw Error("max (" + std::to_string(max) + ") is less than min (" + std::to_string(min) + ")");
  const cudaStream_t stream = cu::stream_of(device);
  const cu::SelectSpec s = select_spec(self.sizes(), self.strides(), self.strides(), self.itemsize(), 0);
  double lo = aoti_host::ops::round_to(dt, min), hi = aoti_host::ops::round_to(dt, max);
  if (min == max && s.numel > 0) {  // the data's range: one synchronisation, as in ATen
    if (capturing(stream))
      throw Error("histc with min == max takes its range from the data, which needs a synchronisation that a "
                  "CUDA graph capture forbids; give histc an explicit range");
    Owned mm(new_cuda(dc::kFloat64, {2}, device));
    Owned nan(new_cuda(dc::kInt32, {1}, device));
    const double init[2] = {HUGE_VAL, -HUGE_VAL};
    AOTI_CUDA_CHECK(cudaMemcpyAsync(mm->data_ptr(), init, sizeof(init), cudaMemcpyHostToDevice, stream));
    AOTI_CUDA_CHECK(cudaMemsetAsync(nan->data_ptr(), 0, sizeof(int), stream));
    cu::launch_minmax(dt, self.data_ptr(), s, static_cast<double*>(mm->data_ptr()), static_cast<int*>(nan->data_ptr()),
                      stream);
    double got[2] = {0, 0};
    int has_nan = 0;
    AOTI_CUDA_CHECK(cudaMemcpyAsync(got, mm->data_ptr(), sizeof(got), cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&has_nan, nan->data_ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (has_nan != 0) throw Error("range of [nan, nan] is not finite");
    lo = got[0], hi = got[1];
  }
  if (lo == hi) {
    lo = aoti_host::ops::round_to(dt, lo - 1);
    hi = aoti_host::ops::round_to(dt, hi + 1);
  }
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error("range of [" + std::to_string(lo) + ", " + std::to_string(hi) + "] is not finite");
  Owned out(new_cuda(dt, {bins}, device));
  Owned counts(new_cuda(dc::kInt64, {bins}, device));
  cu::zero(*counts);
  cu::launch_histc(dt, self.data_ptr(), s, lo, hi, bins, static_cast<unsigned long long*>(counts->data_ptr()),
                   out->data_ptr(), stream);
  return out.release();
}

// ATen's repeat_interleave(repeats): [sum(repeats)] of repeats' dtype, index i repeated repeats[i]
// times. Without output_size the total is read back (a synchronisation, refused during graph capture).
Tensor* repeat_interleave(const Tensor& repeats, const int64_t* output_size) {
  const int device = repeats.device_index();
  require_cuda(repeats, "repeats", device);
  const int32_t dt = repeats.dtype();
  if (dt != dc::kInt32 && dt != dc::kInt64)
    throw Error(std::string("repeats has dtype ") + aoti_host::dtype_name(dt) + "; expected int32 or int64");
  if (repeats.dim() != 1)
    throw Error("repeats has " + std::to_string(repeats.dim()) + " dimensions; expected a 1-d tensor");
  if (output_size != nullptr && *output_size < 0)
    throw Error("output_size is " + std::to_string(*output_size) + "; it must not be negative");
  const cudaStream_t stream = cu::stream_of(device);
  const int64_t n = repeats.sizes()[0];
  Owned cum(new_cuda(dc::kInt64, {n}, device));
  if (n > 0) {
    const Shape step{repeats.strides()[0]}, cstep{1};
    const LineSpec ls = make_lines({n}, 0, {&step, &cstep, &cstep});
    cu::launch_scan(dt, dc::kInt64, repeats.data_ptr(), cum->data_ptr(), ls, false, stream);
  }
  int64_t total = 0;
  if (output_size != nullptr) {
    total = *output_size;
  } else if (n > 0) {
    if (capturing(stream))
      throw Error("repeat_interleave without output_size: the output's size depends on the data, which needs a "
                  "synchronisation that a CUDA graph capture forbids");
    AOTI_CUDA_CHECK(cudaMemcpyAsync(&total, static_cast<const int64_t*>(cum->data_ptr()) + (n - 1), sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, stream));
    AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (total < 0) throw Error("repeats has a negative value");
  }
  Owned out(new_cuda(dt, {total}, device));
  if (n > 0) {
    BadIndexFlag bad(device, stream);
    cu::launch_repeat_interleave(dt, repeats.data_ptr(), repeats.strides()[0],
                                 static_cast<const int64_t*>(cum->data_ptr()), n, out->data_ptr(), total, bad.ptr(),
                                 stream);
    bad.check("repeats has a negative value, or its sum is not output_size (" + std::to_string(total) + ")");
  }
  return out.release();
}

}  // namespace cuda
}  // namespace aoti_host
