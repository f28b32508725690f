// Sorting lines along a dimension (sort.cpp).
#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

// a before b in the sorted order (NaN greatest; ties by position, so the order is stable).
template <class A>
__device__ __forceinline__ bool before(A a, int64_t ia, A b, int64_t ib, bool desc) {
  const bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) {
    if (na && nb) return ia < ib;
    return desc ? na : nb;  // NaN first when descending, last when ascending
  }
  if (a == b) return ia < ib;
  return desc ? a > b : a < b;
}

constexpr int kSortBlock = 256;

// Rank sort: block (line, chunk of 256 elements); each thread counts the line's elements ordered
// before its own, streaming the line through shared memory. O(n^2) per line, parallel over elements.
template <class T>
__global__ void __launch_bounds__(kSortBlock)
    sort_kernel(const T* in, T* values, int64_t* indices, LineSpec s, int64_t keep, bool desc) {
  using A = typename Acc<T>::type;
  __shared__ A tile[kSortBlock];
  const int64_t line = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;
  if (line >= s.lines) return;
  const T* src = in + line_offset(s, 0, line);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSortBlock + threadIdx.x;
  const bool mine = j < s.n;
  const A x = mine ? ld(src + j * s.step[0]) : A(0);
  int64_t rank = 0;
  for (int64_t t0 = 0; t0 < s.n; t0 += kSortBlock) {
    __syncthreads();
    if (t0 + threadIdx.x < s.n) tile[threadIdx.x] = ld(src + (t0 + threadIdx.x) * s.step[0]);
    __syncthreads();
    if (!mine) continue;
    const int64_t tn = s.n - t0 < kSortBlock ? s.n - t0 : kSortBlock;
    for (int64_t u = 0; u < tn; ++u) rank += before(tile[u], t0 + u, x, j, desc) ? 1 : 0;
  }
  if (mine && rank < keep) {
    values[line_offset(s, 1, line) + rank * s.step[1]] = src[j * s.step[0]];
    indices[line_offset(s, 2, line) + rank * s.step[2]] = j;
  }
}

}  // namespace

namespace {
dim3 line_grid(int64_t lines, int64_t n) {
  const int64_t chunks = (n + kSortBlock - 1) / kSortBlock;
  if (chunks > 0x7fffffff) throw Error("sort on cuda: line of " + std::to_string(n) + " elements is too long");
  const int64_t y = lines < 65535 ? lines : 65535;
  const int64_t z = (lines + y - 1) / y;
  if (z > 65535) throw Error("sort on cuda: " + std::to_string(lines) + " lines are too many");
  return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(y), static_cast<unsigned>(z));
}
}  // namespace

void launch_sort(int32_t dtype, const void* in, void* values, int64_t* indices, const LineSpec& spec, int64_t keep,
                 bool descending, cudaStream_t stream) {
  if (spec.lines == 0 || spec.n == 0 || keep == 0) return;
  const dim3 grid = line_grid(spec.lines, spec.n);
  dispatch_real(dtype, "sort", [&](auto tag) {
    using T = decltype(tag);
    sort_kernel<T><<<grid, kSortBlock, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(values), indices,
                                                     spec, keep, descending);
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace aoti_host
