// Softmax of one float row, the inner step of the CPU attention kernel (sdpa.cpp).
#pragma once

#include <cstdint>

namespace aoti_host {
namespace cpu {

// Softmax of a row in place (every entry -inf: zeros); returns its logsumexp (-inf then). AVX-512 or
// AVX2 (simd_math.h's polynomial exp, within 2 ulp of expf) where the CPU has it, else scalar std::exp.
float softmax_row(float* row, int64_t n);

}  // namespace cpu
}  // namespace aoti_host
