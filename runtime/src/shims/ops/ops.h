// The CPU kernel entries the generated aoti_torch_cpu_* wrappers call (each shims.toml row's `impl`). Each follows
// the ATen op of the same name: same results (within floating-point accumulation order), same output
// dtypes and the output strides ATen's CPU kernel gives, since plugins reinterpret returned tensors with
// the strides recorded at compile time. Functions returning Tensor* return new owning tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/tensor.h"
#include "shims/ops/pool_window.h"

namespace aoti_host {
namespace ops {

// dense.cpp: the entries of shims/cpu_kernels.h's matrix products and convolution (bmm and the CPU flash
// attention are called directly: their lists are ATen's already).
void addmm_out(Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha);
void mm_out(Tensor& out, const Tensor& self, const Tensor& mat2);
void baddbmm_out(Tensor& out, const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
                 double alpha);
Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool transposed,
                    const std::vector<int64_t>& output_padding, int64_t groups);

// sort.cpp, search.cpp, scatter.cpp, pool.cpp, quant.cpp and spectral.cpp: the entries both devices implement.
#include "shims/op_entries.inc"

// scan.cpp. dtype: the optional output dtype (null: ATen's default, int64 for integral/bool input).
Tensor* cumsum(const Tensor& self, int64_t dim, const int32_t* dtype);
Tensor* cumprod(const Tensor& self, int64_t dim, const int32_t* dtype);
void cummax(const Tensor& self, int64_t dim, Tensor** values, Tensor** indices);
void cummin(const Tensor& self, int64_t dim, Tensor** values, Tensor** indices);

// search.cpp
// searchsorted's `right` after its optional `side` ("left" or "right"); the CUDA entries share it.
bool searchsorted_right(const char* side, bool right);
// self: the values (null: the scalar); side: optional ("left" or "right"); sorter: optional.
Tensor* searchsorted(const Tensor& sorted_sequence, const Tensor* self, double scalar, bool out_int32, bool right,
                     const char* side, const Tensor* sorter);

// embedding.cpp: aten::_embedding_bag (forward_only false) and _embedding_bag_forward_only; returns
// output, offset2bag, bag_size, max_indices. scale_grad_by_freq and sparse only matter to the gradient.
void embedding_bag(bool forward_only, const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                   bool scale_grad_by_freq, int64_t mode, bool sparse, const Tensor* per_sample_weights,
                   bool include_last_offset, int64_t padding_idx, Tensor** output, Tensor** offset2bag,
                   Tensor** bag_size, Tensor** max_indices);

// scatter.cpp: index_put's indices (one optional tensor per leading dimension of self; null: taken whole) padded with nulls to
// nd, and their broadcast shape; first and last: the first and last indexed dimension (-1 when none is).
std::vector<int64_t> broadcast_indices(std::vector<const Tensor*>& indices, int64_t nd, int64_t& first, int64_t& last);

// pool.cpp: the pooling ops' argument checks and ATen's output layout (device-agnostic: the CUDA shims
// plan with them too; dtypes are the caller's to check), then the CPU kernels.
struct PoolPlan {
  PoolWindows w;
  int64_t planes;                      // product of the leading (N, C) dimensions
  std::vector<int64_t> out_sizes, out_strides;
};
PoolPlan plan_max_pool2d(const Tensor& self, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                         const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode);
// nd = 2 or 3.
PoolPlan plan_adaptive_pool(int nd, const Tensor& self, const std::vector<int64_t>& output_size, bool max);
PoolPlan plan_avg_pool(int nd, const Tensor& self, const std::vector<int64_t>& kernel,
                       const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, bool ceil_mode,
                       bool count_include_pad, const int64_t* divisor_override);

// rnn.cpp: aten::mkldnn_rnn_layer (one direction of one LSTM layer); returns output, hy, cy, workspace.
void mkldnn_rnn_layer(const Tensor& input, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh, const Tensor& hx, const Tensor& cx, bool reverse,
                      const std::vector<int64_t>& batch_sizes, int64_t mode, int64_t hidden_size, int64_t num_layers,
                      bool has_biases, bool bidirectional, bool batch_first, bool train, Tensor** output,
                      Tensor** hy, Tensor** cy, Tensor** workspace);

// spectral.cpp: device-agnostic parts the CUDA transforms share: dim wrapped and checked (distinct, non-empty dims) in the
// given order; the normalization factor; and the output strides of ATen's cuFFT path, which transforms at most
// kCufftMaxDims dims per pass (r2c: the last dim first) and so can lay outputs out differently from the MKL
// path above; as torch's meta functions record them at compile time (which, unlike the eager kernel, do not
// model its copy of a real input not aligned as complex).
constexpr size_t kCufftMaxDims = 3;
std::vector<int64_t> fft_wrap_dims(const Tensor& self, const std::vector<int64_t>& dim);
double fft_norm_scale(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims, int64_t normalization);
std::vector<int64_t> cufft_r2c_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                       const std::vector<int64_t>& dims, bool onesided);
std::vector<int64_t> cufft_c2c_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                       const std::vector<int64_t>& dims);

// select.cpp: aten::kthvalue (k counts from 1), median (all elements, 0-d result), _cdist_forward.
void kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim, Tensor** values, Tensor** indices);
Tensor* median(const Tensor& self);
// compute_mode: optional, 0 to 2 (ATen's choice of algorithm; the distances are the same).
Tensor* cdist(const Tensor& x1, const Tensor& x2, double p, const int64_t* compute_mode);

// quant.cpp: the ops' device-agnostic argument checks (the CUDA entries use them).
void check_weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales);
void check_int_mm(const Tensor& out, const Tensor& self, const Tensor& mat2);

}  // namespace ops
}  // namespace aoti_host
