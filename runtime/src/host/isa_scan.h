// What CPU a plugin's code needs, read from the code itself, for a package that carries no target record of
// ours (torch's own packages, older exports): the preflight (preflight.h) checks it like a recorded one.
//
// The executable sections are decoded with Zydis 4 (libZydis, opened at run time: isa_scan.cpp says where it
// is looked for), with the rules of toolchain/isa.py, which `aoti-toolchain inspect`/`verify` use: one linear
// sweep per function of the symbol table (.symtab, else .dynsym; the rest of each section under its name),
// functions holding none of the byte sequences every extension's encodings contain skipped, and each
// instruction's extensions taken from its ISA set (+ avx512f for any EVEX encoding, + avx for a VEX-encoded
// "v" mnemonic), so both give the same verdict (tests/integration/test_isa_preflight.py compares them).
//
// The verdict is kept in the private plugin cache (plugin_store.h) as isa-<SHA-256 of the plugin>.json,
// authenticated with HMAC-SHA-256 under a random key kept beside it (isa-key, mode 0600): the same bytes are
// decoded once per cache; an entry that fails its MAC or its checks is ignored and written again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

// One extension's use: how many instructions, and the first one the sweep met.
struct IsaUse {
  std::string extension;  // as toolchain/spec/cpu_isa.toml names it
  uint64_t count = 0;
  std::string mnemonic;
  std::string bytes;     // its encoding, hex
  std::string function;  // the function (or section) holding it
  uint64_t address = 0;  // its virtual address in the plugin
};

struct CodeIsa {
  std::string level = "x86-64";  // the psABI level its extensions need (extensions of no level not counted)
  std::vector<IsaUse> uses;      // by extension name
  uint64_t text_bytes = 0;       // executable bytes
  uint64_t decoded_bytes = 0;    // bytes run through the decoder
  uint64_t undecodable = 0;      // bytes the decoder took for no instruction (skipped one at a time)
  std::string sha256;            // of the plugin's bytes: the cache key
  bool from_cache = false;

  std::vector<std::string> extensions() const;
  // The use of the highest-ranked extension among `among` (all when empty): a level-less one above all,
  // then by level, then by toolchain/spec/cpu_isa.toml's order (toolchain/isa.py IsaScan.highest).
  const IsaUse* highest(const std::vector<std::string>& among = {}) const;
};

enum class IsaScanMode { Auto, On, Off };
// AOTI_HOST_ISA_SCAN: auto (default: decode where Zydis loads, else say so once and load unchecked), on (a
// missing decoder refuses the package), off (never decode). Anything else is refused by name.
IsaScanMode isa_scan_mode();

// The verdict for the plugin `data` (a package member `shown`): from the cache when a valid entry holds it,
// else decoded (and cached). False with the reason in *why when no decoder can be loaded; a file that is
// not an x86-64 ELF64 gives an empty verdict (the loader reports what is wrong with it).
bool plugin_code_isa(const unsigned char* data, size_t size, const std::string& shown, CodeIsa* out,
                     std::string* why);

// The decode alone (no cache): what plugin_code_isa runs on a miss.
bool scan_code_isa(const unsigned char* data, size_t size, CodeIsa* out, std::string* why);

}  // namespace aoti_host
