// fft_layout_probe: prints the output strides the CUDA FFT shims give (ops::cufft_r2c_strides and
// cufft_c2c_strides, pure host code), one case per stdin line:
//     r2c|c2c ONESIDED ND SIZE... STRIDE... NDIMS DIM...
// answered by one line: the strides, space-separated, or "error: MESSAGE". Exits 0 at end of input, 2 on a
// malformed line. tests/integration/test_fft_layout.py compares it with torch's meta functions, which record
// the layout a CUDA plugin reads the result with, on any machine (no GPU needed).
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "shims/ops/ops.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string kind;
    int onesided = 0;
    size_t nd = 0, ndims = 0;
    if (!(in >> kind >> onesided >> nd) || (kind != "r2c" && kind != "c2c") || nd > 64) {
      std::fprintf(stderr, "fft_layout_probe: malformed line: %s\n", line.c_str());
      return 2;
    }
    std::vector<int64_t> sizes(nd), strides(nd), dims;
    for (auto& v : sizes) in >> v;
    for (auto& v : strides) in >> v;
    in >> ndims;
    dims.resize(ndims > 64 ? 0 : ndims);
    for (auto& v : dims) in >> v;
    if (!in || ndims > 64) {
      std::fprintf(stderr, "fft_layout_probe: malformed line: %s\n", line.c_str());
      return 2;
    }
    try {
      const std::vector<int64_t> out = kind == "r2c"
                                           ? aoti_host::ops::cufft_r2c_strides(sizes, strides, dims, onesided != 0)
                                           : aoti_host::ops::cufft_c2c_strides(sizes, strides, dims);
      for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(out[i]));
      std::printf("\n");
    } catch (const aoti_host::Error& e) {
      std::printf("error: %s\n", e.what());
    }
  }
  return 0;
}
