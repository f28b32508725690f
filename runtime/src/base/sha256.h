// SHA-256 (FIPS 180-4): the content address of plugins loaded from a package. The CRC-32 a zip declares
// can be forged to match any bytes; a SHA-256 can't. Uses the CPU's SHA extensions when it has them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aoti_host {

class Sha256 {
 public:
  // use_hardware=false: the portable code even where SHA-NI is available (tests compare the two).
  explicit Sha256(bool use_hardware = true);
  void update(const void* data, size_t size);
  // The 32-byte digest; the object must not be updated afterwards.
  void finish(unsigned char out[32]);
  std::string hex();  // finish() as 64 lowercase hex digits

  // Whether blocks are hashed with the SHA-NI instructions (decided once from CPUID).
  static bool hardware();

 private:
  void blocks(const unsigned char* p, size_t n);

  uint32_t state_[8];
  bool hw_;
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t size);

}  // namespace aoti_host
