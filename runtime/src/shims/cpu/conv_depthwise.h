// Depthwise convolution (groups == input channels, each output channel reading one input channel) as a
// direct kernel: per output position and block of channels, a multiply-add per kernel tap, vectorised
// over channels (AVX2 + FMA when the CPU has them). im2col + GEMM does this with one GEMM per channel
// of inner dimension K*K and one column: an order of magnitude slower on MobileNet/EfficientNet shapes.
#pragma once

#include <cstdint>

namespace aoti_host {
namespace cpu {

// A depthwise convolution in 3 spatial dims (a 1-d or 2-d one has leading sizes 1, stride 1, dilation 1,
// padding 0). Output channel co reads input channel co / mult.
struct DepthwiseShape {
  int64_t N, Cin, mult;
  int64_t I[3], K[3], O[3], S[3], P[3], D[3];
};

// y <- conv(x, w) + bias. x and y: any element strides, in the order (n, c, d, h, w); channels-last
// operands (channel stride 1) are read and written in place, others through a channels-last copy. w: the
// weight as [Cin * mult][Kd * Kh * Kw] contiguous. bias: Cin * mult values or null.
template <typename T>
void depthwise_conv(const DepthwiseShape& s, const T* x, const int64_t* xs, const T* w, const T* bias, T* y,
                    const int64_t* ys);

extern template void depthwise_conv<float>(const DepthwiseShape&, const float*, const int64_t*, const float*,
                                           const float*, float*, const int64_t*);
extern template void depthwise_conv<double>(const DepthwiseShape&, const double*, const int64_t*, const double*,
                                            const double*, double*, const int64_t*);

}  // namespace cpu
}  // namespace aoti_host
