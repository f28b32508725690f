#include "host/isa_scan.h"

#include <dlfcn.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "aoti_host/cpu_isa.h"
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/status.h"
#include "base/json.h"
#include "base/sha256.h"
#include "host/plugin_store.h"

namespace aoti_host {
namespace {

constexpr const char* kModeEnv = "AOTI_HOST_ISA_SCAN";
constexpr const char* kLibraryEnv = "AOTI_HOST_ZYDIS_LIBRARY";
// Bumped whenever what a verdict holds or how it is reached changes: older cache entries are then decoded again.
constexpr int kVerdictSchema = 1;
constexpr size_t kMaxNote = 1 << 20;

// ---- Zydis 4, opened at run time ------------------------------------------------------------------------
// The part of Zydis 4's ABI read here (Zydis/DecoderTypes.h of 4.0: ZydisDecodedInstruction is 328 bytes,
// mnemonic at 4, length at 8, encoding at 12, meta.isa_set at 96; ZydisDecoder is 20 bytes). A library
// whose version is not 4.x, or that does not decode the probe instructions as expected through this
// layout, is not used (load_zydis), so a different layout can't be misread.
using ZyanStatus = uint32_t;
constexpr bool zyan_ok(ZyanStatus s) { return (s & 0x80000000u) == 0; }
constexpr int kMachineLong64 = 0, kStackWidth64 = 2, kModeMinimal = 0;
constexpr int kEncodingVex = 3, kEncodingEvex = 4;
constexpr size_t kInsnSize = 328, kOffMnemonic = 4, kOffLength = 8, kOffEncoding = 12, kOffIsaSet = 96;

struct alignas(16) ZydisDecoderBuf {
  unsigned char bytes[64];
};
struct alignas(16) ZydisInsnBuf {
  unsigned char bytes[512];  // > kInsnSize: room for a later 4.x that grows the struct at its end
  int32_t i32(size_t off) const {
    int32_t v;
    std::memcpy(&v, bytes + off, sizeof v);
    return v;
  }
};

static_assert(sizeof(ZydisInsnBuf::bytes) >= kInsnSize, "room for Zydis 4.0's ZydisDecodedInstruction");

constexpr size_t kExtensions = sizeof(cpu_isa::kExtensions) / sizeof(cpu_isa::kExtensions[0]);
static_assert(kExtensions <= 64, "extension masks are 64 bits");

int extension_index(const char* name) {
  for (size_t i = 0; i < kExtensions; ++i)
    if (std::strcmp(cpu_isa::kExtensions[i].name, name) == 0) return static_cast<int>(i);
  return -1;
}

uint64_t bit(const char* name) {
  const int i = extension_index(name);
  return i < 0 ? 0 : uint64_t{1} << i;
}

// The extensions of an ISA set, by its Zydis name (XED's): the same names toolchain/isa.py gets from
// capstone's groups. Sets of the x86-64 baseline, and extensions toolchain/spec/cpu_isa.toml does not list,
// map to none (as capstone's groups toolchain/isa.py does not list).
uint64_t isa_set_mask(const std::string& set) {
  if (set.rfind("AVX512", 0) == 0) {
    std::string base = set;
    bool vl = false;
    const size_t us = set.rfind('_');
    if (us != std::string::npos) {
      const std::string suffix = set.substr(us + 1);
      if (suffix == "128" || suffix == "256") vl = true;
      if (suffix == "128" || suffix == "256" || suffix == "512" || suffix == "128N" || suffix == "SCALAR" ||
          suffix == "KOP")
        base = set.substr(0, us);
    }
    static const std::pair<const char*, const char*> kBases[] = {
        {"AVX512F", "avx512f"},           {"AVX512BW", "avx512bw"},           {"AVX512DQ", "avx512dq"},
        {"AVX512CD", "avx512cd"},         {"AVX512_BF16", "avx512_bf16"},     {"AVX512_BITALG", "avx512_bitalg"},
        {"AVX512_FP16", "avx512_fp16"},   {"AVX512_GFNI", "gfni"},            {"AVX512_IFMA", "avx512ifma"},
        {"AVX512_VAES", "vaes"},          {"AVX512_VBMI2", "avx512_vbmi2"},   {"AVX512_VBMI", "avx512vbmi"},
        {"AVX512_VNNI", "avx512_vnni"},   {"AVX512_VPCLMULQDQ", "vpclmulqdq"},
        {"AVX512_VPOPCNTDQ", "avx512_vpopcntdq"}};
    uint64_t m = vl ? bit("avx512vl") : 0;
    for (const auto& [z, ours] : kBases)
      if (base == z) return m | bit(ours);
    return m | bit("avx512f");  // ER, PF, 4FMAPS, 4VNNIW, VP2INTERSECT: AVX-512 all the same
  }
  static const std::pair<const char*, const char*> kPlain[] = {
      {"SSE3", "sse3"},       {"SSE3X87", "sse3"},     {"MONITOR", "sse3"},      {"SSSE3", "ssse3"},
      {"SSSE3MMX", "ssse3"},  {"SSE4", "sse4_1"},      {"SSE42", "sse4_2"},      {"POPCNT", "popcnt"},
      {"LZCNT", "lzcnt"},     {"BMI1", "bmi1"},        {"BMI2", "bmi2"},         {"MOVBE", "movbe"},
      {"F16C", "f16c"},       {"FMA", "fma"},          {"AVX", "avx"},           {"AVX2", "avx2"},
      {"AVX2GATHER", "avx2"}, {"AES", "aes"},          {"AVXAES", "aes"},        {"PCLMULQDQ", "pclmulqdq"},
      {"VPCLMULQDQ", "vpclmulqdq"}, {"VAES", "vaes"},  {"SHA", "sha_ni"},        {"ADOX_ADCX", "adx"},
      {"GFNI", "gfni"},       {"AVX_GFNI", "gfni"},    {"AVX_VNNI", "avx_vnni"}, {"AMX_TILE", "amx_tile"},
      {"AMX_BF16", "amx_bf16"}, {"AMX_INT8", "amx_int8"}};
  for (const auto& [z, ours] : kPlain)
    if (set == z) return bit(ours);
  return 0;
}

struct Zydis {
  void* handle = nullptr;
  std::string path;
  std::string version;
  ZyanStatus (*init)(void*, int, int) = nullptr;
  ZyanStatus (*enable_mode)(void*, int, uint8_t) = nullptr;
  ZyanStatus (*decode)(const void*, void*, const void*, size_t, void*) = nullptr;
  const char* (*mnemonic_string)(int) = nullptr;
  const char* (*isa_set_string)(int) = nullptr;
  uint64_t (*get_version)() = nullptr;
  std::vector<uint64_t> set_mask;  // by ISA set id
  std::vector<uint8_t> v_mnemonic;  // by mnemonic id: its name starts with 'v'
  ZydisDecoderBuf decoder{};

  uint64_t mask_of(int set) const { return set >= 0 && static_cast<size_t>(set) < set_mask.size() ? set_mask[set] : 0; }
  bool starts_v(int m) const { return m >= 0 && static_cast<size_t>(m) < v_mnemonic.size() && v_mnemonic[m]; }
  std::string mnemonic(int m) const {
    const char* s = mnemonic_string(m);
    return s != nullptr ? s : "?";
  }
};

// Loads and checks the library at `name` (a path, or a soname the dynamic loader searches); "" on success.
std::string try_zydis(const std::string& name, Zydis* z) {
  void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    return err != nullptr ? err : "dlopen failed";
  }
  z->handle = h;
  z->init = reinterpret_cast<decltype(z->init)>(::dlsym(h, "ZydisDecoderInit"));
  z->enable_mode = reinterpret_cast<decltype(z->enable_mode)>(::dlsym(h, "ZydisDecoderEnableMode"));
  z->decode = reinterpret_cast<decltype(z->decode)>(::dlsym(h, "ZydisDecoderDecodeInstruction"));
  z->mnemonic_string = reinterpret_cast<decltype(z->mnemonic_string)>(::dlsym(h, "ZydisMnemonicGetString"));
  z->isa_set_string = reinterpret_cast<decltype(z->isa_set_string)>(::dlsym(h, "ZydisISASetGetString"));
  z->get_version = reinterpret_cast<decltype(z->get_version)>(::dlsym(h, "ZydisGetVersion"));
  auto fail = [&](const std::string& why) {
    ::dlclose(h);
    z->handle = nullptr;
    return why;
  };
  if (!z->init || !z->enable_mode || !z->decode || !z->mnemonic_string || !z->isa_set_string || !z->get_version)
    return fail("not Zydis (a Zydis entry point is missing)");
  const uint64_t v = z->get_version();
  z->version = std::to_string(v >> 48) + "." + std::to_string(v >> 32 & 0xffff) + "." +
               std::to_string(v >> 16 & 0xffff) + "." + std::to_string(v & 0xffff);
  if ((v >> 48) != 4) return fail("Zydis " + z->version + ", not Zydis 4");
  if (!zyan_ok(z->init(&z->decoder, kMachineLong64, kStackWidth64)) ||
      !zyan_ok(z->enable_mode(&z->decoder, kModeMinimal, 1)))
    return fail("ZydisDecoderInit failed");
  for (int i = 0; i < 4096; ++i) {
    const char* s = z->isa_set_string(i);
    if (s == nullptr) break;
    z->set_mask.push_back(isa_set_mask(s));
  }
  for (int i = 0; i < 8192; ++i) {
    const char* s = z->mnemonic_string(i);
    if (s == nullptr) break;
    z->v_mnemonic.push_back(s[0] == 'v');
  }
  // The probe: instructions whose decode through this layout is known (an EVEX AVX-512BW store, VEX
  // vzeroupper, lzcnt); anything else means the layout is not the one declared above.
  struct Probe {
    unsigned char code[8];
    size_t len;
    int encoding;
    const char* mnemonic;
    const char* isa_set;
  };
  static const Probe kProbes[] = {{{0x62, 0xf1, 0x7f, 0x28, 0x7f, 0x03}, 6, kEncodingEvex, "vmovdqu8", "AVX512BW_256"},
                                  {{0xc5, 0xf8, 0x77}, 3, kEncodingVex, "vzeroupper", "AVX"},
                                  {{0xf3, 0x48, 0x0f, 0xbd, 0xc4}, 5, 0, "lzcnt", "LZCNT"}};
  for (const Probe& p : kProbes) {
    ZydisInsnBuf insn{};
    unsigned char ctx[64] = {};
    const bool ok = zyan_ok(z->decode(&z->decoder, ctx, p.code, sizeof p.code, &insn)) &&
                    insn.bytes[kOffLength] == p.len && insn.i32(kOffEncoding) == p.encoding;
    const char* m = ok ? z->mnemonic_string(insn.i32(kOffMnemonic)) : nullptr;
    const char* s = ok ? z->isa_set_string(insn.i32(kOffIsaSet)) : nullptr;
    if (m == nullptr || s == nullptr || std::strcmp(m, p.mnemonic) != 0 || std::strcmp(s, p.isa_set) != 0)
      return fail("Zydis " + z->version + " does not decode through the Zydis 4.0 layout this runtime reads");
  }
  Dl_info info{};
  char where[4096] = {};
  if (::dladdr(reinterpret_cast<void*>(z->get_version), &info) != 0 && info.dli_fname != nullptr)
    std::snprintf(where, sizeof where, "%s", info.dli_fname);
  z->path = where[0] != '\0' ? where : name;
  return "";
}

// Where Zydis is looked for: $AOTI_HOST_ZYDIS_LIBRARY alone when set; else beside the runtime (the build
// installs it there when it finds it, so the wheel carries it), then the dynamic loader's search for the sonames
// Debian/Ubuntu (libZydis.so.4.0) and a source build (libZydis.so.4, libZydis.so) install.
const Zydis* zydis(std::string* why) {
  static std::once_flag once;
  static Zydis z;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char* env = std::getenv(kLibraryEnv); env != nullptr && *env != '\0') {
      names.push_back(env);
    } else {
      Dl_info info{};
      if (::dladdr(reinterpret_cast<void*>(&isa_scan_mode), &info) != 0 && info.dli_fname != nullptr) {
        std::string dir = info.dli_fname;
        dir = dir.find('/') == std::string::npos ? "" : dir.substr(0, dir.rfind('/') + 1);
        if (!dir.empty()) names.push_back(dir + "libZydis.so.4.0");
        // aoti-run links the runtime statically: from <tree>/bin/, the tree's lib/ holds the library
        if (dir.size() >= 5 && dir.compare(dir.size() - 5, 5, "/bin/") == 0)
          names.push_back(dir + "../lib/libZydis.so.4.0");
      }
      for (const char* n : {"libZydis.so.4.0", "libZydis.so.4", "libZydis.so"}) names.push_back(n);
    }
    std::string tried;
    for (const auto& n : names) {
      const std::string err = try_zydis(n, &z);
      if (err.empty()) {
        log(LogLevel::Debug, "isa scan: Zydis %s from %s", z.version.c_str(), z.path.c_str());
        return;
      }
      tried += (tried.empty() ? "" : "; ") + n + ": " + err;
    }
    failure = "no Zydis 4 library could be loaded (" + tried + ")";
  });
  if (z.handle == nullptr) {
    *why = failure;
    return nullptr;
  }
  return &z;
}

// ---- ELF ---------------------------------------------------------------------------------------------
template <class T>
bool read(const unsigned char* d, size_t size, uint64_t off, T* out) {
  if (off > size || sizeof(T) > size - off) return false;
  std::memcpy(out, d + off, sizeof(T));
  return true;
}

struct Section {
  uint32_t name, type;
  uint64_t flags, addr, offset, size;
  uint32_t link;
  uint64_t entsize;
};

struct Region {
  uint64_t offset, size, addr;
  std::string name;
};

constexpr uint32_t kProgbits = 1, kSymtab = 2, kNobits = 8, kDynsym = 11;
constexpr uint64_t kExecinstr = 0x4;

std::string cstr(const unsigned char* d, size_t size, const Section& tab, uint64_t at) {
  if (at >= tab.size || tab.offset > size || tab.size > size - tab.offset) return "";
  const char* p = reinterpret_cast<const char*>(d + tab.offset + at);
  return std::string(p, strnlen(p, tab.size - at));
}

// Section headers of a little-endian ELF64 x86-64 file, strictly inside it; false for anything else.
bool sections(const unsigned char* d, size_t size, std::vector<Section>* out) {
  if (size < 64 || std::memcmp(d, "\x7f" "ELF", 4) != 0 || d[4] != 2 || d[5] != 1) return false;
  uint16_t machine, shentsize, shnum;
  uint64_t shoff;
  if (!read(d, size, 18, &machine) || machine != 62 || !read(d, size, 40, &shoff) || !read(d, size, 58, &shentsize) ||
      !read(d, size, 60, &shnum) || shentsize != 64 || shoff > size || uint64_t{shnum} * 64 > size - shoff)
    return false;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t at = shoff + uint64_t{i} * 64;
    Section s{};
    read(d, size, at, &s.name);
    read(d, size, at + 4, &s.type);
    read(d, size, at + 8, &s.flags);
    read(d, size, at + 16, &s.addr);
    read(d, size, at + 24, &s.offset);
    read(d, size, at + 32, &s.size);
    read(d, size, at + 40, &s.link);
    read(d, size, at + 56, &s.entsize);
    if (s.type != kNobits && (s.offset > size || s.size > size - s.offset)) return false;
    out->push_back(s);
  }
  return true;
}

struct Function {
  uint64_t addr, size;
  std::string name;
};

// Sized functions of .symtab (else .dynsym), sorted by address, the first name of an address kept.
std::vector<Function> functions(const unsigned char* d, size_t size, const std::vector<Section>& secs) {
  for (uint32_t want : {kSymtab, kDynsym}) {
    const auto tab = std::find_if(secs.begin(), secs.end(), [&](const Section& s) { return s.type == want && s.entsize == 24; });
    if (tab == secs.end() || tab->link >= secs.size()) continue;
    const Section& strs = secs[tab->link];
    std::vector<Function> out;
    std::vector<uint64_t> seen;
    for (uint64_t at = tab->offset; at + 24 <= tab->offset + tab->size; at += 24) {
      uint32_t st_name = 0;
      unsigned char st_info = 0;
      uint64_t value = 0, fsize = 0;
      if (!read(d, size, at, &st_name) || !read(d, size, at + 4, &st_info) || !read(d, size, at + 8, &value) ||
          !read(d, size, at + 16, &fsize))
        break;
      if ((st_info & 0xf) != 2 || fsize == 0 || st_name >= strs.size) continue;
      out.push_back({value, fsize, cstr(d, size, strs, st_name)});
    }
    std::stable_sort(out.begin(), out.end(), [](const Function& a, const Function& b) { return a.addr < b.addr; });
    out.erase(std::unique(out.begin(), out.end(), [](const Function& a, const Function& b) { return a.addr == b.addr; }),
              out.end());
    if (!out.empty()) return out;
  }
  return {};
}

// Every executable byte once: the functions the symbol table names, the rest of each section as its name
// (toolchain/isa.py _regions).
std::vector<Region> regions(const unsigned char* d, size_t size, const std::vector<Section>& secs,
                            const std::vector<Function>& funcs, uint16_t shstrndx) {
  std::vector<Region> out;
  for (const Section& s : secs) {
    if (s.type != kProgbits || !(s.flags & kExecinstr) || s.size == 0) continue;
    const std::string sname = shstrndx < secs.size() ? cstr(d, size, secs[shstrndx], s.name) : "";
    uint64_t at = s.addr;
    const uint64_t end = s.addr + s.size;
    for (const Function& f : funcs) {
      if (f.addr < at || f.addr >= end) continue;
      if (f.addr > at) out.push_back({s.offset + at - s.addr, f.addr - at, at, sname});
      const uint64_t n = std::min(f.size, end - f.addr);
      out.push_back({s.offset + f.addr - s.addr, n, f.addr, f.name});
      at = f.addr + n;
    }
    if (at < end) out.push_back({s.offset + at - s.addr, end - at, at, sname});
  }
  return out;
}

// Whether `p` holds a byte sequence one of the extensions' encodings contains (toolchain/isa.py _MAY_NEED):
// EVEX/VEX 0x62/0xC4/0xC5; 0F 38/3A/B8/BC/BD/7C/7D/D0/F0/12/16; 0F 01 C8/C9; DB/DD/DF with ModRM.reg 1 and a
// memory operand. A function without any is not decoded: decoding it would find nothing.
bool may_need(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const unsigned char b = p[i];
    if (b == 0x62 || b == 0xc4 || b == 0xc5) return true;
    if (i + 1 >= n) continue;
    const unsigned char c = p[i + 1];
    if (b == 0x0f) {
      switch (c) {
        case 0x38: case 0x3a: case 0xb8: case 0xbc: case 0xbd: case 0x7c: case 0x7d: case 0xd0: case 0xf0:
        case 0x12: case 0x16:
          return true;
        case 0x01:
          if (i + 2 < n && (p[i + 2] == 0xc8 || p[i + 2] == 0xc9)) return true;
          break;
        default:
          break;
      }
    } else if ((b == 0xdb || b == 0xdd || b == 0xdf) && (c & 0x38) == 0x08 && (c & 0xc0) != 0xc0) {
      return true;
    }
  }
  return false;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kHex[p[i] >> 4], out += kHex[p[i] & 15];
  return out;
}

int level_rank(const char* level) {
  for (size_t i = 0; i < sizeof(cpu_isa::kLevels) / sizeof(cpu_isa::kLevels[0]); ++i)
    if (std::strcmp(cpu_isa::kLevels[i].name, level) == 0) return static_cast<int>(i);
  return 0;
}

std::string level_of(const std::vector<std::string>& exts) {
  int r = 0;
  for (const auto& e : exts) {
    const int i = extension_index(e.c_str());
    if (i >= 0 && *cpu_isa::kExtensions[i].level != '\0') r = std::max(r, level_rank(cpu_isa::kExtensions[i].level));
  }
  return cpu_isa::kLevels[r].name;
}

// ---- the verdict cache ---------------------------------------------------------------------------------
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string to_json(const CodeIsa& v, const std::string& decoder) {
  std::string out = "{\"schema\": " + std::to_string(kVerdictSchema) + ", \"sha256\": \"" + v.sha256 +
                    "\", \"decoder\": " + json_string(decoder) + ", \"level\": \"" + v.level +
                    "\", \"text_bytes\": " + std::to_string(v.text_bytes) + ", \"decoded_bytes\": " +
                    std::to_string(v.decoded_bytes) + ", \"undecodable\": " + std::to_string(v.undecodable) +
                    ", \"extensions\": {";
  for (size_t i = 0; i < v.uses.size(); ++i) {
    const IsaUse& u = v.uses[i];
    out += (i ? ", " : "") + json_string(u.extension) + ": {\"count\": " + std::to_string(u.count) +
           ", \"mnemonic\": " + json_string(u.mnemonic) + ", \"bytes\": \"" + u.bytes + "\", \"function\": " +
           json_string(u.function) + ", \"address\": " + std::to_string(u.address) + "}";
  }
  return out + "}}\n";
}

std::string hmac(const std::string& key, const std::string& text) {
  unsigned char k[64] = {};
  if (key.size() > 64) {
    Sha256 h;
    h.update(key.data(), key.size());
    h.finish(k);
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  unsigned char ipad[64], opad[64], inner[32];
  for (int i = 0; i < 64; ++i) ipad[i] = k[i] ^ 0x36, opad[i] = k[i] ^ 0x5c;
  Sha256 in;
  in.update(ipad, 64);
  in.update(text.data(), text.size());
  in.finish(inner);
  Sha256 out;
  out.update(opad, 64);
  out.update(inner, 32);
  return out.hex();
}

constexpr const char* kKeyNote = "isa-key";
constexpr const char* kMacLine = "hmac-sha256 ";

// The random key the cache's entries are authenticated with (written once, never replaced).
std::string cache_key() {
  std::string key;
  if (read_cache_note(kKeyNote, 256, &key) && key.size() == 64) return key;
  unsigned char buf[32];
  size_t got = 0;
  while (got < sizeof buf) {
    const ssize_t n = ::getrandom(buf + got, sizeof buf - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("getrandom failed: ") + std::strerror(errno), AOTI_HOST_LOAD_FAILED);
    got += static_cast<size_t>(n);
  }
  write_cache_note(kKeyNote, hex(buf, sizeof buf), false);  // a concurrent writer's key wins: read it back
  if (read_cache_note(kKeyNote, 256, &key) && key.size() == 64) return key;
  throw Error("the ISA verdict cache's key " + std::string(kKeyNote) + " cannot be read back", AOTI_HOST_LOAD_FAILED);
}

// Why the cached text is not a verdict for these bytes from this decoder ("" when it is one); fills *v.
std::string parse_entry(const std::string& text, const std::string& key, const std::string& sha,
                        const std::string& decoder, CodeIsa* v) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos || text.compare(0, std::strlen(kMacLine), kMacLine) != 0) return "has no MAC line";
  const std::string body = text.substr(nl + 1);
  if (text.substr(std::strlen(kMacLine), nl - std::strlen(kMacLine)) != hmac(key, body))
    return "fails its MAC (changed since this runtime wrote it)";
  Json doc;
  try {
    doc = Json::parse(body, "ISA verdict");
  } catch (const Error& e) {
    return std::string("is not a verdict: ") + e.what();
  }
  const Json* schema = doc.get("schema");
  const Json* s = doc.get("sha256");
  const Json* d = doc.get("decoder");
  const Json* level = doc.get("level");
  const Json* exts = doc.get("extensions");
  if (!schema || !schema->is_integer() || schema->integer() != kVerdictSchema) return "is of another schema";
  if (!s || !s->is_string() || s->string() != sha) return "names other bytes";
  if (!d || !d->is_string() || d->string() != decoder) return "comes from another decoder";
  if (!level || !level->is_string() || !exts || !exts->is_object()) return "is not a verdict";
  CodeIsa out;
  out.sha256 = sha;
  for (const char* k : {"text_bytes", "decoded_bytes", "undecodable"}) {
    const Json* n = doc.get(k);
    if (!n || !n->is_integer() || n->integer() < 0) return std::string("has no ") + k;
  }
  out.text_bytes = static_cast<uint64_t>(doc.get("text_bytes")->integer());
  out.decoded_bytes = static_cast<uint64_t>(doc.get("decoded_bytes")->integer());
  out.undecodable = static_cast<uint64_t>(doc.get("undecodable")->integer());
  for (const auto& [name, use] : exts->object()) {
    const Json* count = use.get("count");
    const Json* m = use.get("mnemonic");
    const Json* b = use.get("bytes");
    const Json* f = use.get("function");
    const Json* a = use.get("address");
    if (extension_index(name.c_str()) < 0 || !count || !count->is_integer() || count->integer() < 1 || !m ||
        !m->is_string() || !b || !b->is_string() || !f || !f->is_string() || !a || !a->is_integer())
      return "holds a malformed extension " + name;
    out.uses.push_back({name, static_cast<uint64_t>(count->integer()), m->string(), b->string(), f->string(),
                        static_cast<uint64_t>(a->integer())});
  }
  out.level = level_of(out.extensions());
  if (out.level != level->string()) return "names a level its extensions do not need";
  out.from_cache = true;
  *v = std::move(out);
  return "";
}

// This thread's CPU time: the decode's own cost, apart from what other processes take of the CPU meanwhile.
double thread_cpu_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

std::string decoder_id(const Zydis& z) { return "zydis " + z.version + ", table " + std::to_string(kVerdictSchema); }

}  // namespace

std::vector<std::string> CodeIsa::extensions() const {
  std::vector<std::string> out;
  for (const auto& u : uses) out.push_back(u.extension);
  return out;
}

const IsaUse* CodeIsa::highest(const std::vector<std::string>& among) const {
  const IsaUse* best = nullptr;
  auto key = [](const IsaUse& u) {
    const int i = extension_index(u.extension.c_str());
    const char* level = i >= 0 ? cpu_isa::kExtensions[i].level : "";
    return std::make_tuple(*level == '\0', level_rank(*level ? level : cpu_isa::kLevels[0].name), i);
  };
  for (const auto& u : uses) {
    if (!among.empty() && std::find(among.begin(), among.end(), u.extension) == among.end()) continue;
    if (best == nullptr || key(u) > key(*best)) best = &u;
  }
  return best;
}

IsaScanMode isa_scan_mode() {
  const char* env = std::getenv(kModeEnv);
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return IsaScanMode::Auto;
  if (std::strcmp(env, "on") == 0) return IsaScanMode::On;
  if (std::strcmp(env, "off") == 0) return IsaScanMode::Off;
  throw Error(std::string(kModeEnv) + "=" + env + ": use auto, on or off", AOTI_HOST_INVALID_ARGUMENT);
}

bool scan_code_isa(const unsigned char* data, size_t size, CodeIsa* out, std::string* why) {
  const Zydis* z = zydis(why);
  if (z == nullptr) return false;
  CodeIsa v;
  std::vector<Section> secs;
  if (!sections(data, size, &secs)) {
    *out = v;
    return true;
  }
  uint16_t shstrndx = 0;
  read(data, size, 62, &shstrndx);
  struct Acc {
    uint64_t count = 0;
    size_t order = 0;
    IsaUse first;
  };
  Acc acc[kExtensions];
  size_t met = 0;
  const uint64_t avx512f = bit("avx512f"), avx = bit("avx");
  for (const Region& r : regions(data, size, secs, functions(data, size, secs), shstrndx)) {
    v.text_bytes += r.size;
    const unsigned char* code = data + r.offset;
    if (!may_need(code, r.size)) continue;
    v.decoded_bytes += r.size;
    ZydisInsnBuf insn;
    unsigned char ctx[64];
    for (uint64_t at = 0; at < r.size;) {
      if (!zyan_ok(z->decode(&z->decoder, ctx, code + at, r.size - at, &insn))) {
        ++v.undecodable;  // data in the code, or an encoding Zydis lacks: skipped a byte at a time, as capstone's skipdata
        ++at;
        continue;
      }
      const size_t len = insn.bytes[kOffLength];
      const int enc = insn.i32(kOffEncoding);
      uint64_t mask = z->mask_of(insn.i32(kOffIsaSet));
      if (enc == kEncodingEvex) mask |= avx512f;
      if (enc == kEncodingVex && z->starts_v(insn.i32(kOffMnemonic))) mask |= avx;
      for (uint64_t m = mask; m != 0; m &= m - 1) {
        Acc& a = acc[__builtin_ctzll(m)];
        if (a.count++ == 0) {
          a.order = met++;
          a.first = {cpu_isa::kExtensions[__builtin_ctzll(m)].name, 0, z->mnemonic(insn.i32(kOffMnemonic)),
                     hex(code + at, len), r.name, r.addr + at};
        }
      }
      at += len == 0 ? 1 : len;
    }
  }
  for (size_t i = 0; i < kExtensions; ++i) {
    if (acc[i].count == 0) continue;
    acc[i].first.count = acc[i].count;
    v.uses.push_back(acc[i].first);
  }
  std::sort(v.uses.begin(), v.uses.end(), [](const IsaUse& a, const IsaUse& b) { return a.extension < b.extension; });
  v.level = level_of(v.extensions());
  *out = std::move(v);
  return true;
}

bool plugin_code_isa(const unsigned char* data, size_t size, const std::string& shown, CodeIsa* out,
                     std::string* why) {
  const Zydis* z = zydis(why);
  if (z == nullptr) return false;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::string sha = sha256_hex(data, size);
  const std::string decoder = decoder_id(*z);
  const std::string note = "isa-" + sha + ".json";
  std::string key;
  try {
    key = cache_key();
    std::string text;
    if (read_cache_note(note, kMaxNote, &text)) {
      const std::string problem = parse_entry(text, key, sha, decoder, out);
      if (problem.empty()) {
        log(LogLevel::Debug, "%s: ISA verdict from the cache entry %s/%s: %s (%.2f ms with the SHA-256)", shown.c_str(),
            plugin_cache_root().c_str(), note.c_str(), out->level.c_str(),
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        return true;
      }
      log(LogLevel::Warning, "ISA verdict cache: %s/%s %s: not trusted; decoding the plugin again",
          plugin_cache_root().c_str(), note.c_str(), problem.c_str());
    }
  } catch (const Error& e) {
    key.clear();  // no usable cache directory: decode every time, and say why once
    static std::once_flag once;
    std::call_once(once, [&] { log(LogLevel::Warning, "ISA verdicts are not cached: %s", e.what()); });
  }
  const auto t1 = Clock::now();
  const double cpu0 = thread_cpu_ms();
  if (!scan_code_isa(data, size, out, why)) return false;
  out->sha256 = sha;
  const double decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  log(LogLevel::Debug, "%s: ISA decoded from the code: %s, %llu of %llu code bytes decoded in %.2f ms (%.2f ms of CPU; "
      "Zydis %s)", shown.c_str(), out->level.c_str(), static_cast<unsigned long long>(out->decoded_bytes),
      static_cast<unsigned long long>(out->text_bytes), decode_ms, thread_cpu_ms() - cpu0, z->version.c_str());
  if (!key.empty()) {
    const std::string body = to_json(*out, decoder);
    try {
      write_cache_note(note, kMacLine + hmac(key, body) + "\n" + body, true);
    } catch (const Error& e) {
      log(LogLevel::Warning, "ISA verdict of %s not cached: %s", shown.c_str(), e.what());
    }
  }
  return true;
}

}  // namespace aoti_host
