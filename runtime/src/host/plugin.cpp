#include "host/plugin.h"

#include <dlfcn.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/fallback_ops.h"
#include "aoti_host/log.h"
#include "aoti_host/providers.h"
#include "aoti_host/status.h"
#include "base/elf_scan.h"

namespace aoti_host {
namespace {

using providers::kCxxRuntime;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The library that provides an imported symbol (providers.toml, through the generated providers.h): the first
// whose patterns match; null for none. Whether the symbol is already available is decided by resolving it in
// the global scope, never by the name alone (libc defines __cxa_atexit).
const providers::Provider* provider_of(const std::string& symbol) {
  for (const auto& p : providers::kProviders)
    for (const char* const* pat = p.symbol_patterns; *pat != nullptr; ++pat)
      if (::fnmatch(*pat, symbol.c_str(), 0) == 0) return &p;
  return nullptr;
}

bool is_one_of(const std::string& name, const char* const* sonames) {
  for (const char* const* s = sonames; *s != nullptr; ++s)
    if (name == *s) return true;
  return false;
}

bool lists_any(const ElfImports& imports, const char* const* sonames) {
  for (const auto& n : imports.needed)
    if (is_one_of(n, sonames)) return true;
  return false;
}

// What a plugin opened RTLD_LOCAL binds against first: the executable, its dependencies and every object
// opened RTLD_GLOBAL. dlsym(RTLD_DEFAULT) would also search this library's own dependencies, which a
// plugin does not see when the runtime library was itself opened RTLD_LOCAL.
bool in_global_scope(const std::string& name) {
  static void* const global = ::dlopen(nullptr, RTLD_NOW);
  return ::dlsym(global, name.c_str()) != nullptr;
}

std::string join(const std::vector<std::string>& v, size_t limit = 8) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < limit; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > limit) out += ", ... (" + std::to_string(v.size() - limit) + " more)";
  return out;
}

// The upstream `undefined symbol: _ZSt4cerr` case: the plugin uses the C++ runtime without listing it.
void ensure_cxx_runtime(const std::string& path, const std::vector<std::string>& unresolved) {
  void* loaded = ::dlopen(kCxxRuntime, RTLD_NOW | RTLD_NOLOAD);
  if (loaded == nullptr && in_global_scope("_ZSt4cerr")) {
    // A C++ runtime linked statically into the host: a shared one beside it would be a second runtime.
    std::string msg = path + ": imports C++ runtime symbols (" + join(unresolved) +
                      ") that this host does not export, without listing " + kCxxRuntime +
                      "; the host has a static C++ runtime, so preloading a second one is refused. "
                      "fix: aoti-toolchain patch --add-needed " + kCxxRuntime + " " + path;
    log(LogLevel::Error, "%s", msg.c_str());
    throw Error(msg, AOTI_HOST_LOAD_FAILED);
  }
  if (loaded != nullptr) ::dlclose(loaded);
  void* h = ::dlopen(kCxxRuntime, RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    std::string msg = path + ": imports C++ runtime symbols (" + join(unresolved) + ") without listing " +
                      kCxxRuntime + ", and preloading " + kCxxRuntime + " failed: " + (why ? why : "?") +
                      ". fix: install the C++ runtime (libstdc++6) or aoti-toolchain patch --add-needed " +
                      kCxxRuntime + " " + path;
    log(LogLevel::Error, "%s", msg.c_str());  // every time: each load that needs it fails
    throw Error(msg, AOTI_HOST_LOAD_FAILED);
  }
  log(LogLevel::Info, "%s: imports %zu C++ runtime symbols (%s) without listing %s: preloaded it RTLD_GLOBAL",
      path.c_str(), unresolved.size(), join(unresolved, 3).c_str(), kCxxRuntime);
  // The handle is kept for the life of the process: plugins bound to it can't be unloaded anyway.
}

// Whether the plugin's own DT_NEEDED closure could bring a provider: true unless it lists only providers
// and the C library's parts, so that a library it gets through a dependency (libtorch's OpenMP runtime, say)
// is never shadowed by a second copy in the global scope.
bool may_come_through_dependencies(const ElfImports& imports) {
  static const char* const kLibc[] = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                                      "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", nullptr};
  for (const auto& n : imports.needed) {
    bool known = is_one_of(n, kLibc);
    for (const auto& p : providers::kProviders) known = known || is_one_of(n, p.sonames);
    if (!known) return true;
  }
  return false;
}

// The providers with preload = true (providers.toml) whose symbols the plugin imports without listing them
// and that the global scope lacks: load each RTLD_GLOBAL before the plugin (the `undefined symbol: _ZSt4cerr`
// and `cudaFree` failures). The C++ runtime is required (ensure_cxx_runtime); another provider is preloaded
// only when the plugin's dependencies can't bring it, and one that does not load is left to dlopen's message.
void preload_providers(const std::string& path, const ElfImports& imports) {
  constexpr size_t kCount = sizeof providers::kProviders / sizeof providers::kProviders[0];
  std::vector<std::string> unresolved[kCount];
  for (const auto& s : imports.undefined) {
    const providers::Provider* p = provider_of(s);
    if (p != nullptr && p->preload && !in_global_scope(s)) unresolved[p - providers::kProviders].push_back(s);
  }
  for (size_t i = 0; i < kCount; ++i) {
    const providers::Provider& p = providers::kProviders[i];
    if (unresolved[i].empty() || lists_any(imports, p.sonames)) continue;  // its own scope provides it
    if (p.cxx_runtime) {
      ensure_cxx_runtime(path, unresolved[i]);
      continue;
    }
    if (may_come_through_dependencies(imports)) continue;
    const char* why = nullptr;
    for (const char* const* soname = p.sonames; *soname != nullptr; ++soname) {
      if (::dlopen(*soname, RTLD_NOW | RTLD_GLOBAL) != nullptr) {  // kept for the life of the process
        log(LogLevel::Info, "%s: imports %zu %s symbols (%s) without listing %s: preloaded it RTLD_GLOBAL",
            path.c_str(), unresolved[i].size(), p.name, join(unresolved[i], 3).c_str(), *soname);
        why = nullptr;
        break;
      }
      why = ::dlerror();
    }
    if (why != nullptr)
      log(LogLevel::Warning, "%s: imports %zu %s symbols (%s) without listing it, and preloading it failed (%s). "
          "fix: install %s or aoti-toolchain patch --add-needed %s %s", path.c_str(), unresolved[i].size(), p.name,
          join(unresolved[i], 3).c_str(), why, p.name, p.sonames[0], path.c_str());
  }
}

// Measured on an H200: a plugin that carries its own C++ runtime AND exports it splits in
// two once another copy of libstdc++.so.6 is in the process outside its lookup scope (numpy and torch load
// it RTLD_LOCAL): its GNU_UNIQUE symbols (the locale facet ids) bind process-wide to that copy while its
// other std:: references bind to its own, so std::use_facet finds an empty slot and the std::regex in
// AOTInductorModel's parse_device_str dereferences null (every in-process Python load segfaulted in
// CreateWithDevice; torch's own runner crashes the same way on its default CUDA plugin). With the shared
// libstdc++.so.6 in the global scope, which the plugin searches first, every reference binds to it: one
// runtime. So load it RTLD_GLOBAL (promoting a copy already loaded RTLD_LOCAL) before such a plugin.
void bind_exported_cxx_runtime(const std::string& path, const ElfImports& imports) {
  if (!imports.defines_cxx_runtime || imports.exported_unique == 0) return;
  void* h = ::dlopen(kCxxRuntime, RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    log(LogLevel::Warning, "%s: carries its own exported C++ runtime (%zu std:: symbols, %zu GNU_UNIQUE) and %s "
        "could not be loaded to bind it to (%s): it crashes if another copy of %s is loaded outside its scope "
        "(numpy, torch). fix: install libstdc++6", path.c_str(), imports.exported_std, imports.exported_unique,
        kCxxRuntime, why ? why : "?", kCxxRuntime);
    return;
  }
  log(LogLevel::Info, "%s: carries its own exported C++ runtime (%zu std:: symbols, %zu GNU_UNIQUE): %s made "
      "global first so that all of them bind to one runtime", path.c_str(), imports.exported_std,
      imports.exported_unique, kCxxRuntime);
  // The handle is kept for the life of the process, as the plugin bound to it.
}

}  // namespace

std::string Plugin::last_error() const {
  const char* why = nullptr;
  if (fns.AOTInductorGetLastError == nullptr || fns.AOTInductorGetLastError(&why) != AOTI_RUNTIME_SUCCESS ||
      why == nullptr)
    return "";
  return why;
}

Plugin::~Plugin() {
  if (handle != nullptr) ::dlclose(handle);
}

std::shared_ptr<Plugin> open_plugin(const std::string& load_path, const std::string& shown) {
  const std::string& path = shown.empty() ? load_path : shown;
  struct stat st {};
  if (::stat(load_path.c_str(), &st) != 0) throw Error(path + ": no such file", AOTI_HOST_NOT_FOUND);
  ElfImports imports = scan_elf_imports(load_path);
  if (!imports.ok) {
    throw Error(path + ": not a plugin: " + imports.error + "; pass a .pt2 package or the plugin .so inside it",
                AOTI_HOST_INVALID_PROGRAM);
  }
  // Each missing shim named with the ATen op it calls where it is one of torch's fallback ops.
  // ATen ops without a C shim go through torch's proxy executor, which lives in libtorch: no shim of ours
  // can stand in for it.
  static const std::string kProxyExecutor = "aoti_torch_proxy_executor_call_function";
  std::vector<std::string> missing_shims;
  bool proxy = false;
  for (const auto& s : imports.undefined) {
    if (!starts_with(s, "aoti_torch_") || in_global_scope(s)) continue;
    if (s == kProxyExecutor) {
      proxy = true;
      continue;
    }
    const char* op = fallback_ops::op_of(s.c_str());
    missing_shims.push_back(op != nullptr ? s + " (ATen op " + op + ")" : s);
  }
  if (proxy) {
    std::string msg = path + ": runs ATen ops that have no C shim through torch's proxy executor (" +
                      kProxyExecutor + "), which only a host that links libtorch provides";
    if (!missing_shims.empty())
      msg += "; it also imports " + std::to_string(missing_shims.size()) + " shim(s) this host does not provide: " +
             join(missing_shims, 32);
    throw Error(msg + ". fix: re-export the model without those ops (`aoti-toolchain verify` on the package names "
                      "them), expressing them with ops that inductor generates code for or that have a fallback shim",
                AOTI_HOST_LOAD_FAILED);
  }
  if (!missing_shims.empty()) {
    throw Error(path + ": imports " + std::to_string(missing_shims.size()) +
                    " shim(s) this host does not provide: " + join(missing_shims, 32) +
                    ". fix: implement them in the runtime (and add them to toolchain/spec/shims.toml), or "
                    "re-export the model so it does not need them; if the host is not ours, link its shim "
                    "archive with --whole-archive and export the shims",
                AOTI_HOST_LOAD_FAILED);
  }
  preload_providers(path, imports);
  bind_exported_cxx_runtime(path, imports);

  auto plugin = std::make_shared<Plugin>();
  plugin->path = path;
  ::dlerror();
  // dlopen reads a name without a slash as a library to search for on the loader's path, not as the file in the
  // current directory the caller named (which stat and the ELF scan above did open): anchor it.
  const std::string open_path = load_path.find('/') == std::string::npos ? "./" + load_path : load_path;
  plugin->handle = ::dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (plugin->handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(path + ": dlopen failed: " + (why ? why : "unknown reason"), AOTI_HOST_LOAD_FAILED);
  }
  std::vector<std::string> missing_required;
  for (const auto& info : kAotiEntryPointInfo) {
    void* fn = ::dlsym(plugin->handle, info.name);
    std::memcpy(reinterpret_cast<char*>(&plugin->fns) + info.offset, &fn, sizeof fn);
    if (fn == nullptr && info.required) missing_required.push_back(info.name);
  }
  if (!missing_required.empty()) {
    throw Error(path + ": not an AOTInductor plugin: missing required entry point(s) " + join(missing_required) +
                    "; compile the model with torch._inductor.aoti_compile_and_package (aoti-toolchain export)",
                AOTI_HOST_INVALID_PROGRAM);
  }
  auto* start = static_cast<const char*>(::dlsym(plugin->handle, "_binary_constants_bin_start"));
  auto* end = static_cast<const char*>(::dlsym(plugin->handle, "_binary_constants_bin_end"));
  if (start != nullptr && end != nullptr && end >= start) plugin->embedded_weight_bytes = end - start;
  return plugin;
}

}  // namespace aoti_host
