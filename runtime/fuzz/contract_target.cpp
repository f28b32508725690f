// libFuzzer target: the contract parser (contract.h) on arbitrary text, as the runtime reads a package's
// extra/aoti_toolchain_contract.json. A refusal is aoti_host::Error naming where the text came from.
#include <cstddef>
#include <cstdint>
#include <string>

#include "aoti_host/error.h"
#include "host/contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const aoti_host::Contract c = aoti_host::parse_contract(text, "fuzz.pt2:contract.json");
    (void)c;
  } catch (const aoti_host::Error& e) {
    if (std::string(e.what()).find("fuzz.pt2") == std::string::npos) __builtin_trap();
  }
  return 0;
}
