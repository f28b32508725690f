// ATen's scaled-dot-product attention on CUDA (efficient, flash and cuDNN): cuDNN's fused attention (cudnn_sdpa.cpp) where
// it is built in, loads and takes the problem; else the runtime's own fused kernel (attention_kernels.cu), or
// cuBLAS (attention_gemm, matmul.cpp) for problems big enough to pay for its launches.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shims/cpu/strided.h"
#include "shims/cuda/cudnn_sdpa.h"
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

namespace aoti_host {
namespace cuda {

namespace {

struct AttentionArgs {
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* bias;
  double dropout_p;
  bool causal;
  const double* scale;
};

// Checks q/k/v/bias ([B, H, M, D], [B, H, N, D], [B, H, N, Dv], bias broadcastable to [B, H, M, N])
// and fills the spec's sizes, input strides, scale and bias.
cu::AttentionSpec attention_spec(const AttentionArgs& a, int device) {
  const Tensor &q = *a.q, &k = *a.k, &v = *a.v;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw Error("query " + list_str(q.sizes()) + ", key " + list_str(k.sizes()) + " and value " +
                list_str(v.sizes()) + " must be 4-d [batch, heads, sequence, head size]");
  require_cuda(q, "query", device);
  require_cuda(k, "key", device);
  require_cuda(v, "value", device);
  require_dtype(k, q.dtype(), "key");
  require_dtype(v, q.dtype(), "value");
  if (a.dropout_p != 0.0)
    throw Error("dropout_p " + std::to_string(a.dropout_p) +
                " is not supported (inference only: export the model in eval mode, or with dropout_p=0)");
  cu::AttentionSpec s{};
  s.b = q.sizes()[0], s.h = q.sizes()[1], s.m = q.sizes()[2], s.d = q.sizes()[3];
  s.n = k.sizes()[2], s.dv = v.sizes()[3];
  if (k.sizes()[0] != s.b || v.sizes()[0] != s.b || k.sizes()[1] != s.h || v.sizes()[1] != s.h ||
      k.sizes()[3] != s.d || v.sizes()[2] != s.n)
    throw Error("query " + list_str(q.sizes()) + ", key " + list_str(k.sizes()) + " and value " +
                list_str(v.sizes()) + " do not fit together");
  for (int d = 0; d < 4; ++d) s.q_st[d] = q.strides()[d], s.k_st[d] = k.strides()[d], s.v_st[d] = v.strides()[d];
  s.scale = static_cast<float>(a.scale != nullptr ? *a.scale : 1.0 / std::sqrt(static_cast<double>(s.d)));
  s.causal = a.causal;
  s.bias_dtype = -1;
  if (a.bias != nullptr) {
    const Tensor& bias = *a.bias;
    require_cuda(bias, "attn_bias", device);
    if (bias.dtype() != q.dtype() && bias.dtype() != dc::kBool)
      throw Error("attn_bias has dtype " + std::string(aoti_host::dtype_name(bias.dtype())) +
                  "; expected the query's dtype " + aoti_host::dtype_name(q.dtype()) + " or bool");
    const Shape full{s.b, s.h, s.m, s.n};
    if (bias.dim() > 4) throw Error("attn_bias " + list_str(bias.sizes()) + " has more than 4 dimensions");
    const int64_t lead = 4 - bias.dim();
    for (int d = 0; d < 4; ++d) {
      if (d < lead) {
        s.bias_st[d] = 0;
        continue;
      }
      const int64_t sz = bias.sizes()[static_cast<size_t>(d - lead)];
      if (sz != full[static_cast<size_t>(d)] && sz != 1)
        throw Error("attn_bias " + list_str(bias.sizes()) + " does not broadcast to " + list_str(full));
      s.bias_st[d] = sz == 1 ? 0 : bias.strides()[static_cast<size_t>(d - lead)];
    }
    s.bias_dtype = bias.dtype();
  }
  return s;
}

// Runs attention through cuDNN's fused attention (cu::cudnn_attention: AOTI_HOST_CUDNN_SDPA, the problems it
// takes), else through cuBLAS (cu::attention_gemm) when the problem is big enough to pay for its launches or the
// head size is past the fused kernel's limit, else through the fused kernel. AOTI_HOST_CUDA_ATTENTION=kernel or
// =gemm forces one of the runtime's own paths (no cuDNN; gemm still falls back to the kernel for layouts cuBLAS
// can't take), for benchmarks and tests; it is read on every call.
void run_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v, const void* bias,
                   const cu::AttentionSpec& s, int device) {
  if (s.m == 0 || s.b == 0 || s.h == 0) return;
  const cudaStream_t stream = cu::stream_of(device);
  const char* force = std::getenv("AOTI_HOST_CUDA_ATTENTION");
  const std::string mode = force != nullptr ? force : "";
  if (!mode.empty() && mode != "kernel" && mode != "gemm")
    throw Error("AOTI_HOST_CUDA_ATTENTION is '" + mode + "'; expected kernel, gemm or unset");
  if (mode.empty() && cu::cudnn_attention(dtype, out, lse, q, k, v, bias, s, device, stream)) return;
  // The fused kernel's cost grows with every score; the cuBLAS path's three launches (two products around the
  // softmax) and its scratch pay off past a quarter million scores.
  const bool big = s.b * s.h * s.m * s.n >= (int64_t{1} << 18) || s.d > cu::kMaxHeadDim || s.dv > cu::kMaxHeadDim;
  const bool gemm = mode == "gemm" || (mode.empty() && big);
  if (gemm && cu::attention_gemm(dtype, out, lse, q, k, v, bias, s, device, stream)) return;
  cu::launch_attention(dtype, out, lse, q, k, v, bias, s, stream);
}

// A zero-filled tensor of 8-byte elements for the philox seed/offset outputs (no dropout, so no random
// state to report).
Tensor* zeros64(int32_t dtype, const Shape& sizes, bool on_cuda, int device) {
  if (!on_cuda) {
    Owned t(Tensor::empty_strided(dtype, sizes, Tensor::contiguous_strides(sizes), aoti_host::device_code::kCPU, 0));
    std::memset(t->data_ptr(), 0, t->storage_nbytes());
    return t.release();
  }
  Owned t(new_cuda(dtype, sizes, device));
  cu::zero(*t);
  return t.release();
}

// at::empty_strided with the strides torch's meta function for cuDNN attention (alloc_with_matching_layout)
// predicts for `sizes`: at::empty_like(query) when the sizes are the query's, else the query's dimensions
// ordered by decreasing stride (ties: the earlier dimension outer) and filled densely innermost first.
Shape matching_layout_strides(const Tensor& q, const Shape& sizes) {
  if (q.sizes() == sizes) return aoti_host::cpu::detail::empty_like_strides(q);
  int order[4] = {0, 1, 2, 3};
  std::stable_sort(order, order + 4, [&](int x, int y) { return q.strides()[x] > q.strides()[y]; });
  Shape strides(4, 0);
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    strides[static_cast<size_t>(order[i])] = stride;
    stride *= sizes[static_cast<size_t>(order[i])];
  }
  return strides;
}

}  // namespace

// ATen's _scaled_dot_product_efficient_attention on CUDA: output [B, H, M, Dv] laid out as a
// contiguous [B, M, H, Dv] transposed; logsumexp float32 [B, H, ceil(M / 32) * 32] (the rows past M
// are padding) or [B, H, 0]; philox seed and offset 0-d int64, on the CPU (on the GPU while a graph is
// captured). Causal masking is top-left aligned (key j visible to query i when j <= i).
void sdpa_efficient(const Tensor& q, const Tensor& key, const Tensor& value, const Tensor* attn_bias,
                    bool compute_log_sumexp, double dropout_p, bool is_causal, const double* scale, Tensor** out_t,
                    Tensor** lse_t, Tensor** seed_t, Tensor** offset_t) {
  const int device = q.device_index();
  AttentionArgs a{&q, &key, &value, attn_bias, dropout_p, is_causal, scale};
  cu::AttentionSpec s = attention_spec(a, device);
  s.causal_offset = 0;
  Owned out(new_cuda(q.dtype(), {s.b, s.h, s.m, s.dv}, {s.m * s.h * s.dv, s.dv, s.h * s.dv, 1}, device));
  const int64_t lse_len = compute_log_sumexp ? (s.m + 31) / 32 * 32 : 0;
  Owned lse(new_cuda(dc::kFloat32, {s.b, s.h, lse_len}, device));
  for (int d = 0; d < 4; ++d) s.o_st[d] = out->strides()[static_cast<size_t>(d)];
  for (int d = 0; d < 3; ++d) s.lse_st[d] = lse->strides()[static_cast<size_t>(d)];
  const cudaStream_t stream = cu::stream_of(device);
  run_attention(q.dtype(), out->data_ptr(), lse_len > 0 ? static_cast<float*>(lse->data_ptr()) : nullptr,
                q.data_ptr(), a.k->data_ptr(), a.v->data_ptr(), a.bias != nullptr ? a.bias->data_ptr() : nullptr, s,
                device);
  const bool on_gpu = capturing(stream);
  Owned seed(zeros64(dc::kInt64, {}, on_gpu, device)), offset(zeros64(dc::kInt64, {}, on_gpu, device));
  *out_t = out.release();
  *lse_t = lse.release();
  *seed_t = seed.release();
  *offset_t = offset.release();
}

// ATen's _scaled_dot_product_flash_attention on CUDA: output laid out like at::empty_like of the query
// transposed to [B, M, H, D], transposed back (head sizes must be multiples of 8, as in ATen);
// logsumexp float32 [B, H, M]; cum_seq_q/k undefined (null handles); max_q = M, max_k = N; the rng
// state uint64 [2] and an unused uint64 0-d tensor on the GPU (zeros: no dropout); debug mask [0]
// (only return_debug_mask=False). Causal masking is bottom-right aligned, as in the flash kernel (the same as
// top-left when M == N).
void sdpa_flash(const Tensor& q, const Tensor& key, const Tensor& value, double dropout_p, bool is_causal,
                bool return_debug_mask, const double* scale, Tensor** out_t, Tensor** lse_t, Tensor** cum_seq_q,
                Tensor** cum_seq_k, int64_t* max_q, int64_t* max_k, Tensor** rng_state, Tensor** unused,
                Tensor** debug_mask) {
  if (return_debug_mask) throw Error("return_debug_mask=True is not supported (inference only)");
  const int device = q.device_index();
  AttentionArgs a{&q, &key, &value, nullptr, dropout_p, is_causal, scale};
  cu::AttentionSpec s = attention_spec(a, device);
  if (s.dv != s.d)
    throw Error("flash attention needs equal query and value head sizes, got " + std::to_string(s.d) + " and " +
                std::to_string(s.dv));
  s.causal_offset = s.n - s.m;
  if (s.d % 8 != 0)
    throw Error("head size " + std::to_string(s.d) +
                " is not a multiple of 8 (ATen's flash kernel refuses it too; scaled_dot_product_attention "
                "pads the head size before choosing it)");
  // at::empty_like(query.transpose(1, 2)), transposed back
  Owned qt(q.alias({s.b, s.m, s.h, s.d}, {q.strides()[0], q.strides()[2], q.strides()[1], q.strides()[3]},
                   q.storage_offset()));
  const Shape t_strides = aoti_host::cpu::detail::empty_like_strides(*qt);
  Owned out(new_cuda(q.dtype(), {s.b, s.h, s.m, s.d}, {t_strides[0], t_strides[2], t_strides[1], t_strides[3]},
                     device));
  Owned lse(new_cuda(dc::kFloat32, {s.b, s.h, s.m}, device));
  for (int d = 0; d < 4; ++d) s.o_st[d] = out->strides()[static_cast<size_t>(d)];
  for (int d = 0; d < 3; ++d) s.lse_st[d] = lse->strides()[static_cast<size_t>(d)];
  run_attention(q.dtype(), out->data_ptr(), static_cast<float*>(lse->data_ptr()), q.data_ptr(), a.k->data_ptr(),
                a.v->data_ptr(), nullptr, s, device);
  Owned seed(zeros64(dc::kUInt64, {2}, true, device)), offset(zeros64(dc::kUInt64, {}, true, device));
  Owned debug(new_cuda(q.dtype(), {0}, device));
  *out_t = out.release();
  *lse_t = lse.release();
  *cum_seq_q = nullptr;
  *cum_seq_k = nullptr;
  *max_q = s.m;
  *max_k = s.n;
  *rng_state = seed.release();
  *unused = offset.release();
  *debug_mask = debug.release();
}

// ATen's _scaled_dot_product_cudnn_attention on CUDA (what scaled_dot_product_attention exports to in half
// precision where cuDNN is ATen's preferred backend): output [B, H, M, Dv] laid out as torch's meta function
// predicts (matching_layout_strides); logsumexp float32 [B, H, M, 1], filled where compute_log_sumexp (else
// allocated only); cum_seq_q/k and the debug mask undefined (null handles); max_q = M, max_k = N; philox seed and
// offset 0-d int64 zeros on the GPU (no dropout). Causal masking is top-left aligned, as cuDNN's causal mask is
// (key j visible to query i when j <= i). The default scale is 1/sqrt(D).
void sdpa_cudnn(const Tensor& q, const Tensor& key, const Tensor& value, const Tensor* attn_bias,
                bool compute_log_sumexp, double dropout_p, bool is_causal, bool return_debug_mask, const double* scale,
                Tensor** out_t, Tensor** lse_t, Tensor** cum_seq_q, Tensor** cum_seq_k, int64_t* max_q,
                int64_t* max_k, Tensor** seed_t, Tensor** offset_t, Tensor** debug_mask) {
  if (return_debug_mask) throw Error("return_debug_mask=True is not supported (inference only)");
  const int device = q.device_index();
  AttentionArgs a{&q, &key, &value, attn_bias, dropout_p, is_causal, scale};
  cu::AttentionSpec s = attention_spec(a, device);
  s.causal_offset = 0;
  const Shape out_sizes{s.b, s.h, s.m, s.dv};
  Owned out(new_cuda(q.dtype(), out_sizes, matching_layout_strides(q, out_sizes), device));
  Owned lse(new_cuda(dc::kFloat32, {s.b, s.h, s.m, 1}, device));
  for (int d = 0; d < 4; ++d) s.o_st[d] = out->strides()[static_cast<size_t>(d)];
  for (int d = 0; d < 3; ++d) s.lse_st[d] = lse->strides()[static_cast<size_t>(d)];
  run_attention(q.dtype(), out->data_ptr(), compute_log_sumexp ? static_cast<float*>(lse->data_ptr()) : nullptr,
                q.data_ptr(), a.k->data_ptr(), a.v->data_ptr(), a.bias != nullptr ? a.bias->data_ptr() : nullptr, s,
                device);
  Owned seed(zeros64(dc::kInt64, {}, true, device)), offset(zeros64(dc::kInt64, {}, true, device));
  *out_t = out.release();
  *lse_t = lse.release();
  *cum_seq_q = nullptr;
  *cum_seq_k = nullptr;
  *max_q = s.m;
  *max_k = s.n;
  *seed_t = seed.release();
  *offset_t = offset.release();
  *debug_mask = nullptr;
}

}  // namespace cuda
}  // namespace aoti_host
