// A strided matrix view: what the GEMM paths (shims/cpu_gemm.h through the BLAS, shims/packed_gemm.h with
// packed B panels) and the kernels that call them (strided.h's mat_of) pass around. On its own so that those
// headers share the type without including each other.
#pragma once

#include <cstdint>

namespace aoti_host {
namespace cpu {

// A rows x cols matrix at p with element strides rs (between rows) and cs (between columns).
template <typename T>
struct MatView {
  T* p;
  int64_t rows, cols, rs, cs;
  MatView<T> t() const { return {p, cols, rows, cs, rs}; }
};

}  // namespace cpu
}  // namespace aoti_host
