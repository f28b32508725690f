// aten::convolution on CUDA, plain and transposed, in the memory format ATen's cuDNN path gives: through cuDNN
// (cudnn_conv.cpp), or a direct kernel (kernels.cu) where cuDNN is missing or refuses a shape.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shims/cpu_kernels.h"
#include "shims/cuda/cudnn_conv.h"
#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

namespace aoti_host {
namespace cuda {
namespace {

// ATen's cudnn_conv_suggest_memory_format: channels-last when the input or the weight is, as
// suggest_memory_format decides it (c10's is_channels_last_strides_2d/3d, shared with the CPU kernels).
// Ambiguous layouts, such as a 1x1 kernel's contiguous weight [O, I, 1, 1], count as contiguous there.
bool is_channels_last(const Tensor& t) {
  return aoti_host::cpu::is_channels_last_strides_2d(t.sizes(), t.strides()) ||
         aoti_host::cpu::is_channels_last_strides_3d(t.sizes(), t.strides());
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& s) {
  std::vector<int64_t> out(s.size());
  int64_t st = 1;
  out[1] = st, st *= std::max<int64_t>(s[1], 1);
  for (size_t d = s.size(); d-- > 2;) out[d] = st, st *= std::max<int64_t>(s[d], 1);
  out[0] = st;
  return out;
}

}  // namespace

Tensor* convolution(const Tensor& in, const Tensor& w, const Tensor* b, std::vector<int64_t> st,
                    std::vector<int64_t> pad, std::vector<int64_t> dil, bool tr, std::vector<int64_t> out_pad,
                    int64_t groups) {
  const int64_t nd = in.dim();
  if (nd < 3 || nd > 5 || w.dim() != nd)
    throw Error("convolution: input " + list_str(in.sizes()) + " and weight " + list_str(w.sizes()) +
                " must both be 3-d, 4-d or 5-d");
  const int spatial = static_cast<int>(nd - 2);
  auto expand = [&](std::vector<int64_t>& v, const char* name, int64_t dflt) {
    if (v.size() == 1) v.assign(static_cast<size_t>(spatial), v[0]);
    if (v.empty()) v.assign(static_cast<size_t>(spatial), dflt);
    if (v.size() != static_cast<size_t>(spatial))
      throw Error(std::string("convolution: ") + name + " has " + std::to_string(v.size()) + " entries for " +
                  std::to_string(spatial) + " spatial dims");
  };
  expand(st, "stride", 1), expand(pad, "padding", 0), expand(dil, "dilation", 1),
      expand(out_pad, "output_padding", 0);
  const int device = in.device_index();
  require_cuda(in, "input", "convolution", device);
  require_cuda(w, "weight", "convolution", device);
  if (b != nullptr) require_cuda(*b, "bias", "convolution", device);
  if (w.dtype() != in.dtype() || (b != nullptr && b->dtype() != in.dtype()))
    throw Error("convolution: input, weight and bias must share a dtype");
  // weight: [c_out, c_in / groups, k...], transposed [c_in, c_out / groups, k...]
  const int64_t w_in = tr ? w.sizes()[0] : w.sizes()[1] * groups;
  if (groups < 1 || in.sizes()[1] % groups != 0 || w.sizes()[0] % groups != 0 || w_in != in.sizes()[1])
    throw Error("convolution: input channels " + std::to_string(in.sizes()[1]) + ", weight " + list_str(w.sizes()) +
                " and groups " + std::to_string(groups) + " do not fit" + (tr ? " (transposed)" : ""));
  ConvSpec s{};
  s.n = in.sizes()[0], s.c_in = in.sizes()[1], s.groups = groups, s.transposed = tr;
  s.c_out = tr ? w.sizes()[1] * groups : w.sizes()[0];
  if (b != nullptr && b->numel() != s.c_out)
    throw Error("convolution: bias has " + std::to_string(b->numel()) + " elements for " +
                std::to_string(s.c_out) + " output channels");
  std::vector<int64_t> out_sizes{s.n, s.c_out};
  const int off = 3 - spatial;  // spatial dims are right-aligned in the 3-d spec
  for (int d = 0; d < 3; ++d) {
    s.in_size[d] = s.out_size[d] = s.kernel[d] = s.stride[d] = s.dilation[d] = 1;
    s.padding[d] = 0;
  }
  for (int d = 0; d < spatial; ++d) {
    const int e = d + off;
    s.in_size[e] = in.sizes()[2 + d];
    s.kernel[e] = w.sizes()[2 + d];
    s.stride[e] = st[d], s.padding[e] = pad[d], s.dilation[e] = dil[d];
    if (st[d] <= 0 || dil[d] <= 0 || pad[d] < 0 || out_pad[d] < 0)
      throw Error("convolution: stride " + list_str(st) + ", dilation " + list_str(dil) + ", padding " +
                  list_str(pad) + " or output_padding " + list_str(out_pad) + " is out of range");
    if (tr && out_pad[d] >= st[d] && out_pad[d] >= dil[d])
      throw Error("convolution: output_padding " + list_str(out_pad) +
                  " must be smaller than either stride or dilation");
    const int64_t o = tr ? (s.in_size[e] - 1) * st[d] - 2 * pad[d] + dil[d] * (s.kernel[e] - 1) + out_pad[d] + 1
                         : (s.in_size[e] + 2 * pad[d] - dil[d] * (s.kernel[e] - 1) - 1) / st[d] + 1;
    if (o <= 0)
      throw Error("convolution: input " + list_str(in.sizes()) + " is too small for weight " + list_str(w.sizes()));
    s.out_size[e] = o;
    out_sizes.push_back(o);
  }
  const bool cl = is_channels_last(in) || is_channels_last(w);
  std::vector<int64_t> out_strides = cl ? channels_last_strides(out_sizes) : Tensor::contiguous_strides(out_sizes);
  std::unique_ptr<Tensor> out(
      Tensor::empty_strided(in.dtype(), out_sizes, out_strides, aoti_host::device_code::kCUDA, device));
  auto fill = [&](int64_t* dst, const Tensor& t) {
    dst[0] = t.strides()[0], dst[1] = t.strides()[1];
    for (int d = 0; d < 3; ++d) dst[2 + d] = 0;
    for (int d = 0; d < spatial; ++d) dst[2 + d + off] = t.strides()[2 + d];
  };
  fill(s.in_strides, in), fill(s.w_strides, w), fill(s.out_strides, *out);
  s.has_bias = b != nullptr;
  s.bias_stride = b != nullptr && b->dim() == 1 ? b->strides()[0] : 1;
  // cuDNN where it is loaded and takes the shape; else (logged once) the direct kernel, which takes any strides
  if (!cudnn_convolution(in, w, b, *out, s, stream_of(device)))
    launch_convolution(in.dtype(), out->data_ptr(), in.data_ptr(), w.data_ptr(), b != nullptr ? b->data_ptr() : nullptr,
                       s, stream_of(device));
  return out.release();
}

}  // namespace cuda
}  // namespace aoti_host
