// CRC-32 (the zip / zlib polynomial 0xEDB88320, reflected), fast enough to check a gigabyte member
// at load time: carry-less multiplication folding where the CPU has it (x86-64 PCLMULQDQ), else
// slicing-by-16 tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace aoti_host {

// The CRC-32 of `size` bytes at `data`, continuing from `crc` (0 to start): crc32(crc32(0, a), b) is
// the CRC of a followed by b, as zlib's crc32().
uint32_t crc32(uint32_t crc, const unsigned char* data, size_t size);

}  // namespace aoti_host
