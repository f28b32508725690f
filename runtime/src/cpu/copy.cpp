// aten::copy_ on the CPU: same-dtype copies row by row or as bytes, conversions through a wide type
// (complex ones through std::complex<double>: a real source gets imaginary part 0, a real destination the
// real part, as ATen's copy_ does).
#include <complex>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../cpu_kernels.h"
#include "strided.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

namespace {

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

bool is_complex(int32_t dt) { return dt == dtype_code::kComplex64 || dt == dtype_code::kComplex128; }

// A conversion where either side is complex64/complex128.
void copy_complex(Tensor& dst, const Tensor& src, const std::vector<int64_t>& sst) {
  using Cd = std::complex<double>;
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)}) {
    if (!is_complex(t->dtype())) require_supported(*t, t == &src ? "src" : "self");
  }
  std::vector<Cd> v(static_cast<size_t>(dst.numel()));
  if (is_complex(src.dtype())) {
    const bool single = src.dtype() == dtype_code::kComplex64;
    const char* base = static_cast<const char*>(src.data_ptr());
    for_each_offset(dst.sizes(), sst, [&](int64_t i, int64_t off) {
      if (single) {
        const float* p = reinterpret_cast<const float*>(base) + 2 * off;
        v[static_cast<size_t>(i)] = Cd(p[0], p[1]);
      } else {
        const double* p = reinterpret_cast<const double*>(base) + 2 * off;
        v[static_cast<size_t>(i)] = Cd(p[0], p[1]);
      }
    });
  } else {
    const std::vector<double> re = gather<double>(src, dst.sizes(), sst);
    for (size_t i = 0; i < re.size(); ++i) v[i] = Cd(re[i], 0.0);
  }
  if (!is_complex(dst.dtype())) {
    std::vector<double> re(v.size());
    for (size_t i = 0; i < v.size(); ++i) re[i] = v[i].real();
    scatter<double>(dst, re);
    return;
  }
  const bool single = dst.dtype() == dtype_code::kComplex64;
  char* base = static_cast<char*>(dst.data_ptr());
  for_each_offset(dst.sizes(), dst.strides(), [&](int64_t i, int64_t off) {
    const Cd c = v[static_cast<size_t>(i)];
    if (single) {
      float* p = reinterpret_cast<float*>(base) + 2 * off;
      p[0] = static_cast<float>(c.real()), p[1] = static_cast<float>(c.imag());
    } else {
      double* p = reinterpret_cast<double*>(base) + 2 * off;
      p[0] = c.real(), p[1] = c.imag();
    }
  });
}

}  // namespace

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
  if (is_complex(src.dtype()) || is_complex(dst.dtype())) return copy_complex(dst, src, sst);
  require_supported(src, "src");
  require_supported(dst, "self");
  if (is_integral(src.dtype()) && is_integral(dst.dtype())) {
    scatter<int64_t>(dst, gather<int64_t>(src, dst.sizes(), sst));
  } else {
    scatter<double>(dst, gather<double>(src, dst.sizes(), sst));
  }
}

}  // namespace cpu
}  // namespace aoti_host
