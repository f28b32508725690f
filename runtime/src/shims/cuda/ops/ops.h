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
void sdpa_cudnn(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor* attn_bias,
                bool compute_log_sumexp, double dropout_p, bool is_causal, bool return_debug_mask, const double* scale,
                Tensor** out, Tensor** logsumexp, Tensor** cum_seq_q, Tensor** cum_seq_k, int64_t* max_q,
                int64_t* max_k, Tensor** philox_seed, Tensor** philox_offset, Tensor** debug_mask);
void sdpa_flash(const Tensor& query, const Tensor& key, const Tensor& value, double dropout_p, bool is_causal,
                bool return_debug_mask, const double* scale, Tensor** out, Tensor** logsumexp, Tensor** cum_seq_q,
                Tensor** cum_seq_k, int64_t* max_q, int64_t* max_k, Tensor** rng_state, Tensor** unused,
                Tensor** debug_mask);

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

// sort.cpp, search.cpp (nonzero, masked_select and histc without a range synchronise: the output's size or range
// depends on the data; they refuse a graph capture), scatter.cpp, pool.cpp, quant.cpp and spectral.cpp (the
// transforms through cuFFT, loaded on first use): the entries both devices implement.
#include "shims/op_entries.inc"

}  // namespace cuda
}  // namespace aoti_host
