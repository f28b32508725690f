// Run-time dispatch to the x86 SIMD kernels: the runtime is built for the baseline ISA, and each kernel
// that uses wider vectors is compiled with a target attribute and called only when the CPU has it.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AOTI_X86_SIMD 1
#include <immintrin.h>
#else
#define AOTI_X86_SIMD 0
#endif

namespace aoti_host {
namespace cpu {

inline bool cpu_has_avx512f() {
#if AOTI_X86_SIMD
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
#else
  return false;
#endif
}

inline bool cpu_has_avx2_fma() {
#if AOTI_X86_SIMD
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace aoti_host
