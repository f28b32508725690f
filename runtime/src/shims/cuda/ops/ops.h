// The CUDA kernel entries the generated aoti_torch_cuda_* wrappers call (each shims.toml row's `impl`), one file
// of this folder per family. Each follows the ATen op of the same name on CUDA: inputs on one CUDA device (else
// an error naming the argument), outputs with the sizes, strides and dtypes ATen's CUDA kernels give them (plugins
// reinterpret returned tensors with the layout recorded at compile time), kernels on the thread's current stream.
// Functions returning Tensor* return new owning tensors; with several outputs, each is an out-parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/tensor.h"

namespace aoti_host {
namespace cuda {

// matmul.cpp: cuBLAS (no TF32).
void mm_out(Tensor& out, const Tensor& self, const Tensor& mat2);
void bmm_out(Tensor& out, const Tensor& self, const Tensor& mat2);
void addmm_out(Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha);

// conv.cpp
Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, std::vector<int64_t> stride,
                    std::vector<int64_t> padding, std::vector<int64_t> dilation, bool transposed,
                    std::vector<int64_t> output_padding, int64_t groups);

// attention.cpp: outputs as ATen's CUDA kernels give them (inference: no dropout).
void sdpa_efficient(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor* attn_bias,
                    bool compute_log_sumexp, double dropout_p, bool is_causal, const double* scale, Tensor** out,
                    Tensor** logsumexp, Tensor** philox_seed, Tensor** philox_offset);
void sdpa_flash(const Tensor& query, const Tensor& key, const Tensor& value, double dropout_p, bool is_causal,
                bool return_debug_mask, const double* scale, Tensor** out, Tensor** logsumexp, Tensor** cum_seq_q,
                Tensor** cum_seq_k, int64_t* max_q, int64_t* max_k, Tensor** rng_state, Tensor** unused,
                Tensor** debug_mask);

// sort.cpp
void sort(const Tensor& self, int64_t dim, bool descending, Tensor** values, Tensor** indices);
void sort_stable(const Tensor& self, const int32_t* stable, int64_t dim, bool descending, Tensor** values,
                 Tensor** indices);
void topk(const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted, Tensor** values, Tensor** indices);

// scan.cpp: cumprod (product) or cumsum; cummax (max) or cummin. dtype: the optional output dtype (null: ATen's
// default, int64 for integral/bool input).
Tensor* scan(bool product, const Tensor& self, int64_t dim, const int32_t* dtype);
void cum_extreme(bool max, const Tensor& self, int64_t dim, Tensor** values, Tensor** indices);

// embedding.cpp: _embedding_bag and _embedding_bag_forward_only (scale_grad_by_freq and sparse only matter to
// the gradient).
void embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets, bool scale_grad_by_freq,
                   int64_t mode, bool sparse, const Tensor* per_sample_weights, bool include_last_offset,
                   int64_t padding_idx, Tensor** output, Tensor** offset2bag, Tensor** bag_size,
                   Tensor** max_indices);

// scatter.cpp
void scatter_src(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
void scatter_value(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, double value);
void scatter_reduce(Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                    const std::string& reduce, bool include_self);
// indices: one optional tensor per leading dimension of self (null: that dimension is taken whole).
Tensor* index_put(const Tensor& self, const std::vector<const Tensor*>& indices, const Tensor& values,
                  bool accumulate);
Tensor* index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                     const std::string& reduce, bool include_self);

// search.cpp. side: optional ("left" or "right"); sorter: optional. nonzero, masked_select and histc without a
// range synchronise (the output's size or range depends on the data) and refuse a graph capture.
Tensor* searchsorted_tensor(const Tensor& sorted_sequence, const Tensor& self, bool out_int32, bool right,
                            const char* side, const Tensor* sorter);
Tensor* searchsorted_scalar(const Tensor& sorted_sequence, double self, bool out_int32, bool right, const char* side,
                            const Tensor* sorter);
Tensor* bucketize(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right);
Tensor* histc(const Tensor& self, int64_t bins, double min, double max);
Tensor* repeat_interleave(const Tensor& repeats, const int64_t* output_size);
Tensor* nonzero(const Tensor& self);
Tensor* masked_select(const Tensor& self, const Tensor& mask);

// pool.cpp: nd = 2 or 3.
void max_pool2d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                             const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode,
                             Tensor** out, Tensor** indices);
void adaptive_max_pool(int nd, const Tensor& self, const std::vector<int64_t>& output_size, Tensor** out,
                       Tensor** indices);
Tensor* adaptive_avg_pool(int nd, const Tensor& self, const std::vector<int64_t>& output_size);
Tensor* avg_pool(int nd, const Tensor& self, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& padding, bool ceil_mode, bool count_include_pad,
                 const int64_t* divisor_override);

// quant.cpp
void int_mm(Tensor& out, const Tensor& self, const Tensor& mat2);
Tensor* weight_int8pack_mm(const Tensor& self, const Tensor& mat2, const Tensor& scales);

// spectral.cpp: the transforms through cuFFT (loaded on first use); the views share self's storage.
Tensor* fft_r2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization, bool onesided);
Tensor* fft_c2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization, bool forward);
Tensor* complex_abs_or_angle(bool angle, const Tensor& self);
Tensor* permute(const Tensor& self, const std::vector<int64_t>& dims);
Tensor* view_as_real(const Tensor& self);
Tensor* view_as_complex(const Tensor& self);

}  // namespace cuda
}  // namespace aoti_host
