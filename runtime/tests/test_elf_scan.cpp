// Native tests of the ELF import scan (src/elf_scan.cpp) the loader runs on a plugin before dlopen: on
// images built here (exact DT_NEEDED, undefined, weak and exported-C++-runtime results), on a real shared
// object of the build (link_test_plugin.so, next to this test), and on hostile bytes: every truncation
// and random damage gives a result or an error naming the image, never a crash (the ASan variant runs
// this too), and symbol tables whose names overlap far beyond what a linker writes are refused.
#include <elf.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/elf_scan.h"
#include "check.h"

namespace {

using aoti_host::ElfImports;
using aoti_host::scan_elf_imports;
using Bytes = std::vector<unsigned char>;

struct Sym {
  std::string name;
  bool defined;
  unsigned char bind;  // STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
};

// A minimal ELF64 LE shared object: header, .dynstr, .dynsym, .dynamic, then the section headers
// (null, dynstr, dynsym, dynamic), as a linker lays them out.
Bytes make_elf(const std::vector<std::string>& needed, const std::vector<Sym>& syms) {
  std::string strtab(1, '\0');
  auto add = [&](const std::string& s) {
    const size_t at = strtab.size();
    strtab += s + '\0';
    return static_cast<uint32_t>(at);
  };
  std::vector<Elf64_Sym> dynsym(1);  // index 0: the null symbol
  for (const auto& s : syms) {
    Elf64_Sym e{};
    e.st_name = add(s.name);
    e.st_info = static_cast<unsigned char>(ELF64_ST_INFO(s.bind, STT_FUNC));
    e.st_shndx = s.defined ? 1 : SHN_UNDEF;
    dynsym.push_back(e);
  }
  std::vector<Elf64_Dyn> dynamic;
  for (const auto& n : needed) {
    Elf64_Dyn d{};
    d.d_tag = DT_NEEDED;
    d.d_un.d_val = add(n);
    dynamic.push_back(d);
  }
  dynamic.push_back(Elf64_Dyn{});  // DT_NULL

  Bytes out(sizeof(Elf64_Ehdr));
  auto append = [&](const void* p, size_t n) {
    const size_t at = out.size();
    out.insert(out.end(), static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n);
    return at;
  };
  const size_t str_off = append(strtab.data(), strtab.size());
  while (out.size() % 8) out.push_back(0);
  const size_t sym_off = append(dynsym.data(), dynsym.size() * sizeof(Elf64_Sym));
  const size_t dyn_off = append(dynamic.data(), dynamic.size() * sizeof(Elf64_Dyn));
  Elf64_Shdr sh[4] = {};
  sh[1].sh_type = SHT_STRTAB, sh[1].sh_offset = str_off, sh[1].sh_size = strtab.size();
  sh[2].sh_type = SHT_DYNSYM, sh[2].sh_offset = sym_off, sh[2].sh_size = dynsym.size() * sizeof(Elf64_Sym);
  sh[2].sh_link = 1, sh[2].sh_entsize = sizeof(Elf64_Sym);
  sh[3].sh_type = SHT_DYNAMIC, sh[3].sh_offset = dyn_off, sh[3].sh_size = dynamic.size() * sizeof(Elf64_Dyn);
  sh[3].sh_link = 1, sh[3].sh_entsize = sizeof(Elf64_Dyn);
  const size_t sh_off = append(sh, sizeof sh);
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64, eh.e_ident[EI_DATA] = ELFDATA2LSB, eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN, eh.e_machine = EM_X86_64, eh.e_version = EV_CURRENT;
  eh.e_shoff = sh_off, eh.e_ehsize = sizeof(Elf64_Ehdr), eh.e_shentsize = sizeof(Elf64_Shdr), eh.e_shnum = 4;
  std::memcpy(out.data(), &eh, sizeof eh);
  return out;
}

using Names = std::vector<std::string>;

void test_built_image() {
  const Bytes elf = make_elf({"libopenblas.so.0", "libc.so.6"},
                             {{"aoti_torch_check", false, STB_GLOBAL},
                              {"aoti_torch_cpu_addmm_out", false, STB_GLOBAL},
                              {"__cxa_finalize", false, STB_WEAK},
                              {"AOTInductorModelContainerCreateWithDevice", true, STB_GLOBAL},
                              {"_ZNSt6vectorIiE9push_backEv", true, STB_GNU_UNIQUE}});
  const ElfImports r = scan_elf_imports(elf.data(), elf.size(), "pkg.pt2:m.so");
  EXPECT(r.ok && r.error.empty());
  EXPECT(r.needed == (Names{"libopenblas.so.0", "libc.so.6"}));
  EXPECT(r.undefined == (Names{"aoti_torch_check", "aoti_torch_cpu_addmm_out"}));
  EXPECT(r.weak_undefined == (Names{"__cxa_finalize"}));
  EXPECT(!r.defines_cxx_runtime && r.exported_std == 1 && r.exported_unique == 1);

  // A plugin with a C++ runtime linked in and exported.
  const Bytes cxx = make_elf({}, {{"__cxa_throw", true, STB_GLOBAL}, {"_ZNSt6locale7classicEv", true, STB_GLOBAL}});
  const ElfImports c = scan_elf_imports(cxx.data(), cxx.size(), "");
  EXPECT(c.ok && c.defines_cxx_runtime && c.exported_std == 1 && c.undefined.empty());
}

void test_refusals() {
  const Bytes elf = make_elf({"libc.so.6"}, {{"aoti_torch_check", false, STB_GLOBAL}});
  auto expect_error = [](const Bytes& b, const std::string& why, const char* what) {
    const ElfImports r = scan_elf_imports(b.data(), b.size(), "pkg.pt2:m.so");
    if (r.ok || r.error.rfind("pkg.pt2:m.so: ", 0) != 0 || r.error.find(why) == std::string::npos) {
      std::printf("FAIL: %s: ok %d, error \"%s\", expected \"%s\"\n", what, r.ok, r.error.c_str(), why.c_str());
      ++g_failures;
    }
  };
  expect_error(Bytes(), "not an ELF file", "no bytes");
  expect_error(Bytes{'P', 'K', 3, 4}, "not an ELF file", "a zip");
  Bytes b = elf;
  b[EI_CLASS] = ELFCLASS32;
  expect_error(b, "not a 64-bit little-endian ELF file", "ELF32");
  b = elf;
  b[EI_DATA] = ELFDATA2MSB;
  expect_error(b, "not a 64-bit little-endian ELF file", "big-endian");
  b = elf;
  Elf64_Ehdr eh;
  std::memcpy(&eh, b.data(), sizeof eh);
  eh.e_shoff = UINT64_MAX - 8;  // offset + size wraps around
  std::memcpy(b.data(), &eh, sizeof eh);
  expect_error(b, "section headers missing or truncated", "section header offset overflow");
  expect_error(Bytes(elf.begin(), elf.end() - 1), "section headers missing or truncated", "one byte short");
  // The path overload names nothing itself (its callers name the file) and reads the same bytes.
  const ElfImports missing = scan_elf_imports("/nonexistent/dir/plugin.so");
  EXPECT(!missing.ok && missing.error.find("/nonexistent/dir/plugin.so") != std::string::npos);

  // Many symbols sharing one long name: copying every name would take time and memory quadratic in the
  // file; the scan refuses instead.
  std::vector<Sym> syms;
  const std::string long_name(60000, 'x');
  syms.push_back({long_name, false, STB_GLOBAL});
  Bytes crafted = make_elf({}, syms);
  // Append 4000 more symbol entries, all naming the same string, and point .dynsym at them.
  Elf64_Ehdr ch;
  std::memcpy(&ch, crafted.data(), sizeof ch);
  Elf64_Shdr sh[4];
  std::memcpy(sh, crafted.data() + ch.e_shoff, sizeof sh);
  Elf64_Sym one;
  std::memcpy(&one, crafted.data() + sh[2].sh_offset + sizeof(Elf64_Sym), sizeof one);
  const size_t table = crafted.size();
  crafted.resize(table + 4001 * sizeof(Elf64_Sym));
  for (size_t k = 1; k <= 4000; ++k) std::memcpy(crafted.data() + table + k * sizeof(Elf64_Sym), &one, sizeof one);
  sh[2].sh_offset = table, sh[2].sh_size = 4001 * sizeof(Elf64_Sym);
  std::memcpy(crafted.data() + ch.e_shoff, sh, sizeof sh);
  expect_error(crafted, "symbol names overlap far more than a linker writes", "overlapping names");
}

std::string sibling(const char* name) {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string();
  return dir.substr(0, dir.rfind('/') + 1) + name;
}

Bytes read_file(const std::string& path) {
  Bytes out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  unsigned char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

void test_real_plugin_and_damage() {
  // link_test_plugin.so references every shim of the spec, as a torch-built plugin does.
  const std::string path = sibling("link_test_plugin.so");
  const Bytes so = read_file(path);
  EXPECT(!so.empty());
  if (so.empty()) {
    std::printf("FAIL: %s is missing (built with the native tests)\n", path.c_str());
    return;
  }
  const ElfImports r = scan_elf_imports(path);
  EXPECT(r.ok && r.error.empty());
  auto has = [](const Names& v, const char* s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  EXPECT(has(r.undefined, "aoti_torch_check") && has(r.undefined, "aoti_torch_cpu_addmm_out"));
  EXPECT(!has(r.undefined, "aoti_link_test_refs") && !has(r.weak_undefined, "aoti_link_test_refs"));
  EXPECT(has(r.weak_undefined, "__cxa_finalize"));
  EXPECT(!r.defines_cxx_runtime);
  const ElfImports m = scan_elf_imports(so.data(), so.size(), "mem");
  EXPECT(m.ok && m.needed == r.needed && m.undefined == r.undefined && m.weak_undefined == r.weak_undefined);

  // Every truncation cuts the section headers (at the end, as linkers write them): an error, no crash.
  int truncated_ok = 0;
  for (size_t n = 0; n < so.size(); n += (n < 4096 ? 1 : 61)) {
    const ElfImports t = scan_elf_imports(so.data(), n, "cut");
    if (t.ok || t.error.rfind("cut: ", 0) != 0) ++truncated_ok;
  }
  EXPECT(truncated_ok == 0);
  // Random damage to the headers, the section table and the dynamic sections: a result or an error.
  uint32_t seed = 1;
  Elf64_Ehdr eh;
  std::memcpy(&eh, so.data(), sizeof eh);
  for (int round = 0; round < 3000; ++round) {
    Bytes bad = so;
    for (int k = 0; k < 4; ++k) {
      seed = seed * 1664525u + 1013904223u;
      const size_t region = seed % 3;
      seed = seed * 1664525u + 1013904223u;
      size_t at = region == 0   ? seed % sizeof(Elf64_Ehdr)
                  : region == 1 ? eh.e_shoff + seed % (static_cast<size_t>(eh.e_shnum) * sizeof(Elf64_Shdr))
                                : seed % bad.size();
      at = std::min(at, bad.size() - 1);
      seed = seed * 1664525u + 1013904223u;
      bad[at] = static_cast<unsigned char>(seed >> 24);
    }
    const ElfImports d = scan_elf_imports(bad.data(), bad.size(), "damaged");
    EXPECT(d.ok || d.error.rfind("damaged: ", 0) == 0);
  }
}

}  // namespace

int main() {
  test_built_image();
  test_refusals();
  test_real_plugin_and_damage();
  return test_result("test_elf_scan");
}
