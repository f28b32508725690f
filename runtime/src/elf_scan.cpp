#include "elf_scan.h"

#include <elf.h>

#include <cstring>

#include "mapped_file.h"
#include "aoti_host/error.h"

namespace aoti_host {

ElfImports scan_elf_imports(const std::string& path) {
  ElfImports out;
  try {
    MappedFile f(path);
    const unsigned char* d = f.data();
    const size_t n = f.size();
    auto in_bounds = [n](uint64_t off, uint64_t len) { return off <= n && len <= n - off; };
    if (n < sizeof(Elf64_Ehdr) || std::memcmp(d, ELFMAG, SELFMAG) != 0) {
      out.error = "not an ELF file";
      return out;
    }
    if (d[EI_CLASS] != ELFCLASS64 || d[EI_DATA] != ELFDATA2LSB) {
      out.error = "not a 64-bit little-endian ELF file";
      return out;
    }
    Elf64_Ehdr eh;
    std::memcpy(&eh, d, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !in_bounds(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr))) {
      out.error = "section headers missing or truncated";
      return out;
    }
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    std::memcpy(sh.data(), d + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
    auto str_at = [&](const Elf64_Shdr& strtab, uint64_t off) -> std::string {
      if (off >= strtab.sh_size || !in_bounds(strtab.sh_offset, strtab.sh_size)) return {};
      const char* s = reinterpret_cast<const char*>(d + strtab.sh_offset + off);
      return std::string(s, strnlen(s, strtab.sh_size - off));
    };
    for (const auto& s : sh) {
      if (s.sh_link >= sh.size() || !in_bounds(s.sh_offset, s.sh_size)) continue;
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
            if (name == "_ZNSt6locale7classicEv" || name == "__cxa_throw" || name == "__gxx_personality_v0" ||
                name == "_ZSt4cerr")
              out.defines_cxx_runtime = true;
            continue;
          }
          std::string name = str_at(strtab, sym.st_name);
          if (name.empty()) continue;
          (ELF64_ST_BIND(sym.st_info) == STB_WEAK ? out.weak_undefined : out.undefined).push_back(std::move(name));
        }
      }
    }
    out.ok = true;
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace aoti_host
