// Reading a container's constants through the flat C ABI. The ONLY reader is extract_constants():
// it calls AOTInductorModelContainerExtractConstantsMapEntries (never the deprecated ExtractConstantsMap,
// which hands the plugin a host std::unordered_map) and validates the result before anything uses it.
// Every caller (weight sharing, sessions, the CUDA graph residency check) goes through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/entry_points.h"
#include "host/plugin.h"

namespace aoti_host {

// torch::aot_inductor::ConstantType (aoti_runtime/constant_type.h).
enum ConstantType : int32_t { kConstantUnknown = 0, kParameter = 1, kBuffer = 2, kTensorConstant = 3, kFolded = 4 };

// One constant as the entries call returns it: the ORIGINAL FQN (copied: the plugin's array is only valid
// until the next entries call or constants mutation) and the container-owned handle (borrowed).
struct ConstantEntry {
  std::string fqn;
  AtenTensorHandle handle = nullptr;
};

// What the per-index calls say about constant idx; internal `name` is what Update*Pairs wants.
struct ConstantInfo {
  std::string name;
  std::string fqn;
  int32_t type = kConstantUnknown;
  bool from_folded = false;
};

// Whether the plugin exports the entries call (torch >= 2.13).
bool has_entries_call(const Plugin& plugin);

// The first torch release that emits the entries call (from the spec).
const char* entries_call_since();

// Logs, at every load (not once per process), what a plugin without the entries call loses.
void warn_no_entries_call(const std::string& path);

// The container's constants, validated: the call's error code (its AOTInductorGetLastError message is kept),
// a null array with a nonzero count, a null name, a null handle and duplicate names all throw Error with
// AOTI_HOST_INVALID_PROGRAM naming the plugin and the entry. Throws AOTI_HOST_NOT_SUPPORTED when the plugin
// lacks the call (check has_entries_call() first to fall back instead).
std::vector<ConstantEntry> extract_constants(const Plugin& plugin, AOTInductorModelContainerHandle container,
                                             bool use_inactive = false);

// Index-wise metadata (GetNumConstants, GetConstantName/OriginalFQN/Type/FromFolded). Throws Error
// (AOTI_HOST_INVALID_PROGRAM) when a call fails or returns a null name.
std::vector<ConstantInfo> constant_infos(const Plugin& plugin, AOTInductorModelContainerHandle container);

// For the CUDA graph check: whether every constant the container uses lives on `device_type`.
enum class Residency { AllOnDevice, SomeElsewhere, Unknown };
// Unknown (with `why`) when the plugin lacks the entries call or its result is malformed: graphs stay off.
Residency constants_residency(const Plugin& plugin, AOTInductorModelContainerHandle container, int32_t device_type,
                              std::string* why);

}  // namespace aoti_host
