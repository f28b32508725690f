// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0), little-endian data only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

struct NpyArray {
  int32_t dtype = -1;               // torch ScalarType code
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;     // elements; Fortran-order files give column-major strides
  std::vector<unsigned char> data;  // raw bytes as stored in the file
};

// Throws aoti_host::Error naming the file and what is wrong with it.
NpyArray read_npy(const std::string& path);

// Writes `data` (laid out with `strides`, in elements) in logical (C) order, atomically.
void write_npy(const std::string& path, int32_t dtype, const std::vector<int64_t>& sizes,
               const std::vector<int64_t>& strides, const void* data);

}  // namespace aoti_host
