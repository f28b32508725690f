#include "shims/cuda/ops/op_util.h"

namespace aoti_host {
namespace cuda {

LineSpec make_lines(const Shape& sizes, int64_t dim, const std::vector<const Shape*>& strides) {
  LineSpec s{};
  if (sizes.empty()) {
    s.nd = 0, s.lines = 1, s.n = 1;
    for (int k = 0; k < 3; ++k) s.step[k] = 1;
    return s;
  }
  if (sizes.size() > static_cast<size_t>(cu::kMaxDims))
    throw Error("tensors of more than " + std::to_string(cu::kMaxDims) + " dimensions are not supported");
  s.n = sizes[static_cast<size_t>(dim)];
  s.lines = 1;
  int o = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (static_cast<int64_t>(d) == dim) continue;
    s.sizes[o] = sizes[d];
    for (size_t k = 0; k < strides.size(); ++k) s.strides[k][o] = (*strides[k])[d];
    s.lines *= sizes[d];
    ++o;
  }
  s.nd = o;
  for (size_t k = 0; k < strides.size(); ++k) s.step[k] = (*strides[k])[static_cast<size_t>(dim)];
  return s;
}

}  // namespace cuda
}  // namespace aoti_host
