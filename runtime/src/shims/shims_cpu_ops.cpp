// aoti_torch_cpu_* fallbacks for sorting, scans, lookups, embedding bags, scatter/index updates,
// pooling, the LSTM layer, int8 matrix products, FFTs and complex views: C ABI wrappers over shims/ops (ops.h).
// Prototypes are torch 2.13's (generated/c_shim_cpu.h; mkldnn_rnn_layer from c/shim_cpu.h).
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"
#include "shims/ops/ops.h"
#include "shims/shim_util.h"

using aoti_host::Error;
using aoti_host::from_handle;
using aoti_host::Tensor;
using aoti_host::to_handle;

namespace {

using aoti_host::shim::guarded;
using aoti_host::shim::int_list;
using aoti_host::shim::tensor_arg;
namespace ops = aoti_host::ops;

using aoti_host::shim::need;
using aoti_host::shim::optional_arg;

// Two returned tensors: both handed over, or neither.
void ret2(Tensor* a, Tensor* b, AtenTensorHandle* r0, AtenTensorHandle* r1) {
  *r0 = to_handle(a);
  *r1 = to_handle(b);
}

AOTITorchError adaptive_max_shim(const char* name, int nd, AtenTensorHandle self, const int64_t* output_size,
                                 int64_t output_size_len_, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded(name, [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::adaptive_max_pool(nd, tensor_arg(self, "self"), int_list(output_size, output_size_len_, "output_size"), &v,
                           &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTITorchError adaptive_avg_shim(const char* name, int nd, AtenTensorHandle self, const int64_t* output_size,
                                 int64_t output_size_len_, AtenTensorHandle* ret0) {
  return guarded(name, [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(
        ops::adaptive_avg_pool(nd, tensor_arg(self, "self"), int_list(output_size, output_size_len_, "output_size")));
  });
}

std::string cstr(const char* s, const char* name) {
  if (s == nullptr) throw Error(std::string(name) + " is a null string");
  return s;
}

void embedding_bag(AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
                   int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset,
                   int64_t padding_idx, bool forward_only, AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                   AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  need(ret0, "ret0");
  need(ret1, "ret1");
  need(ret2, "ret2");
  need(ret3, "ret3");
  (void)scale_grad_by_freq;  // gradient-only options: no effect on the forward result
  (void)sparse;
  Tensor* out[4] = {nullptr, nullptr, nullptr, nullptr};
  ops::embedding_bag(tensor_arg(weight, "weight"), tensor_arg(indices, "indices"), tensor_arg(offsets, "offsets"), mode,
                     optional_arg(per_sample_weights), include_last_offset != 0, padding_idx, forward_only, out);
  *ret0 = to_handle(out[0]);
  *ret1 = to_handle(out[1]);
  *ret2 = to_handle(out[2]);
  *ret3 = to_handle(out[3]);
}

}  // namespace

extern "C" {

AOTI_HOST_API AOTITorchError aoti_torch_cpu_sort(AtenTensorHandle self, int64_t dim, int32_t descending,
                                                 AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_sort", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::sort(tensor_arg(self, "self"), false, dim, descending != 0, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_sort_stable(AtenTensorHandle self, int32_t* stable, int64_t dim,
                                                        int32_t descending, AtenTensorHandle* ret0,
                                                        AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_sort_stable", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::sort(tensor_arg(self, "self"), stable != nullptr && *stable != 0, dim, descending != 0, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_topk(AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
                                                 int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_topk", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::topk(tensor_arg(self, "self"), k, dim, largest != 0, sorted != 0, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_cumsum(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                   AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_cumsum", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::cumsum(tensor_arg(self, "self"), dim, dtype));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_cumprod(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                    AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_cumprod", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::cumprod(tensor_arg(self, "self"), dim, dtype));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_cummax(AtenTensorHandle self, int64_t dim, AtenTensorHandle* ret0,
                                                   AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_cummax", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::cummax(tensor_arg(self, "self"), dim, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_cummin(AtenTensorHandle self, int64_t dim, AtenTensorHandle* ret0,
                                                   AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_cummin", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::cummin(tensor_arg(self, "self"), dim, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_searchsorted_Tensor(AtenTensorHandle sorted_sequence, AtenTensorHandle self,
                                                                int32_t out_int32, int32_t right, const char** side,
                                                                AtenTensorHandle* sorter, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_searchsorted_Tensor", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::searchsorted(tensor_arg(sorted_sequence, "sorted_sequence"), &tensor_arg(self, "self"), 0.0,
                                        out_int32 != 0, right != 0, side ? *side : nullptr, optional_arg(sorter)));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_searchsorted_Scalar(AtenTensorHandle sorted_sequence, double self,
                                                                int32_t out_int32, int32_t right, const char** side,
                                                                AtenTensorHandle* sorter, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_searchsorted_Scalar", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::searchsorted(tensor_arg(sorted_sequence, "sorted_sequence"), nullptr, self, out_int32 != 0,
                                        right != 0, side ? *side : nullptr, optional_arg(sorter)));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_bucketize_Tensor(AtenTensorHandle self, AtenTensorHandle boundaries,
                                                             int32_t out_int32, int32_t right, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_bucketize_Tensor", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(
        ops::bucketize(tensor_arg(self, "self"), tensor_arg(boundaries, "boundaries"), out_int32 != 0, right != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_histc(AtenTensorHandle self, int64_t bins, double min, double max,
                                                  AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_histc", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::histc(tensor_arg(self, "self"), bins, min, max));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_repeat_interleave_Tensor(AtenTensorHandle repeats, int64_t* output_size,
                                                                     AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_repeat_interleave_Tensor", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::repeat_interleave(tensor_arg(repeats, "repeats"), output_size));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_nonzero(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_nonzero", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::nonzero(tensor_arg(self, "self")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_masked_select(AtenTensorHandle self, AtenTensorHandle mask,
                                                          AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_masked_select", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::masked_select(tensor_arg(self, "self"), tensor_arg(mask, "mask")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__embedding_bag(
    AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
    int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset, int64_t padding_idx,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  return guarded("aoti_torch_cpu__embedding_bag", [&] {
    embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset,
                  padding_idx, false, ret0, ret1, ret2, ret3);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__embedding_bag_forward_only(
    AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
    int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset, int64_t padding_idx,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  return guarded("aoti_torch_cpu__embedding_bag_forward_only", [&] {
    embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset,
                  padding_idx, true, ret0, ret1, ret2, ret3);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_scatter_src_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                            AtenTensorHandle index, AtenTensorHandle src) {
  return guarded("aoti_torch_cpu_scatter_src_out", [&] {
    ops::scatter_src(tensor_arg(out, "out"), tensor_arg(self, "self"), dim, tensor_arg(index, "index"),
                     tensor_arg(src, "src"));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_scatter_value_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                              AtenTensorHandle index, double value) {
  return guarded("aoti_torch_cpu_scatter_value_out", [&] {
    ops::scatter_value(tensor_arg(out, "out"), tensor_arg(self, "self"), dim, tensor_arg(index, "index"), value);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_scatter_reduce_two_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                   int64_t dim, AtenTensorHandle index,
                                                                   AtenTensorHandle src, const char* reduce,
                                                                   int32_t include_self) {
  return guarded("aoti_torch_cpu_scatter_reduce_two_out", [&] {
    ops::scatter_reduce(tensor_arg(out, "out"), tensor_arg(self, "self"), dim, tensor_arg(index, "index"),
                        tensor_arg(src, "src"), cstr(reduce, "reduce"), include_self != 0);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_index_put(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                      int64_t indices_len_, AtenTensorHandle values, int32_t accumulate,
                                                      AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_index_put", [&] {
    need(ret0, "ret0");
    if (indices_len_ < 0) throw Error("indices has negative length " + std::to_string(indices_len_));
    if (indices_len_ > 0 && indices == nullptr) throw Error("indices is null but its length is " + std::to_string(indices_len_));
    // A list of optional tensors: each entry a pointer to a handle, null (or a null handle) for None.
    std::vector<const Tensor*> idx;
    for (int64_t i = 0; i < indices_len_; ++i) idx.push_back(optional_arg(indices[i]));
    *ret0 = to_handle(ops::index_put(tensor_arg(self, "self"), idx, tensor_arg(values, "values"), accumulate != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_index_reduce(AtenTensorHandle self, int64_t dim, AtenTensorHandle index,
                                                         AtenTensorHandle source, const char* reduce,
                                                         int32_t include_self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_index_reduce", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::index_reduce(tensor_arg(self, "self"), dim, tensor_arg(index, "index"),
                                        tensor_arg(source, "source"), cstr(reduce, "reduce"), include_self != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_max_pool2d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation, int64_t dilation_len_,
    int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_max_pool2d_with_indices", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::max_pool2d_with_indices(tensor_arg(self, "self"), int_list(kernel_size, kernel_size_len_, "kernel_size"),
                                 int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"),
                                 int_list(dilation, dilation_len_, "dilation"), ceil_mode != 0, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_adaptive_max_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                                int64_t output_size_len_, AtenTensorHandle* ret0,
                                                                AtenTensorHandle* ret1) {
  return adaptive_max_shim("aoti_torch_cpu_adaptive_max_pool2d", 2, self, output_size, output_size_len_, ret0, ret1);
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_adaptive_max_pool3d(AtenTensorHandle self, const int64_t* output_size,
                                                                int64_t output_size_len_, AtenTensorHandle* ret0,
                                                                AtenTensorHandle* ret1) {
  return adaptive_max_shim("aoti_torch_cpu_adaptive_max_pool3d", 3, self, output_size, output_size_len_, ret0, ret1);
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__adaptive_avg_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                                 int64_t output_size_len_, AtenTensorHandle* ret0) {
  return adaptive_avg_shim("aoti_torch_cpu__adaptive_avg_pool2d", 2, self, output_size, output_size_len_, ret0);
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__adaptive_avg_pool3d(AtenTensorHandle self, const int64_t* output_size,
                                                                 int64_t output_size_len_, AtenTensorHandle* ret0) {
  return adaptive_avg_shim("aoti_torch_cpu__adaptive_avg_pool3d", 3, self, output_size, output_size_len_, ret0);
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_avg_pool2d(AtenTensorHandle self, const int64_t* kernel_size,
                                                       int64_t kernel_size_len_, const int64_t* stride,
                                                       int64_t stride_len_, const int64_t* padding,
                                                       int64_t padding_len_, int32_t ceil_mode,
                                                       int32_t count_include_pad, int64_t* divisor_override,
                                                       AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_avg_pool2d", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::avg_pool(2, tensor_arg(self, "self"), int_list(kernel_size, kernel_size_len_, "kernel_size"),
                                    int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"),
                                    ceil_mode != 0, count_include_pad != 0, divisor_override));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_avg_pool3d(AtenTensorHandle self, const int64_t* kernel_size,
                                                       int64_t kernel_size_len_, const int64_t* stride,
                                                       int64_t stride_len_, const int64_t* padding,
                                                       int64_t padding_len_, int32_t ceil_mode,
                                                       int32_t count_include_pad, int64_t* divisor_override,
                                                       AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_avg_pool3d", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::avg_pool(3, tensor_arg(self, "self"), int_list(kernel_size, kernel_size_len_, "kernel_size"),
                                    int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"),
                                    ceil_mode != 0, count_include_pad != 0, divisor_override));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_mkldnn_rnn_layer(
    AtenTensorHandle input, AtenTensorHandle weight0, AtenTensorHandle weight1, AtenTensorHandle weight2,
    AtenTensorHandle weight3, AtenTensorHandle hx_, AtenTensorHandle cx_, int32_t reverse, const int64_t* batch_sizes,
    int64_t batch_sizes_len_, int64_t mode, int64_t hidden_size, int64_t num_layers, int32_t has_biases,
    int32_t bidirectional, int32_t batch_first, int32_t train, AtenTensorHandle* ret0, AtenTensorHandle* ret1,
    AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  return guarded("aoti_torch_cpu_mkldnn_rnn_layer", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    need(ret2, "ret2");
    need(ret3, "ret3");
    Tensor* out[4] = {nullptr, nullptr, nullptr, nullptr};
    ops::mkldnn_rnn_layer(tensor_arg(input, "input"), tensor_arg(weight0, "weight0"), tensor_arg(weight1, "weight1"),
                          tensor_arg(weight2, "weight2"), tensor_arg(weight3, "weight3"), tensor_arg(hx_, "hx_"),
                          tensor_arg(cx_, "cx_"), reverse != 0, int_list(batch_sizes, batch_sizes_len_, "batch_sizes"),
                          mode, hidden_size, num_layers, has_biases != 0, bidirectional != 0, batch_first != 0,
                          train != 0, out);
    *ret0 = to_handle(out[0]);
    *ret1 = to_handle(out[1]);
    *ret2 = to_handle(out[2]);
    *ret3 = to_handle(out[3]);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__weight_int8pack_mm(AtenTensorHandle self, AtenTensorHandle mat2,
                                                                AtenTensorHandle scales, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu__weight_int8pack_mm", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(
        ops::weight_int8pack_mm(tensor_arg(self, "self"), tensor_arg(mat2, "mat2"), tensor_arg(scales, "scales")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__int_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                        AtenTensorHandle mat2) {
  return guarded("aoti_torch_cpu__int_mm_out", [&] {
    ops::int_mm(tensor_arg(out, "out"), tensor_arg(self, "self"), tensor_arg(mat2, "mat2"));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__fft_r2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                     int64_t normalization, int32_t onesided, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu__fft_r2c", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::fft_r2c(tensor_arg(self, "self"), int_list(dim, dim_len_, "dim"), normalization, onesided != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__fft_c2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                     int64_t normalization, int32_t forward, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu__fft_c2c", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::fft_c2c(tensor_arg(self, "self"), int_list(dim, dim_len_, "dim"), normalization, forward != 0));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_abs(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_abs", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::complex_abs_or_angle(tensor_arg(self, "self"), false));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_angle(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_angle", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::complex_abs_or_angle(tensor_arg(self, "self"), true));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_permute(AtenTensorHandle self, const int64_t* dims, int64_t dims_len_,
                                                    AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_permute", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::permute(tensor_arg(self, "self"), int_list(dims, dims_len_, "dims")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_view_as_real(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_view_as_real", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::view_as_real(tensor_arg(self, "self")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_view_as_complex(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_view_as_complex", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::view_as_complex(tensor_arg(self, "self")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_kthvalue(AtenTensorHandle self, int64_t k, int64_t dim, int32_t keepdim,
                                                     AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu_kthvalue", [&] {
    need(ret0, "ret0");
    need(ret1, "ret1");
    Tensor *v = nullptr, *i = nullptr;
    ops::kthvalue(tensor_arg(self, "self"), k, dim, keepdim != 0, &v, &i);
    ret2(v, i, ret0, ret1);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_median(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_median", [&] {
    need(ret0, "ret0");
    *ret0 = to_handle(ops::median(tensor_arg(self, "self")));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__cdist_forward(AtenTensorHandle x1, AtenTensorHandle x2, double p,
                                                           int64_t* compute_mode, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu__cdist_forward", [&] {
    need(ret0, "ret0");
    // compute_mode picks ATen's matrix-product shortcut for p = 2 or not: the same distances, computed
    // directly here either way.
    if (compute_mode != nullptr && (*compute_mode < 0 || *compute_mode > 2))
      throw Error("compute_mode " + std::to_string(*compute_mode) + " is not 0, 1 or 2");
    *ret0 = to_handle(ops::cdist(tensor_arg(x1, "x1"), tensor_arg(x2, "x2"), p));
  });
}

}  // extern "C"
