#include "host/constants.h"

#include <cstring>
#include <unordered_set>

#include "aoti_host/status.h"
#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/tensor.h"

namespace aoti_host {
namespace {

constexpr const char* kEntriesCall = "AOTInductorModelContainerExtractConstantsMapEntries";

[[noreturn]] void malformed(const Plugin& plugin, const std::string& what) {
  throw Error(plugin.path + ": " + kEntriesCall + " returned a malformed result: " + what +
                  "; the plugin is corrupt or was built by an incompatible torch: re-export it",
              AOTI_HOST_INVALID_PROGRAM);
}

}  // namespace

bool has_entries_call(const Plugin& plugin) {
  return plugin.fns.AOTInductorModelContainerExtractConstantsMapEntries != nullptr;
}

const char* entries_call_since() {
  for (const auto& info : kAotiEntryPointInfo)
    if (std::strcmp(info.name, kEntriesCall) == 0) return info.since;
  return "?";
}

void warn_no_entries_call(const std::string& path) {
  log(LogLevel::Warning,
      "%s: the plugin does not export %s (first emitted by torch %s), so it runs with reduced features: "
      "weights are not shared across methods (each method loads its own copy); sessions answer NotSupported "
      "(CUDA graphs still work: such a plugin uploads its own constants to the device). fix: re-export the "
      "model with "
      "torch >= %s",
      path.c_str(), kEntriesCall, entries_call_since(), entries_call_since());
}

std::vector<ConstantEntry> extract_constants(const Plugin& plugin, AOTInductorModelContainerHandle container,
                                             bool use_inactive) {
  auto fn = plugin.fns.AOTInductorModelContainerExtractConstantsMapEntries;
  if (fn == nullptr)
    throw Error(plugin.path + ": the plugin does not export " + kEntriesCall + " (first emitted by torch " +
                    entries_call_since() + "); re-export the model with a newer torch",
                AOTI_HOST_NOT_SUPPORTED);
  const AOTInductorConstantMapEntry* entries = nullptr;
  size_t n = 0;
  clear_last_error();
  if (fn(container, &entries, &n, use_inactive) != AOTI_RUNTIME_SUCCESS) {
    std::string why = plugin.last_error();
    if (why.empty() && !last_error().empty()) why = "host shim: " + last_error();
    throw Error(plugin.path + ": " + kEntriesCall + " failed" + (why.empty() ? "" : ": " + why),
                AOTI_HOST_INVALID_PROGRAM);
  }
  if (n == 0) return {};
  if (entries == nullptr) malformed(plugin, "a null array with count " + std::to_string(n));
  std::vector<ConstantEntry> out;
  out.reserve(n);
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    const AOTInductorConstantMapEntry& e = entries[i];
    if (e.name == nullptr) malformed(plugin, "entry " + std::to_string(i) + " of " + std::to_string(n) + " has a null name");
    if (e.handle == nullptr)
      malformed(plugin, "entry " + std::to_string(i) + " (" + e.name + ") has a null tensor handle");
    if (!seen.insert(e.name).second)
      malformed(plugin, "entry " + std::to_string(i) + " repeats the name " + e.name);
    out.push_back({e.name, e.handle});
  }
  return out;
}

std::vector<ConstantInfo> constant_infos(const Plugin& plugin, AOTInductorModelContainerHandle container) {
  const AotiEntryPoints& f = plugin.fns;
  std::vector<ConstantInfo> out;
  if (f.AOTInductorModelContainerGetNumConstants == nullptr) return out;
  size_t n = 0;
  if (f.AOTInductorModelContainerGetNumConstants(container, &n) != AOTI_RUNTIME_SUCCESS)
    throw Error(plugin.path + ": AOTInductorModelContainerGetNumConstants failed: " + plugin.last_error(),
                AOTI_HOST_INVALID_PROGRAM);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ConstantInfo& c = out[i];
    const char* s = nullptr;
    if (f.AOTInductorModelContainerGetConstantName == nullptr ||
        f.AOTInductorModelContainerGetConstantName(container, i, &s) != AOTI_RUNTIME_SUCCESS || s == nullptr)
      throw Error(plugin.path + ": cannot read the name of constant " + std::to_string(i), AOTI_HOST_INVALID_PROGRAM);
    c.name = s;
    s = nullptr;
    if (f.AOTInductorModelContainerGetConstantOriginalFQN != nullptr &&
        f.AOTInductorModelContainerGetConstantOriginalFQN(container, i, &s) == AOTI_RUNTIME_SUCCESS && s != nullptr)
      c.fqn = s;
    else
      c.fqn = c.name;
    if (f.AOTInductorModelContainerGetConstantType != nullptr)
      f.AOTInductorModelContainerGetConstantType(container, i, &c.type);
    bool folded = false;
    if (f.AOTInductorModelContainerGetConstantFromFolded != nullptr &&
        f.AOTInductorModelContainerGetConstantFromFolded(container, i, &folded) == AOTI_RUNTIME_SUCCESS)
      c.from_folded = folded;
  }
  return out;
}

Residency constants_residency(const Plugin& plugin, AOTInductorModelContainerHandle container, int32_t device_type,
                              std::string* why) {
  if (!has_entries_call(plugin)) {
    if (why) *why = plugin.path + ": no " + kEntriesCall + " (torch < " + entries_call_since() + ")";
    return Residency::Unknown;
  }
  std::vector<ConstantEntry> entries;
  try {
    entries = extract_constants(plugin, container);
  } catch (const Error& e) {
    if (why) *why = e.what();
    return Residency::Unknown;
  }
  for (const auto& e : entries) {
    const Tensor* t = from_handle(e.handle);
    if (t->device_type() != device_type) {
      if (why)
        *why = plugin.path + ": constant " + e.fqn + " is on " + device_type_name(t->device_type()) + ", not " +
               device_type_name(device_type);
      return Residency::SomeElsewhere;
    }
  }
  return Residency::AllOnDevice;
}

}  // namespace aoti_host
