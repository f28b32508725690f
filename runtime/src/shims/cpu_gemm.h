// GEMM on strided matrices through the BLAS (OpenBLAS's cblas): the one place the runtime calls it.
#pragma once

#include <cstdint>

#include "shims/cpu/mat_view.h"

namespace aoti_host {
namespace cpu {

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
