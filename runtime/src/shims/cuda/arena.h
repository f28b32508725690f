// The memory of one CUDA graph: while a thread captures, every device allocation it makes comes
// from here (bump allocation, never reused), so the addresses baked into the graph stay valid for the
// graph's lifetime; frees of pool memory during capture are deferred until capture ends.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace aoti_host {
namespace cuda {

class Arena {
 public:
  explicit Arena(int device) : device_(device) {}
  ~Arena();  // frees the blocks; the caller has synchronized the graph's stream
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void reserve(size_t bytes);
  void* allocate(size_t bytes);
  // true when the arena takes care of ptr: its own memory (freed with the arena) or pool memory freed
  // while capturing (queued for release_deferred()).
  bool defer_free(void* ptr, int device);
  void release_deferred();  // call with no arena set on the thread
  size_t bytes_used() const { return used_; }

 private:
  struct Block {
    char* base;
    size_t size;
    size_t used;
  };
  int device_;
  std::vector<Block> blocks_;
  std::vector<std::pair<void*, int>> deferred_;
  size_t used_ = 0;
};

}  // namespace cuda
}  // namespace aoti_host
