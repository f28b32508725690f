// libFuzzer target: the ELF import scan (elf_scan.h) on an image in memory, as the loader runs it on a plugin
// before dlopen. A bad image must come back as ok=false with a reason, never as a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/elf_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const aoti_host::ElfImports r = aoti_host::scan_elf_imports(data, size, "fuzz input");
  if (!r.ok) {
    if (r.error.rfind("fuzz input: ", 0) != 0) __builtin_trap();  // a refusal names the image and the defect
    return 0;
  }
  size_t total = 0;
  for (const auto* list : {&r.needed, &r.undefined, &r.weak_undefined})
    for (const auto& s : *list) total += s.size();
  // Every name is a copy of bytes of the input, so the scan can't report more than a bounded multiple of it.
  if (total > 16 * size + (size_t(1) << 20)) __builtin_trap();
  return 0;
}
