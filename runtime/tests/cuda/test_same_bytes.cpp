// cuda::same_bytes (the device-side comparison behind weight sharing's value check) on the GPU: equal and
// unequal ranges of many sizes (0, odd, around the 16-byte words, several MB) at aligned and unaligned
// addresses, a difference at the first, a middle and the last byte. Built only by the CUDA variant; run by
// tests/gpu/test_cuda_state.py. Exit 2 (not a pass) when no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "../check.h"
#include "aoti_host/cuda/cuda.h"

namespace {

unsigned char* dev(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) return nullptr;
  return static_cast<unsigned char*>(p);
}

bool put(unsigned char* d, const unsigned char* h, size_t n) {
  return n == 0 || cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess;
}

}  // namespace

int main() {
  if (aoti_host::cuda::device_count() == 0) {
    std::printf("no CUDA device visible\n");
    return 2;
  }
  const size_t sizes[] = {0, 1, 3, 15, 16, 17, 31, 32, 33, 255, 4095, 4096, 4097, 65537, (size_t{3} << 20) + 5};
  const size_t offsets[][2] = {{0, 0}, {1, 1}, {0, 1}, {3, 7}, {16, 16}, {8, 0}};
  const size_t max_n = (size_t{3} << 20) + 5, pad = 32;
  std::vector<unsigned char> h(max_n);
  for (size_t i = 0; i < max_n; ++i) h[i] = static_cast<unsigned char>((i * 131 + 7) & 255);
  unsigned char* a = dev(max_n + pad);
  unsigned char* b = dev(max_n + pad);
  EXPECT(a != nullptr && b != nullptr);
  if (a == nullptr || b == nullptr) return 1;
  size_t cases = 0;
  for (size_t n : sizes) {
    for (const auto& off : offsets) {
      unsigned char* pa = a + off[0];
      unsigned char* pb = b + off[1];
      EXPECT(put(pa, h.data(), n) && put(pb, h.data(), n));
      EXPECT(aoti_host::cuda::same_bytes(pa, pb, n, 0));
      EXPECT(aoti_host::cuda::same_bytes(pa, pa, n, 0));
      if (n == 0) continue;
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        const unsigned char flipped = static_cast<unsigned char>(h[at] ^ 0x40);
        EXPECT(cudaMemcpy(pb + at, &flipped, 1, cudaMemcpyHostToDevice) == cudaSuccess);
        if (aoti_host::cuda::same_bytes(pa, pb, n, 0)) {
          std::printf("FAIL: %zu bytes at offsets %zu/%zu differing at byte %zu compare equal\n", n, off[0], off[1], at);
          ++g_failures;
        }
        EXPECT(cudaMemcpy(pb + at, &h[at], 1, cudaMemcpyHostToDevice) == cudaSuccess);
        ++cases;
      }
      EXPECT(aoti_host::cuda::same_bytes(pa, pb, n, 0));  // restored
    }
  }
  cudaFree(a);
  cudaFree(b);
  std::printf("%zu differing cases, %d failure(s)\n", cases, g_failures);
  return g_failures == 0 ? 0 : 1;
}
