// What the loader needs to know about a plugin before dlopen runs its static initializers:
// its DT_NEEDED list and the symbols it imports. ELF64 little-endian, read through section headers.
#pragma once

#include <string>
#include <vector>

namespace aoti_host {

struct ElfImports {
  bool ok = false;              // false: not an ELF64 LE shared object we could read (reason in error)
  std::string error;
  std::vector<std::string> needed;
  std::vector<std::string> undefined;       // non-weak undefined dynamic symbols
  std::vector<std::string> weak_undefined;  // optional ones
};

ElfImports scan_elf_imports(const std::string& path);

}  // namespace aoti_host
