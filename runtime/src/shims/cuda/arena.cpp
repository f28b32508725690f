#include "shims/cuda/arena.h"

#include <cuda_runtime_api.h>

#include "aoti_host/log.h"
#include "shims/cuda/cuda_util.h"

namespace aoti_host {
namespace cuda {

constexpr size_t kAlign = 256;  // what cudaMalloc guarantees; kernels may vectorise on it
constexpr size_t kMinBlock = size_t{2} << 20;

namespace {
// Blocks belong to the arena's device, whatever device is current on the calling thread.
void* malloc_on(int device, size_t bytes) {
  const OnDevice on(device);
  void* p = nullptr;
  AOTI_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
}  // namespace

Arena::~Arena() {
  for (auto& b : blocks_) cudaFree(b.base);
}

void Arena::reserve(size_t bytes) {
  if (bytes == 0) return;
  auto* p = static_cast<char*>(malloc_on(device_, bytes));
  blocks_.push_back(Block{p, bytes, 0});
}

void* Arena::allocate(size_t bytes) {
  const size_t n = ((bytes == 0 ? 1 : bytes) + kAlign - 1) / kAlign * kAlign;
  for (auto& b : blocks_) {
    if (b.size - b.used >= n) {
      void* p = b.base + b.used;
      b.used += n;
      used_ += n;
      return p;
    }
  }
  // Capture runs in relaxed mode, where cudaMalloc is allowed; it is not recorded in the graph.
  const size_t size = n > kMinBlock ? n : kMinBlock;
  auto* p = static_cast<char*>(malloc_on(device_, size));
  blocks_.push_back(Block{p, size, n});
  used_ += n;
  return p;
}

bool Arena::defer_free(void* ptr, int device) {
  auto* c = static_cast<char*>(ptr);
  for (const auto& b : blocks_)
    if (c >= b.base && c < b.base + b.size) return true;
  deferred_.emplace_back(ptr, device);
  return true;
}

void Arena::release_deferred() {
  for (auto& [p, d] : deferred_) release(p, d);
  deferred_.clear();
}

}  // namespace cuda
}  // namespace aoti_host
