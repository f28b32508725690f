// Opening a file the user names as an input (a model, a weights blob, a .npy): only a regular file is
// read. The file is opened without blocking (a FIFO with no writer would otherwise hang open() or read()
// forever) and its type is taken from fstat on the same descriptor, so nothing can swap the file between
// the check and the read. Devices (/dev/zero would be read until memory runs out), FIFOs, sockets and
// directories are refused with the file's name and what it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aoti_host {

class InputFile {
 public:
  // Throws Error naming `path`, the `what` ("weights blob (--weights)", ".npy input", ...) and the
  // problem: AOTI_HOST_NOT_FOUND when it does not exist, AOTI_HOST_INVALID_ARGUMENT when it is not a
  // regular file or cannot be opened.
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // from fstat when opened
  const std::string& path() const { return path_; }

  // Reads exactly `n` bytes at `offset` into `out`; throws Error naming the file when it holds fewer
  // (it was truncated while being read) or the read fails.
  void read_at(uint64_t offset, void* out, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// What a file that is not a regular one is, for messages: "a FIFO (named pipe)", "a character device", ...
std::string file_type_name(unsigned mode);

}  // namespace aoti_host
