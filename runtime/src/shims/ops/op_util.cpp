#include "shims/ops/op_util.h"

#include <algorithm>
#include <cmath>

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

template <typename T>
T rd(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <typename T>
void wr(void* base, int64_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

[[noreturn]] void bad_dtype(int32_t dt) {
  throw Error(std::string("cannot compute on dtype ") + dtype_name(dt) +
              " (supported: float16, bfloat16, float32, float64, uint8, int8, int16, int32, int64, bool)");
}

}  // namespace

bool is_floating(int32_t dt) { return dt == kFloat16 || dt == kBFloat16 || dt == kFloat32 || dt == kFloat64; }
bool is_integral(int32_t dt) { return dt == kUInt8 || dt == kInt8 || dt == kInt16 || dt == kInt32 || dt == kInt64; }

void check_compute_dtype(int32_t dt, const char* arg) {
  if (!is_floating(dt) && !is_integral(dt) && dt != kBool) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(dt) +
                ", which these CPU kernels do not compute on (supported: float16, bfloat16, float32, float64, "
                "uint8, int8, int16, int32, int64, bool)");
  }
}

namespace {

// The integer dtypes and bool read exactly as R; `other` reads the rest.
template <class R, class Other>
R load_integer_or(const void* base, int32_t dt, int64_t i, Other other) {
  switch (dt) {
    case kUInt8: return static_cast<R>(rd<uint8_t>(base, i));
    case kInt8: return static_cast<R>(rd<int8_t>(base, i));
    case kInt16: return static_cast<R>(rd<int16_t>(base, i));
    case kInt32: return static_cast<R>(rd<int32_t>(base, i));
    case kInt64: return static_cast<R>(rd<int64_t>(base, i));
    case kBool: return rd<uint8_t>(base, i) != 0 ? R(1) : R(0);
    default: return other();
  }
}

}  // namespace

double load_f(const void* base, int32_t dt, int64_t i) {
  return load_integer_or<double>(base, dt, i, [&]() -> double {
    switch (dt) {
      case kFloat16: return half_to_float(rd<uint16_t>(base, i));
      case kBFloat16: return bf16_to_float(rd<uint16_t>(base, i));
      case kFloat32: return rd<float>(base, i);
      case kFloat64: return rd<double>(base, i);
      default: bad_dtype(dt);
    }
  });
}

int64_t load_i(const void* base, int32_t dt, int64_t i) {
  return load_integer_or<int64_t>(base, dt, i, [&] { return static_cast<int64_t>(load_f(base, dt, i)); });
}

void store_f(void* base, int32_t dt, int64_t i, double v) {
  switch (dt) {
    case kFloat16: wr<uint16_t>(base, i, float_to_half(static_cast<float>(v))); return;
    case kBFloat16: wr<uint16_t>(base, i, float_to_bf16(static_cast<float>(v))); return;
    case kFloat32: wr<float>(base, i, static_cast<float>(v)); return;
    case kFloat64: wr<double>(base, i, v); return;
    case kBool: wr<uint8_t>(base, i, v != 0.0 ? 1 : 0); return;
    default: store_i(base, dt, i, static_cast<int64_t>(v)); return;
  }
}

void store_i(void* base, int32_t dt, int64_t i, int64_t v) {
  switch (dt) {
    case kUInt8: wr<uint8_t>(base, i, static_cast<uint8_t>(v)); return;
    case kInt8: wr<int8_t>(base, i, static_cast<int8_t>(v)); return;
    case kInt16: wr<int16_t>(base, i, static_cast<int16_t>(v)); return;
    case kInt32: wr<int32_t>(base, i, static_cast<int32_t>(v)); return;
    case kInt64: wr<int64_t>(base, i, v); return;
    case kBool: wr<uint8_t>(base, i, v != 0 ? 1 : 0); return;
    case kFloat16:
    case kBFloat16:
    case kFloat32:
    case kFloat64: store_f(base, dt, i, static_cast<double>(v)); return;
    default: bad_dtype(dt);
  }
}

double round_to(int32_t dt, double v) {
  switch (dt) {
    case kFloat16: return half_to_float(float_to_half(static_cast<float>(v)));
    case kBFloat16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case kFloat32: return static_cast<float>(v);
    default: return v;
  }
}

int64_t offset_of(int64_t linear, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    const int64_t s = sizes[d];
    off += (linear % s) * strides[d];
    linear /= s;
  }
  return off;
}

int64_t unravel(int64_t linear, const Shape& sizes, const Shape& strides, Shape& pos) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    pos[d] = linear % sizes[d];
    linear /= sizes[d];
    off += pos[d] * strides[d];
  }
  return off;
}

bool broadcast_into(Shape& shape, const Shape& sizes) {
  if (sizes.size() > shape.size()) shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
  const size_t off = shape.size() - sizes.size();
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 1) continue;
    if (shape[off + k] != 1 && shape[off + k] != sizes[k]) return false;
    shape[off + k] = sizes[k];
  }
  return true;
}

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<double> to_doubles(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load_f(t.data_ptr(), t.dtype(), offset_of(i, t.sizes(), t.strides()));
  return v;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  const int64_t n = ndim == 0 ? 1 : ndim;
  if (dim < -n || dim >= n) {
    throw Error(std::string(what) + " " + std::to_string(dim) + " is out of range for a tensor of " +
                std::to_string(ndim) + " dimension(s) (expected [" + std::to_string(-n) + ", " +
                std::to_string(n - 1) + "])");
  }
  return dim < 0 ? dim + n : dim;
}

Tensor* new_contiguous(int32_t dtype, const Shape& sizes) {
  return Tensor::empty_strided(dtype, sizes, Tensor::contiguous_strides(sizes));
}

Tensor* new_strided(int32_t dtype, const Shape& sizes, const Shape& strides) {
  return Tensor::empty_strided(dtype, sizes, strides);
}

void check_cpu(const Tensor& t, const char* arg) {
  if (t.device_type() != device_code::kCPU) {
    throw Error(std::string(arg) + " is on " + device_type_name(t.device_type()) +
                "; this fallback runs on the CPU only");
  }
}

void check_dtype(const Tensor& t, int32_t dt, const char* arg) {
  if (t.dtype() != dt) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) + ", expected " + dtype_name(dt));
  }
}

void check_same_sizes(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  if (a.sizes() != b.sizes()) {
    throw Error(std::string(an) + " has sizes " + str(a.sizes()) + " but " + bn + " has sizes " + str(b.sizes()));
  }
}

void for_each_line(const Shape& sizes, int64_t dim, const std::vector<const Shape*>& strides,
                   const std::function<void(const std::vector<int64_t>&)>& f) {
  const size_t nd = sizes.size();
  Shape outer;  // sizes without dim
  for (size_t d = 0; d < nd; ++d) {
    if (static_cast<int64_t>(d) != dim) outer.push_back(sizes[d]);
  }
  const int64_t lines = numel_of(outer);
  if (nd > 0 && sizes[dim] == 0) return;
  std::vector<int64_t> base(strides.size());
  for (int64_t l = 0; l < lines; ++l) {
    int64_t rem = l;
    std::fill(base.begin(), base.end(), 0);
    for (size_t d = nd; d-- > 0;) {
      if (static_cast<int64_t>(d) == dim) continue;
      const int64_t i = rem % sizes[d];
      rem /= sizes[d];
      for (size_t k = 0; k < strides.size(); ++k) base[k] += i * (*strides[k])[d];
    }
    f(base);
  }
}

std::string str(const Shape& v) { return list_str(v); }

}  // namespace ops
}  // namespace aoti_host
