// ATen's memory-format predicates on strides.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "shims/cpu/strided.h"
#include "shims/cpu_kernels.h"

namespace aoti_host {
namespace cpu {

using namespace detail;

namespace {

// c10's is_channels_last_strides_2d/3d: strides non-decreasing along `order` (C, W, [D,] H... N, innermost
// first), the tensor non-empty, N111-like ambiguous tensors not channels-last.
bool channels_last_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, size_t rank,
                           std::initializer_list<int> order) {
  if (sizes.size() != rank || strides.size() != rank) return false;
  int64_t min = 0;
  if (strides[1] == 0) return false;
  for (int d : order) {
    if (sizes[d] == 0) return false;
    if (strides[d] < min) return false;
    // N111 and N11W-sliced tensors are ambiguous; ATen calls them contiguous.
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

}  // namespace

bool is_channels_last_strides_2d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  return channels_last_strides(sizes, strides, 4, {1, 3, 2, 0});
}

bool is_channels_last_strides_3d(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  return channels_last_strides(sizes, strides, 5, {1, 4, 3, 2, 0});
}

namespace detail {

// c10's compute_non_overlapping_and_dense.
bool non_overlapping_and_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  const size_t n = sizes.size();
  if (n == 0) return true;
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

}  // namespace detail
}  // namespace cpu
}  // namespace aoti_host
