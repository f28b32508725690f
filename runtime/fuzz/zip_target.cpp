// libFuzzer target: the package (zip) reader over an archive in memory: open it, then read every member
// (data() checks each member's CRC-32), as the runtime does with the members it uses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "aoti_host/error.h"
#include "base/zip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const aoti_host::ZipArchive zip(data, size, "fuzz.pt2");
    for (const aoti_host::ZipEntry& e : zip.entries()) {
      if (zip.find(e.name) == nullptr) __builtin_trap();
      try {
        const unsigned char* p = zip.data(e);
        // Every byte of a member the reader accepted lies inside the input.
        if (e.size > 0 && (p < data || p + e.size > data + size || p + e.size < p)) __builtin_trap();
        unsigned sum = 0;
        for (uint64_t k = 0; k < e.size; ++k) sum += p[k];
        volatile unsigned sink = sum;
        (void)sink;
      } catch (const aoti_host::Error& err) {
        if (std::string(err.what()).find("fuzz.pt2") == std::string::npos) __builtin_trap();
      }
    }
  } catch (const aoti_host::Error& err) {
    if (std::string(err.what()).find("fuzz.pt2") == std::string::npos) __builtin_trap();  // names the package
  }
  return 0;
}
