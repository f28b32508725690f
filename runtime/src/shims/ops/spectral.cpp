// aten::_fft_r2c and _fft_c2c (what torch.stft, torch.fft.rfft/fft/fftn lower to) and the complex ops
// spectrogram front-ends call around them: abs, angle, permute, view_as_real, view_as_complex. Transforms
// of any length (radix 2, Bluestein's chirp-z for other lengths) in double precision; the output layout is
// the one ATen's MKL path (_exec_fft) gives and torch's meta functions record at compile time.
#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>
#include <numeric>

#include "shims/ops/op_util.h"
#include "shims/ops/ops.h"

namespace aoti_host {
namespace ops {

using namespace dtype_code;

namespace {

using Cd = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

Cd load_c(const Tensor& t, int64_t off) {
  return load_complex(static_cast<const char*>(t.data_ptr()) + off * static_cast<int64_t>(t.itemsize()), t.dtype());
}

// Adding +0.0 turns a -0.0 into +0.0 (and changes nothing else): the exactly-real bins of a real
// signal (DC, Nyquist) then carry +0.0 imaginary parts as MKL's do, so angle() gives 0 or pi, not -pi.
void store_c(Tensor& t, int64_t off, Cd v) {
  store_complex(static_cast<char*>(t.data_ptr()) + off * static_cast<int64_t>(t.itemsize()), t.dtype(),
                Cd(v.real() + 0.0, v.imag() + 0.0));
}

// In-place radix-2 transform of a power-of-two length; sign -1: forward (e^{-2 pi i jk / n}).
void fft_pow2(std::vector<Cd>& a, int sign) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const double ang = sign * 2 * kPi / static_cast<double>(len);
    for (size_t k = 0; k < len / 2; ++k) {
      const Cd w(std::cos(ang * static_cast<double>(k)), std::sin(ang * static_cast<double>(k)));
      for (size_t i = 0; i < n; i += len) {
        const Cd u = a[i + k], v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
      }
    }
  }
}

// An unnormalised 1-d DFT of length n: radix 2 for powers of two, else Bluestein's chirp-z through a
// power-of-two convolution (X_k = c_k sum_j x_j c_j conj(c_{k-j}), c_m = e^{sign pi i m^2 / n}).
class Dft {
 public:
  Dft(int64_t n, int sign) : n_(static_cast<size_t>(n)), sign_(sign) {
    if ((n_ & (n_ - 1)) == 0) return;
    m_ = 1;
    while (m_ < 2 * n_ - 1) m_ <<= 1;
    chirp_.resize(n_);
    for (size_t k = 0; k < n_; ++k) {  // k^2 mod 2n keeps the angle small (exact for any n)
      const double a = sign * kPi * static_cast<double>((k * k) % (2 * n_)) / static_cast<double>(n_);
      chirp_[k] = Cd(std::cos(a), std::sin(a));
    }
    kernel_.assign(m_, Cd());
    kernel_[0] = std::conj(chirp_[0]);
    for (size_t k = 1; k < n_; ++k) kernel_[k] = kernel_[m_ - k] = std::conj(chirp_[k]);
    fft_pow2(kernel_, -1);
  }

  void operator()(std::vector<Cd>& x) {
    if (m_ == 0) {
      fft_pow2(x, sign_);
      return;
    }
    work_.assign(m_, Cd());
    for (size_t j = 0; j < n_; ++j) work_[j] = x[j] * chirp_[j];
    fft_pow2(work_, -1);
    for (size_t j = 0; j < m_; ++j) work_[j] *= kernel_[j];
    fft_pow2(work_, 1);
    const double scale = 1.0 / static_cast<double>(m_);
    for (size_t k = 0; k < n_; ++k) x[k] = work_[k] * scale * chirp_[k];
  }

 private:
  size_t n_, m_ = 0;
  int sign_;
  std::vector<Cd> chirp_, kernel_, work_;
};

// Transforms buf (row-major over `sizes`) along each of dims.
void transform(std::vector<Cd>& buf, const Shape& sizes, const Shape& dims, int sign) {
  const Shape st = Tensor::contiguous_strides(sizes);
  for (int64_t d : dims) {
    const int64_t n = sizes[static_cast<size_t>(d)];
    if (n <= 1) continue;
    const int64_t step = st[static_cast<size_t>(d)];
    Dft dft(n, sign);
    std::vector<Cd> line(static_cast<size_t>(n));
    const int64_t lines = static_cast<int64_t>(buf.size()) / n;
    for (int64_t l = 0; l < lines; ++l) {
      const int64_t base = (l / step) * step * n + l % step;  // first element of line l
      for (int64_t i = 0; i < n; ++i) line[static_cast<size_t>(i)] = buf[static_cast<size_t>(base + i * step)];
      dft(line);
      for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(base + i * step)] = line[static_cast<size_t>(i)];
    }
  }
}

// The strides _exec_fft (ATen's MKL and cuFFT paths alike) gives an output of out_sizes for an input with
// in_strides: batch dimensions first, in decreasing order of the input's strides, then the transformed dims in
// the given order, row-major.
Shape exec_fft_strides(const Shape& in_strides, const Shape& out_sizes, const Shape& dims) {
  const size_t nd = out_sizes.size();
  std::vector<bool> transformed(nd, false);
  for (int64_t d : dims) transformed[static_cast<size_t>(d)] = true;
  Shape perm;
  for (size_t d = 0; d < nd; ++d)
    if (!transformed[d]) perm.push_back(static_cast<int64_t>(d));
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return in_strides[static_cast<size_t>(a)] > in_strides[static_cast<size_t>(b)];
  });
  const size_t batch_dims = perm.size();
  perm.insert(perm.end(), dims.begin(), dims.end());
  Shape batched{1};
  for (int64_t d : dims) batched.push_back(out_sizes[static_cast<size_t>(d)]);
  const Shape bst = Tensor::contiguous_strides(batched);
  Shape out(nd, 0);
  int64_t batch_numel = 1;
  for (size_t i = batch_dims; i-- > 0;) {
    out[static_cast<size_t>(perm[i])] = batch_numel * bst[0];
    batch_numel *= out_sizes[static_cast<size_t>(perm[i])];
  }
  for (size_t i = batch_dims; i < nd; ++i) out[static_cast<size_t>(perm[i])] = bst[1 + (i - batch_dims)];
  return out;
}

// dims (all, or all but the last) ordered by decreasing stride, stably (ATen's _sort_dims; std::sort over
// the few dims of a tensor is an insertion sort, stable too).
void sort_by_stride(Shape& dims, const Shape& strides, bool exclude_last) {
  std::stable_sort(dims.begin(), dims.end() - (exclude_last ? 1 : 0), [&](int64_t a, int64_t b) {
    return strides[static_cast<size_t>(a)] > strides[static_cast<size_t>(b)];
  });
}

// self's elements as complex, row-major.
std::vector<Cd> load_all(const Tensor& self) {
  std::vector<Cd> buf(static_cast<size_t>(self.numel()));
  for (int64_t i = 0; i < self.numel(); ++i)
    buf[static_cast<size_t>(i)] = load_c(self, offset_of(i, self.sizes(), self.strides()));
  return buf;
}

// Writes the row-major values of `sizes` (a prefix box of buf's shape `full`) to out.
void store_box(Tensor& out, const std::vector<Cd>& buf, const Shape& full, double scale) {
  const Shape fst = Tensor::contiguous_strides(full);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t rem = i, src = 0;
    for (size_t d = out.sizes().size(); d-- > 0;) {
      src += (rem % out.sizes()[d]) * fst[d];
      rem /= out.sizes()[d];
    }
    store_c(out, offset_of(i, out.sizes(), out.strides()), buf[static_cast<size_t>(src)] * scale);
  }
}

}  // namespace

Shape fft_wrap_dims(const Tensor& self, const Shape& dim) {
  if (dim.empty()) throw Error("dim is empty; expected at least one dimension to transform");
  Shape d;
  for (int64_t x : dim) {
    const int64_t w = wrap_dim(x, self.dim(), "dim");
    if (std::find(d.begin(), d.end(), w) != d.end()) throw Error("dim " + str(dim) + " repeats a dimension");
    if (self.sizes()[static_cast<size_t>(w)] < 1)
      throw Error("dimension " + std::to_string(w) + " of self has size 0; a transform needs at least one point");
    d.push_back(w);
  }
  return d;
}

double fft_norm_scale(const Shape& sizes, const Shape& dims, int64_t normalization) {
  double n = 1.0;
  for (int64_t d : dims) n *= static_cast<double>(sizes[static_cast<size_t>(d)]);
  switch (normalization) {
    case 0: return 1.0;
    case 1: return n > 0 ? 1.0 / std::sqrt(n) : 1.0;
    case 2: return n > 0 ? 1.0 / n : 1.0;
    default:
      throw Error("normalization " + std::to_string(normalization) + " is not one of ATen's fft_norm_mode values "
                  "(0: none, 1: by_root_n, 2: by_n)");
  }
}

Shape cufft_r2c_strides(const Shape& sizes, const Shape& strides, const Shape& dims, bool onesided) {
  const auto last = static_cast<size_t>(dims.back());
  Shape half = sizes;
  half[last] = sizes[last] / 2 + 1;
  const Shape& out_sizes = onesided ? half : sizes;
  const Shape& in = strides;
  const bool one_pass = dims.size() <= kCufftMaxDims && !(dims.size() >= 2 && dims[0] == 0 && dims[1] == 1);
  if (one_pass) return exec_fft_strides(in, out_sizes, dims);
  // the last dim as a 1-d real transform, then the others as complex transforms of at most three dims,
  // each pass taking the dims of smallest stride in the previous pass's output
  Shape cur = exec_fft_strides(in, half, {dims.back()});
  Shape rest(dims.begin(), dims.end() - 1);
  while (!rest.empty()) {
    sort_by_stride(rest, cur, false);
    const size_t take = std::min(rest.size(), kCufftMaxDims);
    cur = exec_fft_strides(cur, half, Shape(rest.end() - static_cast<std::ptrdiff_t>(take), rest.end()));
    rest.resize(rest.size() - take);
  }
  // two-sided: the halves are joined in a new contiguous tensor, unless the half already has every bin (n <= 2)
  return onesided || half[last] == sizes[last] ? cur : Tensor::contiguous_strides(sizes);
}

Shape cufft_c2c_strides(const Shape& sizes, const Shape& strides, const Shape& dims) {
  Shape cur = strides, rest = dims;
  while (!rest.empty()) {
    sort_by_stride(rest, cur, false);
    const size_t take = std::min(rest.size(), kCufftMaxDims);
    cur = exec_fft_strides(cur, sizes, Shape(rest.end() - static_cast<std::ptrdiff_t>(take), rest.end()));
    rest.resize(rest.size() - take);
  }
  return cur;
}

Tensor* fft_r2c(const Tensor& self, const Shape& dim, int64_t normalization, bool onesided) {
  check_cpu(self, "self");
  if (self.dtype() != kFloat32 && self.dtype() != kFloat64)
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected float32 or float64");
  Shape dims = fft_wrap_dims(self, dim);
  sort_by_stride(dims, self.strides(), true);
  const double scale = fft_norm_scale(self.sizes(), dims, normalization);
  Shape out_sizes = self.sizes();
  const auto last = static_cast<size_t>(dims.back());
  if (onesided) out_sizes[last] = self.sizes()[last] / 2 + 1;
  std::unique_ptr<Tensor> out(new_strided(self.dtype() == kFloat32 ? kComplex64 : kComplex128, out_sizes,
                                          exec_fft_strides(self.strides(), out_sizes, dims)));
  std::vector<Cd> buf = load_all(self);
  transform(buf, self.sizes(), dims, -1);
  // A real signal's spectrum is conjugate-symmetric: the bins whose index is 0 or n/2 in every transformed
  // dim equal their own conjugate, so are real. Give them an imaginary part of exactly 0, as a real FFT
  // does, not the transform's rounding noise (angle() of a negative such bin is then pi, as with ATen).
  const Shape cst = Tensor::contiguous_strides(self.sizes());
  for (int64_t i = 0; i < self.numel(); ++i) {
    bool self_conjugate = true;
    for (int64_t d : dims) {
      const auto u = static_cast<size_t>(d);
      const int64_t k = (i / cst[u]) % self.sizes()[u], n = self.sizes()[u];
      if (k != 0 && !(n % 2 == 0 && k == n / 2)) {
        self_conjugate = false;
        break;
      }
    }
    if (self_conjugate) buf[static_cast<size_t>(i)].imag(0.0);
  }
  store_box(*out, buf, self.sizes(), scale);
  return out.release();
}

Tensor* fft_c2c(const Tensor& self, const Shape& dim, int64_t normalization, bool forward) {
  check_cpu(self, "self");
  if (!is_complex(self.dtype()))
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; expected complex64 or complex128");
  if (dim.empty()) {  // ATen: a copy in self's layout
    std::unique_ptr<Tensor> out(new_strided(self.dtype(), self.sizes(), empty_like_strides(self)));
    store_box(*out, load_all(self), self.sizes(), fft_norm_scale(self.sizes(), {}, normalization));
    return out.release();
  }
  Shape dims = fft_wrap_dims(self, dim);
  sort_by_stride(dims, self.strides(), false);
  const double scale = fft_norm_scale(self.sizes(), dims, normalization);
  std::unique_ptr<Tensor> out(
      new_strided(self.dtype(), self.sizes(), exec_fft_strides(self.strides(), self.sizes(), dims)));
  std::vector<Cd> buf = load_all(self);
  transform(buf, self.sizes(), dims, forward ? -1 : 1);
  store_box(*out, buf, self.sizes(), scale);
  return out.release();
}

Tensor* complex_abs_or_angle(bool angle, const Tensor& self) {
  check_cpu(self, "self");
  const int32_t dt = self.dtype();
  if (!is_complex(dt) && !is_floating(dt))
    throw Error(std::string("self has dtype ") + dtype_name(dt) + "; expected a complex or floating dtype");
  const int32_t out_dt = dt == kComplex64 ? kFloat32 : dt == kComplex128 ? kFloat64 : dt;
  std::unique_ptr<Tensor> out(new_strided(out_dt, self.sizes(), empty_like_strides(self)));
  for (int64_t i = 0; i < self.numel(); ++i) {
    const Cd v = load_c(self, offset_of(i, self.sizes(), self.strides()));
    double r;
    if (!angle) {
      r = is_complex(dt) ? std::abs(v) : std::fabs(v.real());
    } else if (is_complex(dt)) {
      r = std::arg(v);
    } else {  // ATen's angle of a real number: 0, or pi for negatives; NaN stays NaN
      r = std::isnan(v.real()) ? v.real() : (v.real() < 0 ? kPi : 0.0);
    }
    store_f(out->data_ptr(), out_dt, offset_of(i, out->sizes(), out->strides()), r);
  }
  return out.release();
}

Tensor* permute(const Tensor& self, const Shape& dims) {
  if (static_cast<int64_t>(dims.size()) != self.dim())
    throw Error("dims " + str(dims) + " has " + std::to_string(dims.size()) + " entries; self has " +
                std::to_string(self.dim()) + " dimensions");
  Shape sizes, strides;
  std::vector<bool> seen(dims.size(), false);
  for (int64_t x : dims) {
    const auto d = static_cast<size_t>(wrap_dim(x, self.dim(), "dims entry"));
    if (seen[d]) throw Error("dims " + str(dims) + " repeats a dimension");
    seen[d] = true;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  return self.alias(sizes, strides, self.storage_offset());
}

Tensor* view_as_real(const Tensor& self) {
  if (!is_complex(self.dtype()))
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) + "; view_as_real takes a complex tensor");
  Shape sizes = self.sizes(), strides;
  for (int64_t s : self.strides()) strides.push_back(2 * s);
  sizes.push_back(2);
  strides.push_back(1);
  return self.alias_as(self.dtype() == kComplex64 ? kFloat32 : kFloat64, sizes, strides, 2 * self.storage_offset());
}

Tensor* view_as_complex(const Tensor& self) {
  if (self.dtype() != kFloat32 && self.dtype() != kFloat64)
    throw Error(std::string("self has dtype ") + dtype_name(self.dtype()) +
                "; view_as_complex takes float32 or float64");
  if (self.dim() == 0 || self.sizes().back() != 2 || self.strides().back() != 1)
    throw Error("self has sizes " + str(self.sizes()) + " and strides " + str(self.strides()) +
                "; view_as_complex needs a last dimension of size 2 and stride 1");
  Shape sizes(self.sizes().begin(), self.sizes().end() - 1), strides;
  for (size_t d = 0; d + 1 < self.strides().size(); ++d) {
    if (self.strides()[d] % 2 != 0) throw Error("self has strides " + str(self.strides()) + "; view_as_complex needs "
                                                "every stride but the last to be even");
    strides.push_back(self.strides()[d] / 2);
  }
  if (self.storage_offset() % 2 != 0)
    throw Error("self has storage offset " + std::to_string(self.storage_offset()) + "; view_as_complex needs it even");
  return self.alias_as(self.dtype() == kFloat32 ? kComplex64 : kComplex128, sizes, strides, self.storage_offset() / 2);
}

}  // namespace ops
}  // namespace aoti_host
