// Where the plugins (and cubins) inside a package are loaded from.
//
// By default a plugin is copied into an anonymous in-memory file (memfd), sealed against writes, and
// loaded as /proc/self/fd/N: nothing is written to disk, so nothing on disk can be planted or swapped.
// With AOTI_HOST_CACHE_DIR set, or where memfd can't be loaded (no memfd_create, vm.memfd_noexec,
// /proc not mounted), a private per-user file cache is used instead: the directory must be owned by the
// user and not writable by others, entries are named by the SHA-256 of their bytes, written with
// O_EXCL|O_NOFOLLOW under random temp names, and re-hashed through the opened fd before that same fd
// is loaded. Either way the same bytes give the same load path for the life of the process, so loading
// a plugin again maps nothing new (glibc finds the loaded object by its name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_host {

struct StoredPlugin {
  std::string load_path;  // what dlopen opens: /proc/self/fd/N of a sealed memfd or of a verified cache entry
  std::string sha256;     // hex digest of the bytes
  bool in_memory = false;
};

// `member` names the bytes in messages (package:member). Throws Error (AOTI_HOST_LOAD_FAILED) when the cache
// directory is refused or can't be written, saying why and how to fix it.
StoredPlugin store_plugin(const unsigned char* bytes, uint64_t size, const std::string& member);

struct CubinMember {
  std::string name;  // the member's name in the package; the file keeps its leaf name
  const unsigned char* bytes;
  uint64_t size;
};

// A directory in the private cache holding each cubin under its leaf name (a CUDA plugin opens
// <cubin_dir>/<kernel>.cubin by name, so it needs a real directory). Keyed by the SHA-256 of all of them.
std::string store_cubins(const std::vector<CubinMember>& cubins);

// Small notes about a plugin's bytes kept in the private cache root (the CPU ISA verdict of its code:
// isa_scan.h), under the same rules as its entries: the directory owned by this user and writable by no
// one else, opened without following symbolic links, files written under random temp names and renamed.
// read_cache_note: false (nothing read) when `name` is absent, not a regular file owned by this user and
// writable by no one else, or larger than `max_size`; the caller still checks what it says.
// write_cache_note: replaces `name` atomically (mode 0600) when `replace`, else keeps an existing one.
// Both throw Error (AOTI_HOST_LOAD_FAILED) when the cache directory is refused or can't be written.
bool read_cache_note(const std::string& name, size_t max_size, std::string* text);
void write_cache_note(const std::string& name, const std::string& text, bool replace);

// The cache root in use: $AOTI_HOST_CACHE_DIR, else $XDG_CACHE_HOME/aoti-toolchain, else
// ~/.cache/aoti-toolchain. Never under $TMPDIR.
std::string plugin_cache_root();

}  // namespace aoti_host
