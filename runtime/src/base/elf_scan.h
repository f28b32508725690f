// What the loader needs to know about a plugin before dlopen runs its static initializers:
// its DT_NEEDED list and the symbols it imports. ELF64 little-endian, read through section headers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace aoti_host {

struct ElfImports {
  bool ok = false;              // false: not an ELF64 LE shared object we could read (reason in error)
  std::string error;
  std::vector<std::string> needed;
  std::vector<std::string> undefined;       // non-weak undefined dynamic symbols
  std::vector<std::string> weak_undefined;  // optional ones
  // A C++ runtime linked into the plugin and exported (torch 2.11's CUDA plugins: a static libstdc++ with
  // ~2,485 exported std:: symbols, 120 of them GNU_UNIQUE): set when it defines a symbol only a C++
  // runtime defines (std::locale::classic, __cxa_throw, __gxx_personality_v0, std::cerr).
  bool defines_cxx_runtime = false;
  size_t exported_std = 0;     // defined dynamic std:: symbols
  size_t exported_unique = 0;  // defined GNU_UNIQUE dynamic symbols (bound process-wide by the loader)
};

ElfImports scan_elf_imports(const std::string& path);
// The same scan of an ELF image in memory (a package member, a fuzz input). A non-empty `label` (what the
// image is: "pkg.pt2:member.so") starts `error`; the path overload leaves it empty, its callers name the file.
ElfImports scan_elf_imports(const unsigned char* data, size_t size, const std::string& label);

}  // namespace aoti_host
