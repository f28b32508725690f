// ATen's memory-format predicates on strides.
#include <cstdint>
#include <vector>

#include "../cpu_kernels.h"
#include "strided.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

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

}  // namespace cpu
}  // namespace aoti_host
