// aoti_torch_cpu_* fallbacks: the ATen ops a plugin calls instead of generating code for them.
// Reference implementations (any strides, accumulation in double for float32/float64, float for
// float16/bfloat16, int64 for integers); correctness over speed.
#include "shims/shim_util.h"
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"
#include "shims/cpu_kernels.h"

using aoti_host::Error;
using aoti_host::from_handle;
using aoti_host::Tensor;
using aoti_host::to_handle;

namespace {

using aoti_host::shim::guarded;
using aoti_host::shim::int_list;
using aoti_host::shim::tensor_arg;

}  // namespace

extern "C" {

AOTI_HOST_API AOTITorchError aoti_torch_cpu_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                      AtenTensorHandle mat1, AtenTensorHandle mat2, double beta,
                                                      double alpha) {
  return guarded("aoti_torch_cpu_addmm_out", [&] {
    aoti_host::cpu::addmm(tensor_arg(out, "out"), &tensor_arg(self, "self"), tensor_arg(mat1, "mat1"),
                          tensor_arg(mat2, "mat2"), beta, alpha);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_mm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  return guarded("aoti_torch_cpu_mm_out", [&] {
    // ATen names mm's first operand "self"; messages call it mat1 like addmm does.
    aoti_host::cpu::addmm(tensor_arg(out, "out"), nullptr, tensor_arg(self, "self"), tensor_arg(mat2, "mat2"), 0.0,
                          1.0);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_bmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  return guarded("aoti_torch_cpu_bmm_out", [&] {
    aoti_host::cpu::bmm(tensor_arg(out, "out"), tensor_arg(self, "self"), tensor_arg(mat2, "mat2"));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_baddbmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                        AtenTensorHandle batch1, AtenTensorHandle batch2, double beta,
                                                        double alpha) {
  return guarded("aoti_torch_cpu_baddbmm_out", [&] {
    aoti_host::cpu::baddbmm(tensor_arg(out, "out"), &tensor_arg(self, "self"), tensor_arg(batch1, "batch1"),
                            tensor_arg(batch2, "batch2"), beta, alpha);
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu_convolution(AtenTensorHandle input, AtenTensorHandle weight,
                                                        AtenTensorHandle* bias, const int64_t* stride,
                                                        int64_t stride_len_, const int64_t* padding,
                                                        int64_t padding_len_, const int64_t* dilation,
                                                        int64_t dilation_len_, int32_t transposed,
                                                        const int64_t* output_padding, int64_t output_padding_len_,
                                                        int64_t groups, AtenTensorHandle* ret0) {
  return guarded("aoti_torch_cpu_convolution", [&] {
    if (ret0 == nullptr) throw Error("output pointer 'ret0' is null");
    aoti_host::cpu::ConvParams p;
    p.stride = int_list(stride, stride_len_, "stride");
    p.padding = int_list(padding, padding_len_, "padding");
    p.dilation = int_list(dilation, dilation_len_, "dilation");
    p.output_padding = int_list(output_padding, output_padding_len_, "output_padding");
    p.transposed = transposed != 0;
    p.groups = groups;
    // Optional tensor: a null pointer or a pointer to a null handle both mean "no bias".
    const Tensor* b = (bias != nullptr && *bias != nullptr) ? from_handle(*bias) : nullptr;
    *ret0 = to_handle(aoti_host::cpu::convolution(tensor_arg(input, "input"), tensor_arg(weight, "weight"), b, p));
  });
}

AOTI_HOST_API AOTITorchError aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, double dropout_p, int32_t is_causal,
    AtenTensorHandle* attn_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu", [&] {
    if (ret0 == nullptr || ret1 == nullptr) throw Error("output pointer 'ret0' or 'ret1' is null");
    // Optional tensor: a null pointer or a pointer to a null handle both mean "no mask".
    const Tensor* mask = (attn_mask != nullptr && *attn_mask != nullptr) ? from_handle(*attn_mask) : nullptr;
    Tensor* out = nullptr;
    Tensor* lse = nullptr;
    aoti_host::cpu::sdpa_flash(tensor_arg(query, "query"), tensor_arg(key, "key"), tensor_arg(value, "value"), dropout_p,
                               is_causal != 0, mask, scale, &out, &lse);
    *ret0 = to_handle(out);
    *ret1 = to_handle(lse);
  });
}

}  // extern "C"
