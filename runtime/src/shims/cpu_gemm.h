// GEMM on strided matrices through the BLAS (OpenBLAS's cblas): the one place the runtime calls it.
#pragma once

#include <cstdint>

#include "shims/cpu/mat_view.h"

namespace aoti_host {
namespace cpu {

// Multiply-adds from which a GEMM (or a batch-1 convolution's im2col + GEMM) is split over the OpenMP
// pool in one region: ~0.1 ms on one core here, against a few microseconds for waking the pool. Below
// it the BLAS runs on the calling thread. (At 16M, a BERT-base layer's q/k/v/out projections of 128
// tokens, 12.6M each, and most of EfficientNet's 1x1 convolutions ran on one core at any thread count.)
constexpr double kSplitGemmWork = 4.0 * 1024 * 1024;

// C <- alpha * A @ B + beta * C, for any strides (zero, negative, overlapping rows included). beta == 0
// never reads C (NaNs in it don't propagate), as BLAS and ATen define it. Operands the BLAS can take as
// they are (unit stride along rows or columns) are passed without a copy; others are packed first.
template <typename T>
void gemm(const MatView<const T>& A, const MatView<const T>& B, const MatView<T>& C, T alpha, T beta);

extern template void gemm<float>(const MatView<const float>&, const MatView<const float>&, const MatView<float>&,
                                 float, float);
extern template void gemm<double>(const MatView<const double>&, const MatView<const double>&,
                                  const MatView<double>&, double, double);

}  // namespace cpu
}  // namespace aoti_host
