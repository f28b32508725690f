// aten::copy_ on the CPU: same-dtype copies row by row or as bytes, conversions through a wide type
// (complex ones through std::complex<double>: a real source gets imaginary part 0, a real destination the
// real part, as ATen's copy_ does).
#include <complex>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shims/cpu/strided.h"
#include "shims/cpu_kernels.h"

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

// A conversion where either side is complex64/complex128, staged so overlapping src/dst stay correct.
void copy_complex(Tensor& dst, const Tensor& src, const std::vector<int64_t>& sst) {
  if (!is_complex(src.dtype())) require_supported(src, "src");
  if (!is_complex(dst.dtype())) require_supported(dst, "self");
  std::vector<std::complex<double>> v(static_cast<size_t>(dst.numel()));
  const char* sb = static_cast<const char*>(src.data_ptr());
  const auto si = static_cast<int64_t>(src.itemsize());
  for_each_offset(dst.sizes(), sst,
                  [&](int64_t i, int64_t off) { v[static_cast<size_t>(i)] = load_complex(sb + off * si, src.dtype()); });
  char* db = static_cast<char*>(dst.data_ptr());
  const auto di = static_cast<int64_t>(dst.itemsize());
  for_each_offset(dst.sizes(), dst.strides(),
                  [&](int64_t i, int64_t off) { store_complex(db + off * di, dst.dtype(), v[static_cast<size_t>(i)]); });
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
