// Element conversion for the CPU kernels: loads and stores of every compute-supported dtype through a
// wider accumulator type (float16/bfloat16 rounding as c10 does), the accumulator each dtype computes
// in, and the dtype/device checks every kernel starts with. Internal to runtime/src/cpu/.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>

#include "aoti_host/error.h"
#include "aoti_host/tensor.h"

namespace aoti_host {
namespace cpu {
namespace detail {

using namespace dtype_code;  // kFloat32, ...: the kernels name dtypes by their torch codes

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half <-> float, round-to-nearest-even (the FP16 library's branch-free algorithm, as c10 uses).
inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
  return f32_from_bits(sign | bits);
}
inline uint16_t float_to_half(float f) {
  float base = (std::abs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
inline float bf16_to_float(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  const uint32_t rounding_bias = ((u >> 16) & 1u) + 0x7fffu;
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

template <typename T>
T rd(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void wr(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

inline bool is_integral(int32_t dt) {
  return dt == kUInt8 || dt == kInt8 || dt == kInt16 || dt == kInt32 || dt == kInt64 || dt == kBool;
}

template <typename Acc>
Acc load(const char* p, int32_t dt) {
  switch (dt) {
    case kUInt8: return static_cast<Acc>(rd<uint8_t>(p));
    case kInt8: return static_cast<Acc>(rd<int8_t>(p));
    case kInt16: return static_cast<Acc>(rd<int16_t>(p));
    case kInt32: return static_cast<Acc>(rd<int32_t>(p));
    case kInt64: return static_cast<Acc>(rd<int64_t>(p));
    case kBool: return static_cast<Acc>(rd<uint8_t>(p) != 0 ? 1 : 0);
    case kFloat16: return static_cast<Acc>(half_to_float(rd<uint16_t>(p)));
    case kBFloat16: return static_cast<Acc>(bf16_to_float(rd<uint16_t>(p)));
    case kFloat32: return static_cast<Acc>(rd<float>(p));
    case kFloat64: return static_cast<Acc>(rd<double>(p));
    default: break;
  }
  throw Error(std::string("cannot compute on dtype ") + dtype_name(dt));
}

// Floating -> integral goes through int64 as c10's static_cast_with_inter_type does.
template <typename Acc>
int64_t to_i64(Acc v) {
  return static_cast<int64_t>(v);
}

template <typename Acc>
void store(char* p, int32_t dt, Acc v) {
  switch (dt) {
    case kUInt8: wr<uint8_t>(p, static_cast<uint8_t>(to_i64(v))); return;
    case kInt8: wr<int8_t>(p, static_cast<int8_t>(to_i64(v))); return;
    case kInt16: wr<int16_t>(p, static_cast<int16_t>(to_i64(v))); return;
    case kInt32: wr<int32_t>(p, static_cast<int32_t>(to_i64(v))); return;
    case kInt64: wr<int64_t>(p, to_i64(v)); return;
    case kBool: wr<uint8_t>(p, v != Acc(0) ? 1 : 0); return;
    case kFloat16: wr<uint16_t>(p, float_to_half(static_cast<float>(v))); return;
    case kBFloat16: wr<uint16_t>(p, float_to_bf16(static_cast<float>(v))); return;
    case kFloat32: wr<float>(p, static_cast<float>(v)); return;
    case kFloat64: wr<double>(p, static_cast<double>(v)); return;
    default: break;
  }
  throw Error(std::string("cannot compute on dtype ") + dtype_name(dt));
}

inline bool is_complex(int32_t dt) { return dt == kComplex64 || dt == kComplex128; }

// One element as a complex number: complex64/complex128 as stored, a computed real dtype as (x, 0).
inline std::complex<double> load_complex(const char* p, int32_t dt) {
  if (dt == kComplex64) return {rd<float>(p), rd<float>(p + sizeof(float))};
  if (dt == kComplex128) return {rd<double>(p), rd<double>(p + sizeof(double))};
  return {load<double>(p, dt), 0.0};
}

// Stores v: both parts into complex64/complex128, the real part into a real dtype (as ATen's copy_).
inline void store_complex(char* p, int32_t dt, std::complex<double> v) {
  if (dt == kComplex64) {
    wr<float>(p, static_cast<float>(v.real()));
    wr<float>(p + sizeof(float), static_cast<float>(v.imag()));
  } else if (dt == kComplex128) {
    wr<double>(p, v.real());
    wr<double>(p + sizeof(double), v.imag());
  } else {
    store<double>(p, dt, v.real());
  }
}

inline void require_supported(const Tensor& t, const char* arg) {
  if (!dtype_is_supported(t.dtype())) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) +
                ", which this runtime's CPU kernels do not compute on (supported: float16, bfloat16, float32, "
                "float64, int8, int16, int32, int64, uint8, bool)");
  }
  if (t.device_type() != device_code::kCPU) {
    throw Error(std::string(arg) + " is on device " + device_type_name(t.device_type()) + ", expected cpu");
  }
}

inline void require_same_dtype(const Tensor& t, const char* arg, const Tensor& ref, const char* ref_arg) {
  if (t.dtype() != ref.dtype()) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) + " but " + ref_arg + " has dtype " +
                dtype_name(ref.dtype()) + ": dtypes must be the same");
  }
}

enum class AccKind { Float, Double, Int };
inline AccKind acc_kind(int32_t dt) {
  if (dt == kFloat16 || dt == kBFloat16) return AccKind::Float;
  if (dt == kFloat32 || dt == kFloat64) return AccKind::Double;
  return AccKind::Int;
}

template <class F>
void dispatch_acc(int32_t dt, F&& f) {
  switch (acc_kind(dt)) {
    case AccKind::Float: f(float{}); return;
    case AccKind::Double: f(double{}); return;
    case AccKind::Int: f(int64_t{}); return;
  }
}

}  // namespace detail
}  // namespace cpu
}  // namespace aoti_host
