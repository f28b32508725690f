// Embedding bags (embedding.cpp).
#include "shims/cuda/kernel_util.h"

namespace aoti_host {
namespace cuda {
namespace {

template <class I>
__device__ __forceinline__ int64_t ldi(const void* p, int64_t i) {
  return static_cast<int64_t>(static_cast<const I*>(p)[i]);
}

template <class T, class I>
__global__ void embedding_bag_kernel(const T* w, const void* indices, const void* offsets, const T* psw, T* out,
                                     I* offset2bag, I* bag_size, I* max_indices, int* bad, EmbeddingBagSpec s) {
  using A = typename Acc<T>::type;
  GRID_LOOP(e, s.num_bags * s.features) {
    const int64_t bag = e / s.features, f = e % s.features;
    auto off_at = [&](int64_t b) {
      return s.offsets_int32 ? ldi<int32_t>(offsets, b * s.off_step) : ldi<int64_t>(offsets, b * s.off_step);
    };
    const int64_t begin = off_at(bag);
    const int64_t end = bag < s.num_bags - 1 ? off_at(bag + 1) : s.num_indices;
    A acc = A(0);
    int64_t count = 0, arg = -1;
    for (int64_t p = begin; p < end && p < s.num_indices; ++p) {
      if (p < 0) continue;
      const int64_t row = s.indices_int32 ? ldi<int32_t>(indices, p * s.idx_step) : ldi<int64_t>(indices, p * s.idx_step);
      if (f == 0) offset2bag[p] = static_cast<I>(bag);
      if (row == s.padding_idx) continue;
      if (row < 0 || row >= s.num_weights) {
        if (bad != nullptr) *bad = 1;
        continue;
      }
      A x = ld(w + row * s.w_st[0] + f * s.w_st[1]);
      if (s.mode == 2) {
        if (arg < 0 || x > acc) {
          acc = x;
          arg = row;
        }
      } else {
        if (psw != nullptr) x = x * ld(psw + p * s.psw_step);
        acc += x;
      }
      ++count;
    }
    if (s.mode == 1 && count > 0) acc = acc / static_cast<A>(count);
    out[bag * s.out_st[0] + f * s.out_st[1]] = cvt<T, A>(acc);
    if (f == 0) bag_size[bag] = static_cast<I>(count);
    if (s.mode == 2) max_indices[bag * s.features + f] = static_cast<I>(arg);
  }
}

}  // namespace

void launch_embedding_bag(int32_t dtype, const void* weight, const void* indices, const void* offsets,
                          const void* per_sample_weights, void* out, void* offset2bag, void* bag_size,
                          void* max_indices, int* bad_index, const EmbeddingBagSpec& spec, cudaStream_t stream) {
  const int64_t work = spec.num_bags * spec.features;
  if (work == 0) return;
  dispatch_float(dtype, "_embedding_bag", [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto itag) {
      using I = decltype(itag);
      embedding_bag_kernel<T, I><<<grid_for(work, 256), 256, 0, stream>>>(
          static_cast<const T*>(weight), indices, offsets, static_cast<const T*>(per_sample_weights),
          static_cast<T*>(out), static_cast<I*>(offset2bag), static_cast<I*>(bag_size), static_cast<I*>(max_indices),
          bad_index, spec);
    };
    if (spec.index_dtype == dtype_code::kInt32) {
      go(int32_t{});
    } else {
      go(int64_t{});
    }
  });
  AOTI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace aoti_host
