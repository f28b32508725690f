#include "base/elf_scan.h"

#include <elf.h>

#include <cstring>

#include "aoti_host/error.h"
#include "aoti_host/providers.h"
#include "base/mapped_file.h"

namespace aoti_host {

ElfImports scan_elf_imports(const std::string& path) {
  try {
    MappedFile f(path);
    return scan_elf_imports(f.data(), f.size(), std::string());
  } catch (const Error& e) {
    ElfImports out;
    out.error = e.what();
    return out;
  }
}

ElfImports scan_elf_imports(const unsigned char* d, size_t n, const std::string& label) {
  ElfImports out;
  auto fail = [&](const std::string& why) {
    out.error = label.empty() ? why : label + ": " + why;
    return out;
  };
  auto in_bounds = [n](uint64_t off, uint64_t len) { return off <= n && len <= n - off; };
  if (d == nullptr || n < sizeof(Elf64_Ehdr) || std::memcmp(d, ELFMAG, SELFMAG) != 0) return fail("not an ELF file");
  if (d[EI_CLASS] != ELFCLASS64 || d[EI_DATA] != ELFDATA2LSB) return fail("not a 64-bit little-endian ELF file");
  Elf64_Ehdr eh;
  std::memcpy(&eh, d, sizeof eh);
  // e_shnum 0 is also how an object with >= 0xff00 sections says "the count is in section 0": neither has
  // a section table we read.
  if (eh.e_shnum == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_bounds(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr)))
    return fail("section headers missing or truncated");
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), d + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  // Names are copied out of the string table; symbols that share one long name could make that copying
  // quadratic in the file size, which no linker writes: bound what a scan may copy.
  const uint64_t name_budget = 16 * uint64_t(n) + (uint64_t(1) << 20);
  uint64_t name_bytes = 0;
  bool over_budget = false;
  auto str_at = [&](const Elf64_Shdr& strtab, uint64_t off) -> std::string {
    if (strtab.sh_type == SHT_NOBITS || off >= strtab.sh_size || !in_bounds(strtab.sh_offset, strtab.sh_size))
      return {};
    const char* s = reinterpret_cast<const char*>(d + strtab.sh_offset + off);
    const size_t len = strnlen(s, strtab.sh_size - off);
    name_bytes += len;
    if (name_bytes > name_budget) {
      over_budget = true;
      return {};
    }
    return std::string(s, len);
  };
  for (const auto& s : sh) {
    // SHT_NOBITS occupies no file bytes: its offset and size describe memory, not the file.
    if (s.sh_type == SHT_NOBITS || s.sh_link >= sh.size() || !in_bounds(s.sh_offset, s.sh_size)) continue;
    const Elf64_Shdr& strtab = sh[s.sh_link];
    if (s.sh_type == SHT_DYNAMIC) {
      for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn dyn;
        std::memcpy(&dyn, d + s.sh_offset + off, sizeof dyn);
        if (dyn.d_tag == DT_NULL) break;
        if (dyn.d_tag == DT_NEEDED) out.needed.push_back(str_at(strtab, dyn.d_un.d_val));
      }
    } else if (s.sh_type == SHT_DYNSYM) {
      for (uint64_t off = sizeof(Elf64_Sym); off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, d + s.sh_offset + off, sizeof sym);
        if (sym.st_shndx != SHN_UNDEF) {
          const std::string name = str_at(strtab, sym.st_name);
          if (name.rfind("_ZNSt", 0) == 0 || name.rfind("_ZSt", 0) == 0 || name.rfind("_ZNKSt", 0) == 0)
            ++out.exported_std;
          if (ELF64_ST_BIND(sym.st_info) == STB_GNU_UNIQUE) ++out.exported_unique;
          for (const char* core : providers::kCxxRuntimeCore)  // generated from toolchain/spec/abi.toml
            if (name == core) out.defines_cxx_runtime = true;
          continue;
        }
        std::string name = str_at(strtab, sym.st_name);
        if (name.empty()) continue;
        (ELF64_ST_BIND(sym.st_info) == STB_WEAK ? out.weak_undefined : out.undefined).push_back(std::move(name));
      }
    }
    if (over_budget) {
      ElfImports refused;
      refused.error = (label.empty() ? std::string() : label + ": ") + "symbol names overlap far more than a linker writes (" +
                      std::to_string(name_budget) + " bytes of names from a " + std::to_string(n) +
                      "-byte file); the file is corrupt or crafted";
      return refused;
    }
  }
  out.ok = true;
  return out;
}

}  // namespace aoti_host
