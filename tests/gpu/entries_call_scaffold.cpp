// TEST SCAFFOLDING for tests/gpu only (tests/gpu/entries_scaffold.py appends this to torch's
// torch/_inductor/codegen/aoti_runtime/interface.cpp, in memory, for the exports test_cuda_state.py needs).
// It is not part of aoti-toolchain: no package a user exports contains it.
//
// Torch 2.13 added AOTInductorModelContainerExtractConstantsMapEntries, the C-ABI call through which the
// runtime reads a plugin's constants (CUDA sessions and weight sharing need it). The GPU machine's torch
// 2.11 writes plugins without it. This is the call as torch 2.13 declares it (interface.h) and with its
// semantics (model_container.h, extract_constants_map_entries): one entry per constant that is not
// produced by constant folding, in constant-index order, named by the constant's original FQN, from the
// active buffer (or the inactive one with use_inactive); the array and its names stay valid until the
// next call on the same container. Torch 2.11's container keeps no storage for the array, so it is kept
// in a table keyed by the container (entries of deleted containers stay: a few bytes each, test processes
// only); the handles come from torch 2.11's own extract_constants_map, which keys the same lookup by the
// original FQN.
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct AotiScaffoldExtracted {
  std::vector<std::string> names;
  std::vector<AOTInductorConstantMapEntry> entries;
};

std::mutex aoti_scaffold_mutex;
std::unordered_map<const void*, AotiScaffoldExtracted> aoti_scaffold_extracted;

} // namespace

extern "C" {

AOTI_API AOTIRuntimeError AOTInductorModelContainerExtractConstantsMapEntries(
    AOTInductorModelContainerHandle container_handle,
    const AOTInductorConstantMapEntry** entries,
    size_t* num_entries,
    bool use_inactive) {
  if (!entries || !num_entries) {
    return AOTI_RUNTIME_FAILURE;
  }
  auto* container =
      reinterpret_cast<torch::aot_inductor::AOTInductorModelContainer*>(
          container_handle);
  CONVERT_EXCEPTION_TO_ERROR_CODE({
    const auto by_fqn = container->extract_constants_map(use_inactive);
    const size_t n_consts = container->num_constants();
    std::lock_guard<std::mutex> lock(aoti_scaffold_mutex);
    auto& out = aoti_scaffold_extracted[container_handle];
    out.names.clear();
    out.entries.clear();
    out.names.reserve(n_consts);
    out.entries.reserve(n_consts);
    for (size_t idx = 0; idx < n_consts; idx++) {
      if (container->constant_from_folded(idx)) {
        continue;
      }
      auto it = by_fqn.find(container->constant_original_fqn(idx));
      if (it != by_fqn.end()) {
        out.names.emplace_back(it->first);
        out.entries.push_back({nullptr, it->second});
      }
    }
    // the names' storage is final now (no more emplace_back): point the entries at it
    for (size_t i = 0; i < out.entries.size(); i++) {
      out.entries[i].name = out.names[i].c_str();
    }
    *entries = out.entries.empty() ? nullptr : out.entries.data();
    *num_entries = out.entries.size();
  })
}

// Marks a plugin whose entries call is this scaffold's (entries_scaffold.require_entries_call).
AOTI_API void aoti_toolchain_test_scaffold_entries_call() {}

} // extern "C"
