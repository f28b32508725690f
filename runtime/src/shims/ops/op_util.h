// Helpers shared by the fallback-op kernels under shims/ops: element load/store in any
// compute dtype, strided index walking, ATen's output-stride rules and argument checks. Kernels here
// favour correctness on any strides over speed; every failure throws aoti_host::Error naming the
// argument, which the shim wrapper prefixes with the shim's name.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/tensor.h"
#include "shims/cpu/strided.h"

namespace aoti_host {
namespace ops {

using Shape = std::vector<int64_t>;

// float16/bfloat16 <-> float as c10 rounds (cpu/convert.h).
using cpu::detail::bf16_to_float;
using cpu::detail::float_to_bf16;
using cpu::detail::float_to_half;
using cpu::detail::half_to_float;
// complex64/complex128 elements as std::complex<double> (cpu/convert.h).
using cpu::detail::is_complex;
using cpu::detail::load_complex;
using cpu::detail::store_complex;

bool is_floating(int32_t dt);  // float16, bfloat16, float32, float64
bool is_integral(int32_t dt);  // uint8, int8, int16, int32, int64 (bool excluded)
// Throws unless dt is one of the dtypes these kernels compute on (floating, integral, bool).
void check_compute_dtype(int32_t dt, const char* arg);

// Element i (in elements from data_ptr) of a buffer of dtype dt, as double / int64.
double load_f(const void* base, int32_t dt, int64_t i);
int64_t load_i(const void* base, int32_t dt, int64_t i);
// Element i as the key type a kernel compares in: double (load_f) or int64_t (load_i).
template <typename K>
K load_key(const void* base, int32_t dt, int64_t i);
template <>
inline double load_key<double>(const void* base, int32_t dt, int64_t i) {
  return load_f(base, dt, i);
}
template <>
inline int64_t load_key<int64_t>(const void* base, int32_t dt, int64_t i) {
  return load_i(base, dt, i);
}
// Stores v, rounded to dt (float16/bfloat16 round to nearest even; integral truncates through int64).
void store_f(void* base, int32_t dt, int64_t i, double v);
void store_i(void* base, int32_t dt, int64_t i, int64_t v);
// v rounded to the floating dtype dt, as storing it would (identity for float64 and non-floating dt).
double round_to(int32_t dt, double v);

// Linear index -> element offset of a strided view.
int64_t offset_of(int64_t linear, const Shape& sizes, const Shape& strides);
int64_t numel_of(const Shape& sizes);
// offset_of that also gives the position: pos[d] of the row-major index `linear` over sizes (pos sized like sizes).
int64_t unravel(int64_t linear, const Shape& sizes, const Shape& strides, Shape& pos);
// numpy broadcasting of `sizes` into `shape`, right-aligned (shape grows to the longer rank); false, shape
// unspecified, when a dimension disagrees (neither is 1).
bool broadcast_into(Shape& shape, const Shape& sizes);
// A tensor's elements in row-major order, as double.
std::vector<double> to_doubles(const Tensor& t);

// c10's maybe_wrap_dim (a 0-d tensor accepts dim 0 and -1).
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what);

// c10's compute_non_overlapping_and_dense, ATen's infer_dense_strides, and the strides
// at::empty_like(t) (preserve format) gives (cpu/strided.h).
using cpu::detail::empty_like_strides;
using cpu::detail::infer_dense_strides;
using cpu::detail::non_overlapping_and_dense;

// New owning CPU tensors.
Tensor* new_contiguous(int32_t dtype, const Shape& sizes);
Tensor* new_strided(int32_t dtype, const Shape& sizes, const Shape& strides);

// Throws unless t is on the CPU.
void check_cpu(const Tensor& t, const char* arg);
// Throws unless t has the given dtype.
void check_dtype(const Tensor& t, int32_t dt, const char* arg);
// Throws unless sizes match.
void check_same_sizes(const Tensor& a, const Tensor& b, const char* an, const char* bn);

// Calls f(base_a, base_b, ...) for every line along `dim` of a shape: base offsets (in elements) of
// the line's first element in each of the given stride sets. sizes[dim] is the line length.
void for_each_line(const Shape& sizes, int64_t dim, const std::vector<const Shape*>& strides,
                   const std::function<void(const std::vector<int64_t>&)>& f);

std::string str(const Shape& v);

}  // namespace ops
}  // namespace aoti_host
