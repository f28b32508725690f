// The entries of the dense CPU kernels (shims/cpu/: matrix products and convolution) in the shape their
// generated wrappers call: ATen's argument lists, turned into the kernels' own (an optional self, ConvParams).
#include "shims/cpu_kernels.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

void addmm_out(Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  cpu::addmm(out, &self, mat1, mat2, beta, alpha);
}

// ATen names mm's first operand "self"; messages call it mat1 like addmm does.
void mm_out(Tensor& out, const Tensor& self, const Tensor& mat2) { cpu::addmm(out, nullptr, self, mat2, 0.0, 1.0); }

void baddbmm_out(Tensor& out, const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
                 double alpha) {
  cpu::baddbmm(out, &self, batch1, batch2, beta, alpha);
}

Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool transposed,
                    const std::vector<int64_t>& output_padding, int64_t groups) {
  cpu::ConvParams p;
  p.stride = stride;
  p.padding = padding;
  p.dilation = dilation;
  p.output_padding = output_padding;
  p.transposed = transposed;
  p.groups = groups;
  return cpu::convolution(input, weight, bias, p);
}

}  // namespace ops
}  // namespace aoti_host
