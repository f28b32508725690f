#include "cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <thread>
#include <type_traits>

#include "aoti_host/error.h"
#include "cpu_gemm.h"
#include "packed_gemm.h"

// OpenMP pragmas where the build has OpenMP (gcc: the plugins' libgomp); serial loops elsewhere.
#ifdef _OPENMP
#define AOTI_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define AOTI_OMP(...)
#endif

namespace aoti_host {
namespace cpu {

namespace {

using namespace dtype_code;

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half <-> float, round-to-nearest-even (the FP16 library's branch-free algorithm, as c10 uses).
float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
  return f32_from_bits(sign | bits);
}
uint16_t float_to_half(float f) {
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
float bf16_to_float(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }
uint16_t float_to_bf16(float f) {
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

bool is_integral(int32_t dt) {
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

std::string dims_str(const std::vector<int64_t>& v, const char* sep = "x") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return v.empty() ? "a scalar" : s;
}


void require_supported(const Tensor& t, const char* arg) {
  if (!dtype_is_supported(t.dtype())) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) +
                ", which this runtime's CPU kernels do not compute on (supported: float16, bfloat16, float32, "
                "float64, int8, int16, int32, int64, uint8, bool)");
  }
  if (t.device_type() != device_code::kCPU) {
    throw Error(std::string(arg) + " is on device " + device_type_name(t.device_type()) + ", expected cpu");
  }
}

void require_same_dtype(const Tensor& t, const char* arg, const Tensor& ref, const char* ref_arg) {
  if (t.dtype() != ref.dtype()) {
    throw Error(std::string(arg) + " has dtype " + dtype_name(t.dtype()) + " but " + ref_arg + " has dtype " +
                dtype_name(ref.dtype()) + ": dtypes must be the same");
  }
}

// Visits every element in row-major logical order: f(linear_index, element_offset).
template <class F>
void for_each_offset(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, F&& f) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  if (n == 0) return;
  const size_t nd = sizes.size();
  if (nd == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  // The innermost dimension as a plain loop (the compiler can vectorise it), an odometer over the rest.
  const int64_t inner = sizes[nd - 1], is = strides[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, off + j * is);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < sizes[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// Strides that view `t` as if expanded to `target` (numpy broadcasting), or an error naming `arg`.
std::vector<int64_t> broadcast_strides(const Tensor& t, const std::vector<int64_t>& target, const char* arg) {
  const auto& s = t.sizes();
  const auto& st = t.strides();
  if (s.size() > target.size()) {
    throw Error(std::string(arg) + " of shape " + list_str(s) + " cannot be broadcast to " + list_str(target));
  }
  std::vector<int64_t> out(target.size(), 0);
  const size_t lead = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == target[lead + i]) {
      out[lead + i] = st[i];
    } else if (s[i] == 1) {
      out[lead + i] = 0;
    } else {
      throw Error(std::string(arg) + " of shape " + list_str(s) + " cannot be broadcast to " + list_str(target));
    }
  }
  return out;
}

template <typename Acc>
std::vector<Acc> gather(const Tensor& t, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Acc> v(static_cast<size_t>(n));
  const char* base = static_cast<const char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(sizes, strides, [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = load<Acc>(base + off * isz, dt); });
  return v;
}

template <typename Acc>
std::vector<Acc> gather(const Tensor& t) {
  return gather<Acc>(t, t.sizes(), t.strides());
}

template <typename Acc>
void scatter(Tensor& t, const std::vector<Acc>& v) {
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { store<Acc>(base + off * isz, dt, v[static_cast<size_t>(i)]); });
}

enum class AccKind { Float, Double, Int };
AccKind acc_kind(int32_t dt) {
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

// ---- matmul ----

template <typename Acc>
void addmm_impl(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha,
                int64_t batch) {
  const int64_t n = mat1.sizes()[mat1.dim() - 2], m = mat1.sizes()[mat1.dim() - 1];
  const int64_t p = mat2.sizes()[mat2.dim() - 1];
  const std::vector<Acc> a = gather<Acc>(mat1);
  const std::vector<Acc> b = gather<Acc>(mat2);
  std::vector<Acc> c;
  const bool use_self = self != nullptr && beta != 0.0;
  if (use_self) c = gather<Acc>(*self, out.sizes(), broadcast_strides(*self, out.sizes(), "self"));
  const Acc abeta = static_cast<Acc>(beta), aalpha = static_cast<Acc>(alpha);
  std::vector<Acc> r(static_cast<size_t>(batch * n * p));
  for (int64_t bi = 0; bi < batch; ++bi) {
    const Acc* A = a.data() + bi * n * m;
    const Acc* B = b.data() + bi * m * p;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < p; ++j) {
        Acc sum = 0;
        for (int64_t k = 0; k < m; ++k) sum += A[i * m + k] * B[k * p + j];
        const size_t o = static_cast<size_t>(bi * n * p + i * p + j);
        Acc v = (aalpha == Acc(1)) ? sum : static_cast<Acc>(aalpha * sum);
        if (use_self) v = static_cast<Acc>(v + abeta * c[o]);
        r[o] = v;
      }
    }
  }
  scatter<Acc>(out, r);
}

// ---- convolution ----

bool channels_last_threads_gt1() {
  if (const char* v = std::getenv("OMP_NUM_THREADS")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n > 0) return n > 1;
  }
  return std::thread::hardware_concurrency() > 1;
}

bool cpu_has_bf16_mkldnn() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpu_has_fp16_mkldnn() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512fp16");
#else
  return false;
#endif
}

bool all_ones(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != 1) return false;
  return true;
}

// Mirrors ATen's ConvParams::use_mkldnn for CPU (which decides Mkldnn vs Slow3d, and so whether a
// channels_last_3d input gives a channels_last_3d output).
bool would_use_mkldnn(const Tensor& input, const Tensor& weight, const ConvParams& p) {
  switch (input.dtype()) {
    case kBFloat16: return cpu_has_bf16_mkldnn();
    case kFloat16: return cpu_has_fp16_mkldnn();
    case kFloat32: break;
    default: return false;
  }
  const auto& is = input.sizes();
  const auto& ws = weight.sizes();
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  const bool strided = !all_ones(p.stride), dilated = !all_ones(p.dilation);
  if (!(strided || dilated || !all_ones(kernel) || channels_last_threads_gt1())) return false;
  return p.groups > 1 || (ws[ws.size() - 1] > 3 && ws[ws.size() - 2] > 3) || is[0] > 1 ||
         is[0] * is[1] * is[2] * is[3] > 20480;
}

// 0: contiguous, 2: channels_last, 3: channels_last_3d (torch's memory_format codes).
int conv_output_memory_format(const Tensor& input, const Tensor& weight, const ConvParams& p) {
  if (input.numel() == 0) return 0;
  if (input.dim() == 4) {
    // Mkldnn, Slow2d, SlowDilated2d and SlowTranspose2d all agree: channels_last if either operand is.
    return (is_channels_last_strides_2d(input.sizes(), input.strides()) ||
            is_channels_last_strides_2d(weight.sizes(), weight.strides()))
               ? 2
               : 0;
  }
  if (input.dim() == 5) {
    // Only the mkldnn backend keeps channels_last_3d; Slow3d/SlowTranspose3d return contiguous.
    const bool cl = is_channels_last_strides_3d(input.sizes(), input.strides()) ||
                    is_channels_last_strides_3d(weight.sizes(), weight.strides());
    return cl && would_use_mkldnn(input, weight, p) ? 3 : 0;
  }
  return 0;  // 1-d convolution: ATen returns contiguous whatever the input strides.
}

std::vector<int64_t> strides_for_format(const std::vector<int64_t>& s, int fmt) {
  if (fmt == 2) {  // c10::get_channels_last_strides_2d
    return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]};
  }
  if (fmt == 3) {  // c10::get_channels_last_strides_3d
    return {s[2] * s[3] * s[4] * s[1], 1, s[3] * s[4] * s[1], s[4] * s[1], s[1]};
  }
  return Tensor::contiguous_strides(s);
}

std::vector<int64_t> expand_param(const std::vector<int64_t>& v, size_t k, const char* name, bool allow_empty,
                                  int64_t empty_default) {
  if (v.size() == k) return v;
  if (v.size() == 1) return std::vector<int64_t>(k, v[0]);
  if (v.empty() && allow_empty) return std::vector<int64_t>(k, empty_default);
  throw Error(std::string(name) + " has " + std::to_string(v.size()) + " elements " + list_str(v) + ", expected 1 or " +
              std::to_string(k) + " (one per spatial dimension)");
}


// ---- BLAS paths (float32 -> float, float64 -> double) ----

template <typename T>
constexpr int32_t dtype_of() {
  return sizeof(T) == 4 ? kFloat32 : kFloat64;
}

// The tensor's elements as T: its own memory when it already is T, else a packed copy in `buf` (then
// the returned strides are contiguous).
template <typename T>
const T* typed_data(const Tensor& t, std::vector<T>& buf, std::vector<int64_t>& strides) {
  if (t.dtype() == dtype_of<T>()) {
    strides = t.strides();
    return static_cast<const T*>(t.data_ptr());
  }
  buf = gather<T>(t);
  strides = Tensor::contiguous_strides(t.sizes());
  return buf.data();
}

template <typename T>
const T* contiguous_data(const Tensor& t, std::vector<T>& buf) {
  if (t.dtype() == dtype_of<T>() && t.is_contiguous()) return static_cast<const T*>(t.data_ptr());
  buf = gather<T>(t);
  return buf.data();
}

// Writes packed row-major values into `t` (any strides), converting to its dtype.
template <typename T>
void store_packed(Tensor& t, const T* v) {
  if (t.dtype() == dtype_of<T>()) {
    T* base = static_cast<T*>(t.data_ptr());
    for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { base[off] = v[i]; });
    return;
  }
  char* base = static_cast<char*>(t.data_ptr());
  const int64_t isz = static_cast<int64_t>(t.itemsize());
  const int32_t dt = t.dtype();
  for_each_offset(t.sizes(), t.strides(), [&](int64_t i, int64_t off) { store<T>(base + off * isz, dt, v[i]); });
}

template <typename T>
MatView<const T> mat_of(const Tensor& t, int64_t batch) {
  const auto& s = t.sizes();
  const auto& st = t.strides();
  const size_t d = s.size();
  const T* p = static_cast<const T*>(t.data_ptr()) + (d == 3 ? batch * st[0] : 0);
  return {p, s[d - 2], s[d - 1], st[d - 2], st[d - 1]};
}

template <typename T>
void addmm_blas(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha,
                int64_t batch) {
  const bool use_self = self != nullptr && beta != 0.0;
  const auto& os = out.sizes();
  const int64_t M = os[os.size() - 2], N = os[os.size() - 1];
  if constexpr (std::is_same<T, float>::value) {
    // A bias broadcast over rows (a Linear's) goes into the kernel's epilogue instead of a copy into out.
    if (batch == 1 && os.size() == 2 && (!use_self || self->dtype() == out.dtype())) {
      const std::vector<int64_t> sst = use_self ? broadcast_strides(*self, os, "self") : std::vector<int64_t>{0, 0};
      if (sst[0] == 0 || M == 1) {
        const MatView<const T> co = mat_of<T>(out, 0);
        const MatView<T> c{const_cast<T*>(co.p), co.rows, co.cols, co.rs, co.cs};
        if (try_fast_gemm(mat_of<T>(mat1, 0), mat_of<T>(mat2, 0), c, static_cast<T>(alpha),
                          use_self ? static_cast<T>(beta) : T(0),
                          use_self ? static_cast<const T*>(self->data_ptr()) : nullptr, sst[1]))
          return;
      }
    }
  }
  if (use_self) {  // out <- self (broadcast), then out <- alpha * A @ B + beta * out
    const std::vector<int64_t> sst = broadcast_strides(*self, os, "self");
    if (self->dtype() != out.dtype()) throw Error("self and out dtypes differ");
    const T* sp = static_cast<const T*>(self->data_ptr());
    if (os.size() == 2) {  // straight into out's own strides: no packed copy (it was 40% of a small Linear)
      T* op = static_cast<T*>(out.data_ptr());
      const int64_t o0 = out.strides()[0], o1 = out.strides()[1], s0 = sst[0], s1 = sst[1];
      for (int64_t i = 0; i < M; ++i) {
        T* orow = op + i * o0;
        const T* srow = sp + i * s0;
        if (o1 == 1 && s1 == 1) {
          if (srow != orow) std::copy_n(srow, N, orow);
        } else {
          for (int64_t j = 0; j < N; ++j) orow[j * o1] = srow[j * s1];
        }
      }
    } else {
      std::vector<T> tmp(static_cast<size_t>(M * N));
      for_each_offset(os, sst, [&](int64_t i, int64_t off) { tmp[static_cast<size_t>(i)] = sp[off]; });
      store_packed<T>(out, tmp.data());
    }
  }
  // One GEMM per batch entry; several at once on the OpenMP pool (the BLAS runs each single-threaded
  // inside the parallel region), a single one with the BLAS's own threads.
AOTI_OMP(omp parallel for if (batch > 1 && batch * mat1.sizes()[mat1.dim() - 1] * M * N > (1 << 17)) schedule(static))
  for (int64_t b = 0; b < batch; ++b) {
    const MatView<const T> co = mat_of<T>(out, b);
    const MatView<T> c{const_cast<T*>(co.p), co.rows, co.cols, co.rs, co.cs};
    gemm<T>(mat_of<T>(mat1, b), mat_of<T>(mat2, b), c, static_cast<T>(alpha), use_self ? static_cast<T>(beta) : T(0));
  }
}

// A convolution's shape in 3 spatial dims (the form every kernel here works in): a 1-d or 2-d convolution
// gets leading spatial dims of size 1, stride 1, dilation 1 and no padding.
struct ConvGeometry {
  ConvGeometry(const Tensor& input, const Tensor& weight, const Tensor& out, const ConvParams& p)
      : k(static_cast<size_t>(input.dim() - 2)),
        I(spatial({input.sizes().begin() + 2, input.sizes().end()}, 1)),
        K(spatial({weight.sizes().begin() + 2, weight.sizes().end()}, 1)),
        O(spatial({out.sizes().begin() + 2, out.sizes().end()}, 1)),
        S(spatial(p.stride, 1)),
        P(spatial(p.padding, 0)),
        D(spatial(p.dilation, 1)),
        N(input.sizes()[0]),
        Cin(input.sizes()[1]),
        Cout(out.sizes()[1]),
        G(p.groups),
        Cin_g(Cin / G),
        Cout_g(Cout / G),
        Isp(I[0] * I[1] * I[2]),
        Osp(O[0] * O[1] * O[2]),
        Ksp(K[0] * K[1] * K[2]) {}
  // Per-spatial-dim values (sizes, strides) padded at the front to 3 dims with `fill`.
  std::vector<int64_t> spatial(const std::vector<int64_t>& v, int64_t fill) const {
    std::vector<int64_t> r(3 - k, fill);
    r.insert(r.end(), v.begin(), v.end());
    return r;
  }

  size_t k;  // spatial dims of the convolution itself (1-3); first, as the others are computed from it
  std::vector<int64_t> I, K, O, S, P, D;  // input, kernel, output sizes; stride, padding, dilation
  int64_t N, Cin, Cout, G, Cin_g, Cout_g;
  int64_t Isp, Osp, Ksp;  // input, output and kernel positions
};

// Convolution as GEMM: im2col + GEMM for convolutions, GEMM + col2im for transposed ones, per sample
// and group, into a packed NC(DHW) result that is then stored in the output's layout.
template <typename T>
void conv_gemm(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t N = geo.N, Cin = geo.Cin, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Isp = geo.Isp, Osp = geo.Osp, Ksp = geo.Ksp;
  std::vector<T> xbuf, wbuf, ybuf;
  const T* x = contiguous_data<T>(input, xbuf);
  const T* w = contiguous_data<T>(weight, wbuf);
  const bool direct = out.dtype() == dtype_of<T>() && out.is_contiguous();
  if (!direct) ybuf.assign(static_cast<size_t>(N * Cout * Osp), T(0));
  T* y = direct ? static_cast<T*>(out.data_ptr()) : ybuf.data();
  T beta = 0;
  if (bias != nullptr) {
    std::vector<T> bbuf;
    const T* b = contiguous_data<T>(*bias, bbuf);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cout; ++c) std::fill_n(y + (n * Cout + c) * Osp, Osp, b[c]);
    beta = 1;
  } else if (p.transposed) {
    std::fill_n(y, N * Cout * Osp, T(0));  // col2im accumulates
  }
  if (!p.transposed) {
    const int64_t Kc = Cin_g * Ksp;
    const bool pointwise = Ksp == 1 && all_ones(S) && P[0] == 0 && P[1] == 0 && P[2] == 0;
AOTI_OMP(omp parallel if (N * G > 1 && N * Osp * Kc * Cout_g > (1 << 17)))
    {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(Kc * Osp));
AOTI_OMP(omp for schedule(static))
    for (int64_t ng = 0; ng < N * G; ++ng) {
      {
        const int64_t n = ng / G, g = ng % G;
        const T* xg = x + (n * Cin + g * Cin_g) * Isp;
        if (!pointwise) {
          T* c = col.data();
          for (int64_t ci = 0; ci < Cin_g; ++ci)
            for (int64_t kd = 0; kd < K[0]; ++kd)
              for (int64_t kh = 0; kh < K[1]; ++kh)
                for (int64_t kw = 0; kw < K[2]; ++kw) {
                  const T* xc = xg + ci * Isp;
                  for (int64_t od = 0; od < O[0]; ++od) {
                    const int64_t id = od * S[0] - P[0] + kd * D[0];
                    for (int64_t oh = 0; oh < O[1]; ++oh) {
                      const int64_t ih = oh * S[1] - P[1] + kh * D[1];
                      const bool row_in = id >= 0 && id < I[0] && ih >= 0 && ih < I[1];
                      const T* xr = xc + (id * I[1] + ih) * I[2];
                      for (int64_t ow = 0; ow < O[2]; ++ow) {
                        const int64_t iw = ow * S[2] - P[2] + kw * D[2];
                        *c++ = (row_in && iw >= 0 && iw < I[2]) ? xr[iw] : T(0);
                      }
                    }
                  }
                }
        }
        const MatView<const T> A{w + g * Cout_g * Kc, Cout_g, Kc, Kc, 1};
        const MatView<const T> B{pointwise ? xg : col.data(), Kc, Osp, Osp, 1};
        const MatView<T> C{y + (n * Cout + g * Cout_g) * Osp, Cout_g, Osp, Osp, 1};
        gemm<T>(A, B, C, T(1), beta);
      }
    }
    }
  } else {
    const int64_t Kc = Cout_g * Ksp;
AOTI_OMP(omp parallel if (N * G > 1 && N * Osp * Kc * Cin_g > (1 << 17)))
    {
    std::vector<T> cols(static_cast<size_t>(Kc * Isp));
AOTI_OMP(omp for schedule(static))
    for (int64_t ng = 0; ng < N * G; ++ng) {
      {
        const int64_t n = ng / G, g = ng % G;
        // weight [Cin, Cout_g, K...]: this group's rows form a [Cin_g, Cout_g * Ksp] matrix
        const MatView<const T> Wg{w + g * Cin_g * Kc, Cin_g, Kc, Kc, 1};
        const MatView<const T> Xg{x + (n * Cin + g * Cin_g) * Isp, Cin_g, Isp, Isp, 1};
        gemm<T>(Wg.t(), Xg, MatView<T>{cols.data(), Kc, Isp, Isp, 1}, T(1), T(0));
        const T* c = cols.data();
        for (int64_t co = 0; co < Cout_g; ++co) {
          T* yc = y + (n * Cout + g * Cout_g + co) * Osp;
          for (int64_t kd = 0; kd < K[0]; ++kd)
            for (int64_t kh = 0; kh < K[1]; ++kh)
              for (int64_t kw = 0; kw < K[2]; ++kw)
                for (int64_t id = 0; id < I[0]; ++id) {
                  const int64_t od = id * S[0] - P[0] + kd * D[0];
                  for (int64_t ih = 0; ih < I[1]; ++ih, c += I[2]) {
                    const int64_t oh = ih * S[1] - P[1] + kh * D[1];
                    if (od < 0 || od >= O[0] || oh < 0 || oh >= O[1]) continue;
                    T* yr = yc + (od * O[1] + oh) * O[2];
                    for (int64_t iw = 0; iw < I[2]; ++iw) {
                      const int64_t ow = iw * S[2] - P[2] + kw * D[2];
                      if (ow >= 0 && ow < O[2]) yr[ow] += c[iw];
                    }
                  }
                }
        }
      }
    }
    }
  }
  if (!direct) store_packed<T>(out, ybuf.data());
}

// Non-transposed convolution straight from the input's strides into the output's layout: per sample
// and group one im2col matrix [output positions, kernel positions x input channels] (channels
// innermost, so a channels-last input copies runs of channels), then one GEMM that writes the output
// where it lies: [positions, Cout] rows for channels-last, [Cout, positions] planes for contiguous.
template <typename T>
void conv_im2col(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p,
                 bool channels_last_out) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t N = geo.N, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Osp = geo.Osp, Ksp = geo.Ksp;
  const int64_t Kc = Ksp * Cin_g;
  std::vector<T> xbuf;
  std::vector<int64_t> xs;
  const T* x = typed_data<T>(input, xbuf, xs);
  const std::vector<int64_t> xsp = geo.spatial({xs.begin() + 2, xs.end()}, 0);
  // The weight as GEMM operand [Cout, (kd, kh, kw, ci)] rows; for the AVX-512 kernel (float) as one
  // packed [(kd, kh, kw, ci), Cout_g] B per group instead, cached when the weight is a constant.
  auto gather_weight = [&](int64_t co0, int64_t nco, T* dst) {
    std::vector<T> wbuf;
    std::vector<int64_t> wst;
    const T* w = typed_data<T>(weight, wbuf, wst);
    const std::vector<int64_t> wsp = geo.spatial({wst.begin() + 2, wst.end()}, 0);
    for (int64_t co = co0; co < co0 + nco; ++co)
      for (int64_t kd = 0; kd < K[0]; ++kd)
        for (int64_t kh = 0; kh < K[1]; ++kh)
          for (int64_t kw = 0; kw < K[2]; ++kw)
            for (int64_t ci = 0; ci < Cin_g; ++ci)
              *dst++ = w[co * wst[0] + ci * wst[1] + kd * wsp[0] + kh * wsp[1] + kw * wsp[2]];
  };
  const bool fast = std::is_same<T, float>::value && fast_gemm_available() && Kc > 0;
  std::vector<T> wp;
  std::vector<std::shared_ptr<const PackedB>> packed_w;
  if (fast) {
    const auto& wsz = weight.sizes();
    const auto& wst = weight.strides();
    int64_t lo = 0, hi = 0;
    for (size_t d = 0; d < wsz.size(); ++d) {
      const int64_t span = (wsz[d] - 1) * wst[d];
      (span < 0 ? lo : hi) += span;
    }
    const char* base = static_cast<const char*>(weight.data_ptr());
    const int64_t isz = static_cast<int64_t>(weight.itemsize());
    for (int64_t g = 0; g < G; ++g) {
      auto build = [&] {
        std::vector<T> tmp(static_cast<size_t>(Cout_g * Kc));
        gather_weight(g * Cout_g, Cout_g, tmp.data());
        auto pb = std::make_shared<PackedB>(Kc, Cout_g);
        pb->fill(MatView<const float>{reinterpret_cast<const float*>(tmp.data()), Kc, Cout_g, 1, Kc});
        return pb;
      };
      std::vector<int64_t> key = {1, reinterpret_cast<int64_t>(base), weight.dtype(), G, g};
      key.insert(key.end(), wsz.begin(), wsz.end());
      key.insert(key.end(), wst.begin(), wst.end());
      std::shared_ptr<const PackedB> pb =
          weight.dtype() == kFloat32 ? constant_packed(base + lo * isz, base + (hi + 1) * isz, key, build) : nullptr;
      packed_w.push_back(pb != nullptr ? pb : build());
    }
  } else {
    wp.resize(static_cast<size_t>(Cout * Kc));
    gather_weight(0, Cout, wp.data());
  }
  T* y = static_cast<T*>(out.data_ptr());
  const int64_t ysn = out.strides()[0];
  T beta = 0;
  std::vector<T> bias_buf;
  const T* bias_row = nullptr;  // the kernel adds the bias in its epilogue
  if (bias != nullptr && fast) {
    bias_row = contiguous_data<T>(*bias, bias_buf);
    beta = 1;
  } else if (bias != nullptr) {
    std::vector<T> bbuf;
    const T* b = contiguous_data<T>(*bias, bbuf);
    for (int64_t n = 0; n < N; ++n) {
      T* yn = y + n * ysn;
      if (channels_last_out) {
        for (int64_t r = 0; r < Osp; ++r) std::copy_n(b, Cout, yn + r * Cout);
      } else {
        for (int64_t c = 0; c < Cout; ++c) std::fill_n(yn + c * Osp, Osp, b[c]);
      }
    }
    beta = 1;
  }
  // A 1x1 convolution with stride 1 and no padding reads the input as it is, when its spatial dims
  // flatten into one (true of contiguous and channels-last inputs).
  const bool pointwise = Ksp == 1 && all_ones(S) && P[0] == 0 && P[1] == 0 && P[2] == 0 &&
                         (I[0] == 1 || xsp[0] == I[1] * xsp[1]) && (I[1] == 1 || xsp[1] == I[2] * xsp[2]);
  const int64_t pos_stride = I[2] > 1 ? xsp[2] : I[1] > 1 ? xsp[1] : xsp[0];
  const bool run_kw = xs[1] == 1 && xsp[2] == Cin_g && D[2] == 1;
  // A channels-last input into a channels-last output: no im2col, the kernel reads each output
  // position's taps straight from the input through a table of offsets (one per position and tap,
  // -1 for padding), the same for every sample and group.
  const bool implicit = fast && channels_last_out && !pointwise && xs[1] == 1;
  // The table depends on the geometry only: kept per thread for the last shapes seen (a plugin calls
  // the same few convolutions on every run).
  static thread_local std::map<std::vector<int64_t>, std::vector<int64_t>> offs_cache;
  std::vector<int64_t> geometry;
  for (const auto* v : {&I, &K, &O, &S, &P, &D, &xsp}) geometry.insert(geometry.end(), v->begin(), v->end());
  if (implicit && offs_cache.size() > 64 && offs_cache.find(geometry) == offs_cache.end()) offs_cache.clear();
  std::vector<int64_t>& offs = offs_cache[implicit ? geometry : std::vector<int64_t>{}];
  if (implicit && offs.empty()) {
    offs.resize(static_cast<size_t>(Osp * Ksp));
    int64_t* o = offs.data();
    for (int64_t od = 0; od < O[0]; ++od)
      for (int64_t oh = 0; oh < O[1]; ++oh)
        for (int64_t ow = 0; ow < O[2]; ++ow)
          for (int64_t kd = 0; kd < K[0]; ++kd)
            for (int64_t kh = 0; kh < K[1]; ++kh)
              for (int64_t kw = 0; kw < K[2]; ++kw) {
                const int64_t id = od * S[0] - P[0] + kd * D[0], ih = oh * S[1] - P[1] + kh * D[1],
                              iw = ow * S[2] - P[2] + kw * D[2];
                const bool in = id >= 0 && id < I[0] && ih >= 0 && ih < I[1] && iw >= 0 && iw < I[2];
                *o++ = in ? id * xsp[0] + ih * xsp[1] + iw * xsp[2] : -1;
              }
  }
  // Threads only where the work pays for waking them (~100k multiply-adds per call and more).
AOTI_OMP(omp parallel if (N * G > 1 && N * Osp * Kc * Cout > (1 << 17)))
  {
    static thread_local std::vector<T> col;  // not zeroed: every element is written below
    if (!pointwise && !implicit && col.size() < static_cast<size_t>(Osp * Kc)) col.resize(static_cast<size_t>(Osp * Kc));
AOTI_OMP(omp for schedule(static))
    for (int64_t ng = 0; ng < N * G; ++ng) {
      const int64_t n = ng / G, g = ng % G;
      const T* xg = x + n * xs[0] + g * Cin_g * xs[1];
      if constexpr (std::is_same<T, float>::value) {
        if (implicit && fast_conv_rows(xg, offs.data(), Ksp, Cin_g, *packed_w[static_cast<size_t>(g)],
                                       MatView<float>{y + n * ysn + g * Cout_g, Osp, Cout_g, Cout, 1}, beta,
                                       bias_row != nullptr ? bias_row + g * Cout_g : nullptr))
          continue;
        if (implicit && col.size() < static_cast<size_t>(Osp * Kc)) col.resize(static_cast<size_t>(Osp * Kc));
      }
      MatView<const T> cols{col.data(), Osp, Kc, Kc, 1};
      if (pointwise) {
        cols = MatView<const T>{xg, Osp, Cin_g, pos_stride, xs[1]};
      } else {
        T* c = col.data();
        for (int64_t od = 0; od < O[0]; ++od)
          for (int64_t oh = 0; oh < O[1]; ++oh)
            for (int64_t ow = 0; ow < O[2]; ++ow)
              for (int64_t kd = 0; kd < K[0]; ++kd) {
                const int64_t id = od * S[0] - P[0] + kd * D[0];
                for (int64_t kh = 0; kh < K[1]; ++kh) {
                  const int64_t ih = oh * S[1] - P[1] + kh * D[1];
                  const int64_t iw0 = ow * S[2] - P[2];
                  if (run_kw && id >= 0 && id < I[0] && ih >= 0 && ih < I[1] && iw0 >= 0 && iw0 + K[2] <= I[2]) {
                    // the whole kernel row lies inside and is one contiguous run in a channels-last input
                    const T* src = xg + id * xsp[0] + ih * xsp[1] + iw0 * xsp[2];
                    if constexpr (std::is_same<T, float>::value) copy_floats(c, src, K[2] * Cin_g);
                    else for (int64_t e = 0; e < K[2] * Cin_g; ++e) c[e] = src[e];
                    c += K[2] * Cin_g;
                    continue;
                  }
                  for (int64_t kw = 0; kw < K[2]; ++kw, c += Cin_g) {
                    const int64_t iw = ow * S[2] - P[2] + kw * D[2];
                    if (id < 0 || id >= I[0] || ih < 0 || ih >= I[1] || iw < 0 || iw >= I[2]) {
                      std::fill_n(c, Cin_g, T(0));
                      continue;
                    }
                    const T* src = xg + id * xsp[0] + ih * xsp[1] + iw * xsp[2];
                    if (xs[1] == 1) {
                      if constexpr (std::is_same<T, float>::value) copy_floats(c, src, Cin_g);
                      else for (int64_t ci = 0; ci < Cin_g; ++ci) c[ci] = src[ci];  // short runs: no memcpy call
                    } else {
                      for (int64_t ci = 0; ci < Cin_g; ++ci) c[ci] = src[ci * xs[1]];
                    }
                  }
                }
              }
      }
      if constexpr (std::is_same<T, float>::value) {
        if (fast) {
          // C as [positions, Cout_g]: channels-last rows, or a contiguous output's planes transposed.
          const MatView<float> C = channels_last_out
                                       ? MatView<float>{y + n * ysn + g * Cout_g, Osp, Cout_g, Cout, 1}
                                       : MatView<float>{y + n * ysn + g * Cout_g * Osp, Osp, Cout_g, 1, Osp};
          const MatView<const float> unused{nullptr, Kc, Cout_g, Cout_g, 1};
          if (fast_gemm(cols, unused, packed_w[static_cast<size_t>(g)].get(), C, 1.0f, beta,
                        bias_row != nullptr ? bias_row + g * Cout_g : nullptr, 1))
            continue;
        }
      }
      const MatView<const T> Wg{wp.data() + g * Cout_g * Kc, Cout_g, Kc, Kc, 1};
      if (channels_last_out) {
        gemm<T>(cols, Wg.t(), MatView<T>{y + n * ysn + g * Cout_g, Osp, Cout_g, Cout, 1}, T(1), beta);
      } else {
        gemm<T>(Wg, cols.t(), MatView<T>{y + n * ysn + g * Cout_g * Osp, Cout_g, Osp, Osp, 1}, T(1), beta);
      }
    }
  }
}

template <typename Acc>
void conv_impl(Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p) {
  const ConvGeometry geo(input, weight, out, p);
  const std::vector<int64_t>&I = geo.I, &K = geo.K, &O = geo.O, &S = geo.S, &P = geo.P, &D = geo.D;
  const int64_t N = geo.N, Cin = geo.Cin, Cout = geo.Cout, G = geo.G, Cin_g = geo.Cin_g, Cout_g = geo.Cout_g;
  const int64_t Isp = geo.Isp, Osp = geo.Osp, Ksp = geo.Ksp;
  const std::vector<Acc> x = gather<Acc>(input);
  const std::vector<Acc> w = gather<Acc>(weight);
  std::vector<Acc> b;
  if (bias != nullptr) b = gather<Acc>(*bias);
  std::vector<Acc> y(static_cast<size_t>(N * Cout * Osp), Acc(0));
  if (!b.empty()) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cout; ++c)
        for (int64_t o = 0; o < Osp; ++o) y[static_cast<size_t>((n * Cout + c) * Osp + o)] = b[static_cast<size_t>(c)];
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      if (!p.transposed) {
        // weight: [Cout, Cin_g, K...]
        for (int64_t co = 0; co < Cout_g; ++co) {
          const int64_t oc = g * Cout_g + co;
          for (int64_t od = 0; od < O[0]; ++od)
            for (int64_t oh = 0; oh < O[1]; ++oh)
              for (int64_t ow = 0; ow < O[2]; ++ow) {
                Acc acc = 0;
                for (int64_t ci = 0; ci < Cin_g; ++ci) {
                  const int64_t ic = g * Cin_g + ci;
                  const Acc* xp = x.data() + (n * Cin + ic) * Isp;
                  const Acc* wp = w.data() + (oc * Cin_g + ci) * Ksp;
                  for (int64_t kd = 0; kd < K[0]; ++kd) {
                    const int64_t id = od * S[0] - P[0] + kd * D[0];
                    if (id < 0 || id >= I[0]) continue;
                    for (int64_t kh = 0; kh < K[1]; ++kh) {
                      const int64_t ih = oh * S[1] - P[1] + kh * D[1];
                      if (ih < 0 || ih >= I[1]) continue;
                      for (int64_t kw = 0; kw < K[2]; ++kw) {
                        const int64_t iw = ow * S[2] - P[2] + kw * D[2];
                        if (iw < 0 || iw >= I[2]) continue;
                        acc += xp[(id * I[1] + ih) * I[2] + iw] * wp[(kd * K[1] + kh) * K[2] + kw];
                      }
                    }
                  }
                }
                y[static_cast<size_t>((n * Cout + oc) * Osp + (od * O[1] + oh) * O[2] + ow)] += acc;
              }
        }
      } else {
        // weight: [Cin, Cout_g, K...]; each input element scatters into the output.
        for (int64_t ci = 0; ci < Cin_g; ++ci) {
          const int64_t ic = g * Cin_g + ci;
          const Acc* xp = x.data() + (n * Cin + ic) * Isp;
          for (int64_t co = 0; co < Cout_g; ++co) {
            const int64_t oc = g * Cout_g + co;
            const Acc* wp = w.data() + (ic * Cout_g + co) * Ksp;
            Acc* yp = y.data() + (n * Cout + oc) * Osp;
            for (int64_t id = 0; id < I[0]; ++id)
              for (int64_t ih = 0; ih < I[1]; ++ih)
                for (int64_t iw = 0; iw < I[2]; ++iw) {
                  const Acc xv = xp[(id * I[1] + ih) * I[2] + iw];
                  for (int64_t kd = 0; kd < K[0]; ++kd) {
                    const int64_t od = id * S[0] - P[0] + kd * D[0];
                    if (od < 0 || od >= O[0]) continue;
                    for (int64_t kh = 0; kh < K[1]; ++kh) {
                      const int64_t oh = ih * S[1] - P[1] + kh * D[1];
                      if (oh < 0 || oh >= O[1]) continue;
                      for (int64_t kw = 0; kw < K[2]; ++kw) {
                        const int64_t ow = iw * S[2] - P[2] + kw * D[2];
                        if (ow < 0 || ow >= O[2]) continue;
                        yp[(od * O[1] + oh) * O[2] + ow] += xv * wp[(kd * K[1] + kh) * K[2] + kw];
                      }
                    }
                  }
                }
          }
        }
      }
    }
  }
  scatter<Acc>(out, y);
}

// dst <- src (same element size, src strides already broadcast to dst's sizes), innermost dim in a loop.
template <typename E>
void copy_rows(Tensor& dst, const Tensor& src, const std::vector<int64_t>& sst) {
  const auto& sz = dst.sizes();
  const auto& dstr = dst.strides();
  const size_t nd = sz.size();
  const int64_t inner = sz[nd - 1], ds = dstr[nd - 1], ss = sst[nd - 1];
  std::vector<int64_t> outer_sizes(sz.begin(), sz.end() - 1);
  std::vector<int64_t> idx(nd - 1, 0);
  int64_t rows = 1;
  for (int64_t v : outer_sizes) rows *= v;
  E* d = static_cast<E*>(dst.data_ptr());
  const E* s = static_cast<const E*>(src.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t doff = 0, soff = 0;
    for (size_t k = 0; k + 1 < nd; ++k) doff += idx[k] * dstr[k], soff += idx[k] * sst[k];
    E* dr = d + doff;
    const E* sr = s + soff;
    for (int64_t j = 0; j < inner; ++j) dr[j * ds] = sr[j * ss];
    for (size_t k = nd - 1; k-- > 0;) {
      if (++idx[k] < outer_sizes[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace

bool is_channels_last_strides_2d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (sizes.size() != 4 || strides.size() != 4) return false;
  int64_t min = 0;
  if (strides[1] == 0) return false;
  for (int d : {1, 3, 2, 0}) {
    if (sizes[d] == 0) return false;
    if (strides[d] < min) return false;
    // N111 and N11W-sliced tensors are ambiguous; ATen calls them contiguous.
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

bool is_channels_last_strides_3d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (sizes.size() != 5 || strides.size() != 5) return false;
  int64_t min = 0;
  if (strides[1] == 0) return false;
  for (int d : {1, 4, 3, 2, 0}) {
    if (sizes[d] == 0) return false;
    if (strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

void copy(Tensor& dst, const Tensor& src) {
  const std::vector<int64_t> sst = broadcast_strides(src, dst.sizes(), "src");
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.storage_data() != src.storage_data() &&
      (dst.itemsize() == 4 || dst.itemsize() == 8 || dst.itemsize() == 2) && dst.dim() > 0) {
    // Same dtype, separate storages (a layout conversion, say): element by element, a row at a time.
    switch (dst.itemsize()) {
      case 2: copy_rows<uint16_t>(dst, src, sst); return;
      case 4: copy_rows<uint32_t>(dst, src, sst); return;
      default: copy_rows<uint64_t>(dst, src, sst); return;
    }
  }
  if (dst.dtype() == src.dtype()) {
    // Same dtype: bytes, any dtype. Stage through a buffer so overlapping src/dst stay correct.
    const size_t isz = dst.itemsize();
    std::vector<char> buf(static_cast<size_t>(dst.numel()) * isz);
    const char* sb = static_cast<const char*>(src.data_ptr());
    for_each_offset(dst.sizes(), sst, [&](int64_t i, int64_t off) {
      std::memcpy(buf.data() + static_cast<size_t>(i) * isz, sb + off * static_cast<int64_t>(isz), isz);
    });
    char* db = static_cast<char*>(dst.data_ptr());
    for_each_offset(dst.sizes(), dst.strides(), [&](int64_t i, int64_t off) {
      std::memcpy(db + off * static_cast<int64_t>(isz), buf.data() + static_cast<size_t>(i) * isz, isz);
    });
    return;
  }
  require_supported(src, "src");
  require_supported(dst, "self");
  if (is_integral(src.dtype()) && is_integral(dst.dtype())) {
    scatter<int64_t>(dst, gather<int64_t>(src, dst.sizes(), sst));
  } else {
    scatter<double>(dst, gather<double>(src, dst.sizes(), sst));
  }
}

void addmm(Tensor& out, const Tensor* self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  require_supported(mat1, "mat1");
  require_supported(mat2, "mat2");
  require_supported(out, "out");
  if (mat1.dim() != 2) throw Error("mat1 must be a matrix, got " + std::to_string(mat1.dim()) + "-d tensor of shape " + list_str(mat1.sizes()));
  if (mat2.dim() != 2) throw Error("mat2 must be a matrix, got " + std::to_string(mat2.dim()) + "-d tensor of shape " + list_str(mat2.sizes()));
  if (mat1.sizes()[1] != mat2.sizes()[0]) {
    throw Error("mat1 is " + dims_str(mat1.sizes()) + ", mat2 is " + dims_str(mat2.sizes()) + ": inner dimensions differ");
  }
  require_same_dtype(mat2, "mat2", mat1, "mat1");
  require_same_dtype(out, "out", mat1, "mat1");
  const std::vector<int64_t> want = {mat1.sizes()[0], mat2.sizes()[1]};
  if (out.sizes() != want) {
    throw Error("out is " + dims_str(out.sizes()) + ", expected " + dims_str(want) + " (mat1 is " + dims_str(mat1.sizes()) +
                ", mat2 is " + dims_str(mat2.sizes()) + ")");
  }
  if (self != nullptr) {
    require_supported(*self, "self");
    require_same_dtype(*self, "self", mat1, "mat1");
    broadcast_strides(*self, want, "self");
  }
  if (out.dtype() == kFloat32) return addmm_blas<float>(out, self, mat1, mat2, beta, alpha, 1);
  if (out.dtype() == kFloat64) return addmm_blas<double>(out, self, mat1, mat2, beta, alpha, 1);
  dispatch_acc(out.dtype(), [&](auto acc) { addmm_impl<decltype(acc)>(out, self, mat1, mat2, beta, alpha, 1); });
}

void bmm(Tensor& out, const Tensor& self, const Tensor& mat2) {
  require_supported(self, "self");
  require_supported(mat2, "mat2");
  require_supported(out, "out");
  if (self.dim() != 3) throw Error("self must be a 3-d tensor, got shape " + list_str(self.sizes()));
  if (mat2.dim() != 3) throw Error("mat2 must be a 3-d tensor, got shape " + list_str(mat2.sizes()));
  if (self.sizes()[0] != mat2.sizes()[0]) {
    throw Error("self is " + dims_str(self.sizes()) + ", mat2 is " + dims_str(mat2.sizes()) + ": batch sizes differ");
  }
  if (self.sizes()[2] != mat2.sizes()[1]) {
    throw Error("self is " + dims_str(self.sizes()) + ", mat2 is " + dims_str(mat2.sizes()) + ": inner dimensions differ");
  }
  require_same_dtype(mat2, "mat2", self, "self");
  require_same_dtype(out, "out", self, "self");
  const std::vector<int64_t> want = {self.sizes()[0], self.sizes()[1], mat2.sizes()[2]};
  if (out.sizes() != want) {
    throw Error("out is " + dims_str(out.sizes()) + ", expected " + dims_str(want) + " (self is " + dims_str(self.sizes()) +
                ", mat2 is " + dims_str(mat2.sizes()) + ")");
  }
  if (out.dtype() == kFloat32) return addmm_blas<float>(out, nullptr, self, mat2, 0.0, 1.0, want[0]);
  if (out.dtype() == kFloat64) return addmm_blas<double>(out, nullptr, self, mat2, 0.0, 1.0, want[0]);
  dispatch_acc(out.dtype(), [&](auto acc) { addmm_impl<decltype(acc)>(out, nullptr, self, mat2, 0.0, 1.0, want[0]); });
}

Tensor* convolution(const Tensor& input, const Tensor& weight, const Tensor* bias, const ConvParams& p0) {
  require_supported(input, "input");
  require_supported(weight, "weight");
  if (input.dim() < 3 || input.dim() > 5) {
    throw Error("input must be 3-d, 4-d or 5-d (batched 1-d, 2-d or 3-d convolution), got shape " + list_str(input.sizes()));
  }
  if (weight.dim() != input.dim()) {
    throw Error("weight has shape " + list_str(weight.sizes()) + " (" + std::to_string(weight.dim()) + "-d) but input has shape " +
                list_str(input.sizes()) + " (" + std::to_string(input.dim()) + "-d)");
  }
  require_same_dtype(weight, "weight", input, "input");
  const size_t k = static_cast<size_t>(input.dim() - 2);
  ConvParams p = p0;
  p.stride = expand_param(p0.stride, k, "stride", false, 1);
  p.padding = expand_param(p0.padding, k, "padding", true, 0);
  p.dilation = expand_param(p0.dilation, k, "dilation", false, 1);
  p.output_padding = expand_param(p0.output_padding, k, "output_padding", true, 0);
  for (size_t i = 0; i < k; ++i) {
    if (p.stride[i] <= 0) throw Error("stride " + list_str(p.stride) + " must be positive");
    if (p.padding[i] < 0) throw Error("padding " + list_str(p.padding) + " must be non-negative");
    if (p.dilation[i] <= 0) throw Error("dilation " + list_str(p.dilation) + " must be positive");
    if (p.transposed && p.output_padding[i] < 0) throw Error("output_padding " + list_str(p.output_padding) + " must be non-negative");
    if (p.transposed && p.output_padding[i] >= p.stride[i] && p.output_padding[i] >= p.dilation[i]) {
      throw Error("output_padding " + list_str(p.output_padding) + " must be smaller than either stride " + list_str(p.stride) +
                  " or dilation " + list_str(p.dilation));
    }
  }
  if (p.groups <= 0) throw Error("groups must be positive, got " + std::to_string(p.groups));
  const auto& is = input.sizes();
  const auto& ws = weight.sizes();
  const int64_t G = p.groups;
  int64_t c_out;
  if (!p.transposed) {
    if (ws[0] % G != 0) {
      throw Error("weight has " + std::to_string(ws[0]) + " output channels (shape " + list_str(ws) + "), not divisible by groups=" +
                  std::to_string(G));
    }
    if (is[1] != ws[1] * G) {
      throw Error("input has " + std::to_string(is[1]) + " channels (shape " + list_str(is) + ") but weight of shape " + list_str(ws) +
                  " with groups=" + std::to_string(G) + " expects " + std::to_string(ws[1] * G));
    }
    c_out = ws[0];
  } else {
    if (is[1] != ws[0]) {
      throw Error("input has " + std::to_string(is[1]) + " channels (shape " + list_str(is) + ") but transposed weight of shape " +
                  list_str(ws) + " expects " + std::to_string(ws[0]));
    }
    if (ws[0] % G != 0) {
      throw Error("input channels " + std::to_string(ws[0]) + " are not divisible by groups=" + std::to_string(G));
    }
    c_out = ws[1] * G;
  }
  if (bias != nullptr) {
    require_supported(*bias, "bias");
    require_same_dtype(*bias, "bias", input, "input");
    if (bias->dim() != 1 || bias->sizes()[0] != c_out) {
      throw Error("bias has shape " + list_str(bias->sizes()) + ", expected [" + std::to_string(c_out) + "] (one per output channel)");
    }
  }
  std::vector<int64_t> out_sizes = {is[0], c_out};
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = is[2 + i], kk = ws[2 + i];
    int64_t o;
    if (!p.transposed) {
      const int64_t span = in + 2 * p.padding[i] - p.dilation[i] * (kk - 1) - 1;
      if (span < 0) {
        throw Error("input spatial size " + list_str({is.begin() + 2, is.end()}) + " with padding " + list_str(p.padding) +
                    " is smaller than the dilated kernel " + list_str({ws.begin() + 2, ws.end()}) + " (dilation " +
                    list_str(p.dilation) + ")");
      }
      o = span / p.stride[i] + 1;
    } else {
      o = (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (kk - 1) + p.output_padding[i] + 1;
      if (o <= 0) throw Error("calculated output size is " + std::to_string(o) + " in spatial dimension " + std::to_string(i) + ": too small");
    }
    out_sizes.push_back(o);
  }
  const int fmt = conv_output_memory_format(input, weight, p);
  std::unique_ptr<Tensor> out(Tensor::empty_strided(input.dtype(), out_sizes, strides_for_format(out_sizes, fmt),
                                                    input.device_type(), input.device_index()));
  if (out->numel() > 0 && !p.transposed && (input.dtype() == kFloat32 || input.dtype() == kFloat64)) {
    if (input.dtype() == kFloat32) {
      conv_im2col<float>(*out, input, weight, bias, p, fmt != 0);
    } else {
      conv_im2col<double>(*out, input, weight, bias, p, fmt != 0);
    }
  } else if (out->numel() > 0 && input.dtype() == kFloat32) {
    conv_gemm<float>(*out, input, weight, bias, p);
  } else if (out->numel() > 0 && input.dtype() == kFloat64) {
    conv_gemm<double>(*out, input, weight, bias, p);
  } else {
    dispatch_acc(input.dtype(), [&](auto acc) { conv_impl<decltype(acc)>(*out, input, weight, bias, p); });
  }
  return out.release();
}


namespace {

// c10's compute_non_overlapping_and_dense.
bool non_overlapping_and_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  const size_t n = sizes.size();
  if (n == 1) return sizes[0] < 2 || strides[0] == 1;
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t require = 1;
  for (size_t i = 0; i < n; ++i) {
    if (sizes[perm[i]] < 2) return true;
    if (strides[perm[i]] != require) return false;
    require *= sizes[perm[i]];
  }
  return true;
}

// ATen's infer_dense_strides: dense strides keeping the input's dimension order (TensorIterator's sort).
std::vector<int64_t> infer_dense_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  const size_t n = sizes.size();
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  auto should_swap = [&](size_t d0, size_t d1) {
    const int64_t s0 = strides[d0], s1 = strides[d1];
    if (s0 == 0 || s1 == 0) return 0;
    if (s0 < s1) return -1;
    if (s0 > s1) return 1;
    return sizes[d0] > sizes[d1] ? 1 : 0;
  };
  for (size_t i = 1; i < n; ++i) {
    size_t dim1 = i;
    for (size_t j = 1; j <= i; ++j) {
      const size_t dim0 = i - j;
      const int c = should_swap(perm[dim0], perm[dim1]);
      if (c > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::vector<int64_t> out(n);
  int64_t cur = 1;
  for (size_t i = 0; i < n; ++i) {
    out[perm[i]] = cur;
    if (sizes[perm[i]] > 1) cur *= sizes[perm[i]];
  }
  return out;
}

// The strides at::empty_like(t) (memory_format=preserve) gives.
std::vector<int64_t> empty_like_strides(const Tensor& t) {
  if (non_overlapping_and_dense(t.sizes(), t.strides())) return t.strides();
  return infer_dense_strides(t.sizes(), t.strides());
}

template <typename T>
void sdpa_impl(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask, T scale,
               Tensor& out, Tensor& lse) {
  const int64_t B = q.sizes()[0], Hq = q.sizes()[1], L = q.sizes()[2], E = q.sizes()[3];
  const int64_t Hk = k.sizes()[1], S = k.sizes()[2], Ev = v.sizes()[3];
  const int64_t group = Hq / Hk;
  std::vector<T> qb, kb, vb;
  std::vector<int64_t> qs, ks, vs;
  const T* qp = typed_data<T>(q, qb, qs);
  const T* kp = typed_data<T>(k, kb, ks);
  const T* vp = typed_data<T>(v, vb, vs);
  // The output in its own layout when it is T, else a T buffer with the same strides, stored at the end.
  const std::vector<int64_t>& os = out.strides();
  std::vector<T> ob;
  T* op = static_cast<T*>(out.data_ptr());
  if (out.dtype() != dtype_of<T>()) {
    ob.assign(static_cast<size_t>(out.numel()), T(0));
    op = ob.data();
  }
  std::vector<T> mb;
  std::vector<int64_t> ms;
  if (mask != nullptr) {
    const std::vector<int64_t> full = {B, Hq, L, S};
    ms = broadcast_strides(*mask, full, "attn_mask");
    if (mask->dtype() == kBool) {  // true: attend; false: masked out
      const char* base = static_cast<const char*>(mask->data_ptr());
      mb.resize(static_cast<size_t>(B * Hq * L * S));
      for_each_offset(full, ms, [&](int64_t i, int64_t off) {
        mb[static_cast<size_t>(i)] = base[off] != 0 ? T(0) : -std::numeric_limits<T>::infinity();
      });
    } else {
      mb = gather<T>(*mask, full, ms);
    }
  }
  float* lf = lse.dtype() == kFloat32 ? static_cast<float*>(lse.data_ptr()) : nullptr;
  double* ld = lse.dtype() == kFloat64 ? static_cast<double*>(lse.data_ptr()) : nullptr;
  const std::vector<int64_t>& ls = lse.strides();
  const T ninf = -std::numeric_limits<T>::infinity();
  // (batch, head) pairs in parallel on the OpenMP pool; nothing in the loop throws.
AOTI_OMP(omp parallel if (B * Hq > 1 && B * Hq * L * S * (E + Ev) > (1 << 17)))
  {
  std::vector<T> scores(static_cast<size_t>(L * S));
AOTI_OMP(omp for schedule(static))
  for (int64_t bh = 0; bh < B * Hq; ++bh) {
    {
      const int64_t b = bh / Hq, h = bh % Hq;
      const int64_t hk = h / group;
      const MatView<const T> Q{qp + b * qs[0] + h * qs[1], L, E, qs[2], qs[3]};
      const MatView<const T> K{kp + b * ks[0] + hk * ks[1], S, E, ks[2], ks[3]};
      const MatView<const T> V{vp + b * vs[0] + hk * vs[1], S, Ev, vs[2], vs[3]};
      gemm<T>(Q, K.t(), MatView<T>{scores.data(), L, S, S, 1}, scale, T(0));
      const T* m = mb.empty() ? nullptr : mb.data() + (b * Hq + h) * L * S;
      for (int64_t i = 0; i < L; ++i) {
        T* row = scores.data() + i * S;
        if constexpr (std::is_same<T, float>::value) {
          if (m == nullptr && !causal) {  // the plain case: one vectorised pass per row
            const float lsev = softmax_row(row, S);
            const int64_t lo = b * ls[0] + h * ls[1] + i * ls[2];
            if (lf != nullptr) lf[lo] = lsev;
            if (ld != nullptr) ld[lo] = static_cast<double>(lsev);
            continue;
          }
        }
        T mx = ninf;
        for (int64_t j = 0; j < S; ++j) {
          T x = row[j];
          if (m != nullptr) x += m[i * S + j];
          if (causal && j > i) x = ninf;
          row[j] = x;
          mx = std::max(mx, x);
        }
        T sum = 0, lsev;
        if (mx == ninf) {  // every key masked out: ATen's kernel gives zeros and logsumexp -inf
          std::fill_n(row, S, T(0));
          lsev = ninf;
        } else {
          for (int64_t j = 0; j < S; ++j) sum += (row[j] = std::exp(row[j] - mx));
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < S; ++j) row[j] *= inv;
          lsev = mx + std::log(sum);
        }
        const int64_t lo = b * ls[0] + h * ls[1] + i * ls[2];
        if (lf != nullptr) lf[lo] = static_cast<float>(lsev);
        if (ld != nullptr) ld[lo] = static_cast<double>(lsev);
      }
      gemm<T>(MatView<const T>{scores.data(), L, S, S, 1}, V,
              MatView<T>{op + b * os[0] + h * os[1], L, Ev, os[2], os[3]}, T(1), T(0));
    }
  }
  }
  if (!ob.empty()) {
    char* base = static_cast<char*>(out.data_ptr());
    const int64_t isz = static_cast<int64_t>(out.itemsize());
    const int32_t dt = out.dtype();
    for_each_offset(out.sizes(), os, [&](int64_t, int64_t off) { store<T>(base + off * isz, dt, ob[static_cast<size_t>(off)]); });
  }
}

}  // namespace

void sdpa_flash(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, bool is_causal,
                const Tensor* attn_mask, const double* scale, Tensor** out, Tensor** logsumexp) {
  for (const auto* t : {&q, &k, &v}) {
    const char* name = t == &q ? "query" : t == &k ? "key" : "value";
    require_supported(*t, name);
    if (t->dim() != 4)
      throw Error(std::string(name) + " must be 4-d [batch, heads, seq, head_dim], got shape " + list_str(t->sizes()));
  }
  const int32_t dt = q.dtype();
  if (dt != kFloat32 && dt != kFloat64 && dt != kFloat16 && dt != kBFloat16)
    throw Error(std::string("query has dtype ") + dtype_name(dt) + "; flash attention takes float32, float64, float16 or bfloat16");
  require_same_dtype(k, "key", q, "query");
  require_same_dtype(v, "value", q, "query");
  const auto& qs = q.sizes();
  const auto& ks = k.sizes();
  const auto& vs = v.sizes();
  if (ks[0] != qs[0] || vs[0] != qs[0])
    throw Error("batch sizes differ: query " + list_str(qs) + ", key " + list_str(ks) + ", value " + list_str(vs));
  if (ks[1] != vs[1] || ks[2] != vs[2])
    throw Error("key " + list_str(ks) + " and value " + list_str(vs) + " must have the same heads and sequence length");
  if (ks[3] != qs[3] || vs[3] != qs[3])
    throw Error("query " + list_str(qs) + ", key " + list_str(ks) + " and value " + list_str(vs) +
                " must have the same head size (as ATen's flash attention requires)");
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    throw Error("query has " + std::to_string(qs[1]) + " heads, key/value " + std::to_string(ks[1]) +
                ": the query heads must be a multiple of the key/value heads");
  if (dropout_p != 0.0)
    throw Error("dropout_p=" + std::to_string(dropout_p) + ": this runtime runs inference only; export the model in eval() mode");
  if (attn_mask != nullptr) {
    require_supported(*attn_mask, "attn_mask");
    if (attn_mask->dtype() != dt && attn_mask->dtype() != kBool)
      throw Error(std::string("attn_mask has dtype ") + dtype_name(attn_mask->dtype()) + ", expected " + dtype_name(dt) + " or bool");
    broadcast_strides(*attn_mask, {qs[0], qs[1], qs[2], ks[2]}, "attn_mask");
  }
  const int64_t B = qs[0], H = qs[1], L = qs[2];
  // ATen allocates the output with empty_like(query): plugins index it with the strides that gives.
  std::unique_ptr<Tensor> o(Tensor::empty_strided(dt, qs, empty_like_strides(q), q.device_type(), q.device_index()));
  std::unique_ptr<Tensor> l(Tensor::empty_strided(dt == kFloat64 ? kFloat64 : kFloat32, {B, H, L}, {L * H, 1, H},
                                                  q.device_type(), q.device_index()));
  const double sc = scale != nullptr ? *scale : 1.0 / std::sqrt(static_cast<double>(qs[3]));
  if (o->numel() > 0 || l->numel() > 0) {
    if (dt == kFloat64) {
      sdpa_impl<double>(q, k, v, is_causal, attn_mask, sc, *o, *l);
    } else {
      sdpa_impl<float>(q, k, v, is_causal, attn_mask, static_cast<float>(sc), *o, *l);
    }
  }
  *out = o.release();
  *logsumexp = l.release();
}

}  // namespace cpu
}  // namespace aoti_host
