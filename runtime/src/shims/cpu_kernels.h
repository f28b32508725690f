// The CPU kernels behind the aoti_torch_cpu_* fallbacks and aoti_torch_copy_, one file per concern under
// cpu/ (copy, matmul, conv, sdpa; convert.h and strided.h are their shared helpers). Every kernel takes
// any strides and every compute-supported dtype. float32 and float64 take fast paths (the packed
// AVX-512 GEMM of packed_gemm.h with cached packed weights, im2col or an implicit GEMM, the BLAS, a
// vectorised softmax); the other dtypes run plain loops in a wider accumulator, written for
// correctness. Every function throws aoti_host::Error with a message that names the bad argument; the
// shim wrapper prefixes the shim's name.
#pragma once

#include <cstdint>
#include <vector>

#include "aoti_host/tensor.h"

namespace aoti_host {
namespace cpu {

// dst <- src elementwise (shapes must match); same dtype copies bytes (any dtype), otherwise converts
// among the compute-supported dtypes.
void copy(Tensor& dst, const Tensor& src);

// out <- beta * self + alpha * (mat1 @ mat2); self broadcasts to out. beta == 0 ignores self.
void addmm(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha);
void bmm(Tensor& out, const Tensor& self, const Tensor& mat2);
// out = beta * self (broadcast; ignored when beta is 0) + alpha * batch1 @ batch2, as aten::baddbmm.out.
void baddbmm(Tensor& out, const Tensor* self, const Tensor& batch1, const Tensor& batch2, double beta, double alpha);

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

// aten::convolution; returns a new owning tensor in the memory format ATen's CPU backend would pick.
Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p);

// aten::_scaled_dot_product_flash_attention_for_cpu: query [B, Hq, L, E], key and value [B, Hk, S, E]
// (Hq a multiple of Hk). Returns new tensors in exactly ATen's layouts, which plugins reinterpret:
// output as at::empty_like(query) (query's strides when dense, else dense in query's dimension order),
// logsumexp [B, Hq, L] (float32; float64 for double inputs) stored as [B, L, Hq].
void sdpa_flash(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, bool is_causal,
                const Tensor* attn_mask, const double* scale, Tensor** out, Tensor** logsumexp);

// ATen's suggest_memory_format() predicates (c10::is_channels_last_strides_2d/3d).
bool is_channels_last_strides_2d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
bool is_channels_last_strides_3d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

}  // namespace cpu
}  // namespace aoti_host
