// libFuzzer target: the .npy reader (read_npy) on arbitrary bytes. read_npy takes a path, so each input is
// written to one anonymous in-memory file (memfd) and read through /proc/self/fd/N: no disk, no temp name,
// and the reader's own file handling runs as it does on a user's input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "../tools/npy.h"

namespace {

const std::string& input_path() {
  static const std::string path = [] {
    const int fd = ::memfd_create("fuzz-npy", MFD_CLOEXEC);
    if (fd < 0) {
      std::perror("fuzz_npy: memfd_create");
      std::abort();
    }
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  return path;
}

int input_fd() { return std::stoi(input_path().substr(sizeof("/proc/self/fd/") - 1)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  const int fd = input_fd();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("fuzz_npy: writing the memfd");
    std::abort();
  }
  try {
    const aoti_host::NpyArray a = aoti_host::read_npy(path);
    // What a caller relies on: one stride per dim, and exactly numel * itemsize bytes of data.
    if (a.strides.size() != a.sizes.size()) __builtin_trap();
    size_t numel = 1;
    for (int64_t d : a.sizes) {
      if (d < 0) __builtin_trap();
      numel *= static_cast<size_t>(d);
    }
    const aoti_host::dtypes::Info* info = aoti_host::dtypes::find(a.dtype);  // the spec's table, bfloat16 too
    if (info == nullptr || a.data.size() != numel * info->itemsize) __builtin_trap();
  } catch (const aoti_host::Error& e) {
    if (std::string(e.what()).rfind(path, 0) != 0) __builtin_trap();  // a refusal names the file first
  }
  return 0;
}
