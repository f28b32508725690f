// A read-only memory mapping of a whole file (RAII). Weights blobs are used in place from it.
#pragma once

#include <cstddef>
#include <string>

namespace aoti_host {

class MappedFile {
 public:
  // Only a regular file is mapped (see input_file.h); throws Error naming the path and `what` it is.
  explicit MappedFile(const std::string& path, const std::string& what = "file");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace aoti_host
