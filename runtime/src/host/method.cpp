#include "host/method.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "aoti_host/error.h"
#include "aoti_host/input_file.h"
#include "aoti_host/log.h"
#include "aoti_host/tensor.h"
#include "base/crc32.h"
#include "base/mapped_file.h"
#include "host/constants.h"
#include "host/cerr_capture.h"
#include "host/contract.h"
#include "host/package.h"
#include "shims/packed_gemm.h"
#include <chrono>
#if CUDA_AVAILABLE
#include "host/cuda/method_state.h"
#endif

namespace aoti_host {
namespace {

std::string dims(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + (v[i] < 0 ? std::string("?") : std::to_string(v[i]));
  return out + "]";
}

// Strides the plugin expects for these sizes: `layout` (the contract's strides for its example sizes,
// or a layout the caller gave) when it fits them, else the same dimension order (e.g. channels-last)
// recomputed for the actual sizes. An empty layout means contiguous.
std::vector<int64_t> expected_strides(const std::vector<int64_t>& layout, const std::vector<int64_t>& sizes) {
  if (layout.empty() || layout.size() != sizes.size()) return Tensor::contiguous_strides(sizes);
  // innermost first: sort dims by the layout's stride (stable, ties keep the later dim inner); the order lives
  // on the stack for up to 16 dims (this runs on every call, per input)
  const size_t n = sizes.size();
  size_t small[16];
  std::vector<size_t> big(n > 16 ? n : 0);
  size_t* order = n > 16 ? big.data() : small;
  for (size_t i = 0; i < n; ++i) order[i] = i;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (layout[order[j]] < layout[order[i]] || (layout[order[j]] == layout[order[i]] && order[j] > order[i]))
        std::swap(order[i], order[j]);
  std::vector<int64_t> out(n);
  int64_t s = 1;
  for (size_t k = 0; k < n; ++k) {
    out[order[k]] = s;
    s *= std::max<int64_t>(sizes[order[k]], 1);
  }
  return out;
}

bool same_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1 && a[i] != b[i]) return false;
  return true;
}

// "contiguous", "channels_last", "channels_last_3d" or the strides themselves, for messages.
std::string layout_name(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (same_layout(sizes, strides, Tensor::contiguous_strides(sizes))) return "contiguous " + dims(strides);
  if (sizes.size() == 4 && same_layout(sizes, strides, expected_strides({4, 1, 3, 2}, sizes)))
    return "channels_last " + dims(strides);
  if (sizes.size() == 5 && same_layout(sizes, strides, expected_strides({5, 1, 4, 3, 2}, sizes)))
    return "channels_last_3d " + dims(strides);
  return "strides " + dims(strides);
}

constexpr const char* kCheckInputsEnv = "AOTI_RUNTIME_CHECK_INPUTS";

}  // namespace

std::string Method::plugin_error(const char* call) const {
  std::string msg = std::string(call) + " failed";
  const std::string why =
      plugin_->fns.AOTInductorGetLastError != nullptr ? plugin_->last_error() : captured_plugin_error();
  if (!why.empty()) msg += ": " + why;
  if (!last_error().empty()) msg += " (host shim: " + last_error() + ")";
  return msg;
}

namespace {

// What a plugin's own input check (torch's generated check_input_N, "input_handles[i]: ...") means, in words;
// "" for any other message. The same on every device: CPU and CUDA plugins share the generated checks.
std::string explain_input_check(const std::string& msg) {
  if (msg.find("dim value is too small") != std::string::npos && msg.find(">= 2") != std::string::npos)
    // torch specialises sizes 0 and 1 while tracing, so Dim(min=1) compiles a check for >= 2
    return " (torch compiled this plugin for the sizes its own check names: while tracing it specialises "
           "sizes 0 and 1, so a dynamic dimension declared with min=1 is compiled for >= 2. To run smaller "
           "sizes, re-export with aoti-toolchain export (it compiles size-obliviously when a minimum is 0 "
           "or 1 and records the range that holds in the package), or with torch's "
           "torch.fx.experimental._config.backed_size_oblivious=True around torch.export and the compile)";
  const size_t at = msg.find("unmatched dtype, expected: ");
  if (at != std::string::npos) {
    // "expected: 15(at::kBFloat16), but got: 6": torch's dtype codes, which are the runtime's
    const char* p = msg.c_str() + at + std::strlen("unmatched dtype, expected: ");
    char* end = nullptr;
    const long want = std::strtol(p, &end, 10);
    const char* got_at = std::strstr(end, "but got: ");
    if (end != p && got_at != nullptr) {
      const long got = std::strtol(got_at + std::strlen("but got: "), nullptr, 10);
      return std::string(" (the plugin was compiled for ") + dtype_name(static_cast<int32_t>(want)) +
             " there and was given " + dtype_name(static_cast<int32_t>(got)) + ": convert the input to " +
             dtype_name(static_cast<int32_t>(want)) + ")";
    }
  }
  return "";
}

}  // namespace

// A failed Run as the caller should see it: `msg` (the call and the plugin's reason) with what a refusal by the
// plugin's own input check means, on every device.
Error Method::run_error(std::string msg) const {
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (msg.find("input_handles[") != std::string::npos) {
    std::string why = explain_input_check(msg);
    if (why.empty() && !has_contract_)
      why = " (the package has no contract, so the plugin checked them itself: give inputs of the shape and dtype "
            "it was built for, and its layout with -i FILE.npy:channels_last or :strides=...)";
    return Error(path_ + ": the plugin refused its inputs: " + msg + why, AOTI_HOST_INVALID_ARGUMENT);
  }
  if (!has_contract_ && plugin_checks_inputs_ && plugin_->fns.AOTInductorGetLastError == nullptr &&
      captured_plugin_error().empty()) {
    // Plugins of torch < 2.13 print their reason on stderr and have no call to read it back: a failed input
    // check can't be told from a failed kernel, so the message points at both.
    return Error(path_ + ": " + msg + " (this plugin has no AOTInductorGetLastError: its reason is on stderr "
                     "above; if it says input_handles[...], the plugin refused its inputs: give inputs of the "
                     "shape, dtype and layout it was built for, or record a contract in its package with "
                     "aoti-toolchain contract add so the host checks them)", AOTI_HOST_RUN_FAILED);
  }
  return Error(path_ + ": " + msg, AOTI_HOST_RUN_FAILED);
}

struct StreamScope {
#if CUDA_AVAILABLE
  explicit StreamScope(const cuda::MethodState& s) : scope(s) {}
  cuda::MethodState::Scope scope;
#endif
};

void StreamScopeDeleter::operator()(StreamScope* s) const { delete s; }

StreamScopePtr stream_scope(const Method& method) {
#if CUDA_AVAILABLE
  if (method.cuda_state() != nullptr) return StreamScopePtr(new StreamScope(*method.cuda_state()));
#else
  (void)method;
#endif
  return nullptr;
}

Device load_device(const char* name, const std::string& path) {
  const Device device = parse_device(name);
#if CUDA_AVAILABLE
  if (device.cuda) cuda::require_device(device.index, path.c_str());
#else
  (void)path;
#endif
  return device;
}

std::unique_ptr<Method> Method::load(const std::string& path, const aoti_host_load_options& options,
                                       bool defer_weights) {
  // Where a load's time goes, logged at info level (AOTI_HOST_LOG=info): milliseconds per phase.
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto t = t0;
  double package_ms = 0, device_ms = 0, store_ms = 0, dlopen_ms = 0, container_ms = 0, weights_ms = 0, checks_ms = 0;
  auto lap = [&t](double& slot) {
    const auto now = Clock::now();
    slot = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
  };
  std::unique_ptr<Method> p(new Method());
  p->path_ = path;
  p->pack_cache_ = std::make_shared<cpu::PackCache>();
  const Device device = load_device(options.device, path);
  const Package package = Package::open(path);
  // Before anything of the plugin is stored or mapped: a plugin this machine can't run is refused by name.
  preflight(package.target(), path, device.cuda ? device.index : -1, package.plugin_code());
  p->adopt_package(package);
  lap(package_ms);
  p->create_device_state(device);
  // The weights start for the device now, on a thread of their own, while the plugin is stored, opened and
  // its container created.
  p->start_weight_prefetch(options, package, defer_weights);
  lap(device_ms);
  const PluginSource source = package.store_plugin();
  lap(store_ms);
  p->plugin_ = open_plugin(source.load_path, source.shown);
  // torch < 2.13: no call gives the reason of a failed call back; the plugin writes it to std::cerr
  if (p->plugin_->fns.AOTInductorGetLastError == nullptr) p->plugin_cerr_ = plugin_cerr(p->plugin_->handle);
  lap(dlopen_ms);
  const StreamScopePtr scope = stream_scope(*p);  // the device current for the rest of the load
  {
    // Embedded weights are copied out of the plugin's mapping as the container is created: its pages go
    // behind the copy (and after it), so the weights are resident once, in the container.
    const ReleaseBehindCopy release(p->plugin_->embedded_weight_bytes > 8 ? read_only_embedded_weights(*p->plugin_)
                                                                          : FileRange{});
    p->create_container(device, options.num_models ? options.num_models : 1, source.cubin_dir);
  }
  lap(container_ms);
  p->apply_weights_policy(options, package, defer_weights);
  lap(weights_ms);
  p->read_signature();
  p->check_constants();
  p->prefetch_.reset();  // a blob the plugin did not take (it embeds its weights): freed
  lap(checks_ms);
  log(LogLevel::Info, "%s: loaded in %.1f ms: package and preflight %.1f, device state and weights started %.1f, "
      "plugin store %.1f, dlopen %.1f, container %.1f, weights %.1f, checks %.1f", path.c_str(),
      std::chrono::duration<double, std::milli>(t - t0).count(), package_ms, device_ms, store_ms, dlopen_ms,
      container_ms, weights_ms, checks_ms);
  return p;
}

void Method::adopt_package(const Package& package) {
  has_contract_ = package.has_contract();
  contract_ = package.contract();
  constant_layouts_ = package.constant_layouts();
}

void Method::start_weight_prefetch(const aoti_host_load_options& options, const Package& package,
                                    bool defer_weights) {
#if CUDA_AVAILABLE
  // Only what place_weights will upload through the host ring anyway: the package's own blob, weights not left
  // to a later decision (sharing across methods), layouts recorded, the host upload mode.
  const ZipEntry* blob = package.weights_blob();
  if (!cuda_ || defer_weights || blob == nullptr || constant_layouts_.empty() ||
      (options.weights_path != nullptr && *options.weights_path != '\0') ||
      cuda::upload_mode() != cuda::UploadMode::Host)
    return;
  const std::shared_ptr<ZipArchive> zip = package.archive();
  prefetch_.reset(new cuda::WeightPrefetch(zip->unchecked_data(*blob), static_cast<size_t>(blob->size), zip,
                                           cuda_->device(), cuda_->stream()));
#else
  (void)options, (void)package, (void)defer_weights;
#endif
}

void Method::PrefetchDeleter::operator()(cuda::WeightPrefetch* w) const {
#if CUDA_AVAILABLE
  delete w;
#else
  (void)w;
#endif
}

void Method::create_device_state(const Device& device) {
  if (!device.cuda) return;
#if CUDA_AVAILABLE
  try {
    cuda_.reset(new cuda::MethodState(device.index));
  } catch (const Error& e) {
    throw Error(path_ + ": " + e.what(), AOTI_HOST_NOT_SUPPORTED);
  }
#endif
}

void Method::create_container(const Device& device, size_t num_models, const std::string& cubin_dir) {
  clear_last_error();
  if (plugin_->fns.AOTInductorModelContainerCreateWithDevice(&container_, num_models, device.name.c_str(),
                                                             cubin_dir.empty() ? nullptr : cubin_dir.c_str()) !=
      AOTI_RUNTIME_SUCCESS) {
    container_ = nullptr;
    throw Error(path_ + ": " + plugin_error("AOTInductorModelContainerCreateWithDevice"), AOTI_HOST_INVALID_PROGRAM);
  }
}

// Weights outside the .so (a blob-mode plugin) come from --weights or the package's blob, now or, with
// defer_weights, when the caller decides (weight sharing); embedded ones need nothing.
void Method::apply_weights_policy(const aoti_host_load_options& options, const Package& package, bool defer_weights) {
  size_t num_constants = 0;
  if (plugin_->fns.AOTInductorModelContainerGetNumConstants != nullptr)
    plugin_->fns.AOTInductorModelContainerGetNumConstants(container_, &num_constants);
  const bool external = plugin_->embedded_weight_bytes >= 0 && plugin_->embedded_weight_bytes <= 8 &&
                        num_constants > 0;
  const bool given = options.weights_path != nullptr && *options.weights_path != '\0';
  if (given && !external) {
    throw Error(std::string(options.weights_path) + ": " + path_ +
                    " embeds its weights; --weights is only for plugins exported with weights in a blob",
                AOTI_HOST_INVALID_ARGUMENT);
  }
  if (!external) return;
  if (!given && package.weights_blob() == nullptr) {
    throw Error(path_ + ": the plugin keeps its " + std::to_string(num_constants) +
                    " constants outside the .so and no weights were given; pass --weights BLOB (the "
                    "*.wrapper_weights.blob of its package) or load the .pt2",
                AOTI_HOST_INVALID_ARGUMENT);
  }
  weights_pending_ = true;
  if (given) pending_weights_path_ = options.weights_path;
  else pending_zip_ = package.archive(), pending_blob_ = package.weights_blob();
  if (!defer_weights) load_pending_weights();
}

// Input and output counts and names from the plugin, checked against the contract; without one, the
// plugin's own input check is turned on.
void Method::read_signature() {
  const AotiEntryPoints& fns = plugin_->fns;
  fns.AOTInductorModelContainerGetNumInputs(container_, &num_inputs_);
  fns.AOTInductorModelContainerGetNumOutputs(container_, &num_outputs_);
  if (has_contract_ && (contract_.inputs.size() != num_inputs_ || contract_.outputs.size() != num_outputs_)) {
    throw Error(path_ + ": the contract lists " + std::to_string(contract_.inputs.size()) + " inputs and " +
                    std::to_string(contract_.outputs.size()) + " outputs, the plugin has " + std::to_string(num_inputs_) +
                    " and " + std::to_string(num_outputs_) + "; re-export the model", AOTI_HOST_INVALID_PROGRAM);
  }
  if (!has_contract_) {
    enable_plugin_input_checks();
    contract_.inputs.resize(num_inputs_);
    contract_.outputs.resize(num_outputs_);
  }
  layouts_.resize(num_inputs_);
  for (size_t i = 0; i < num_inputs_; ++i) {
    const char* name = nullptr;
    if (fns.AOTInductorModelContainerGetInputName(container_, i, &name) == AOTI_RUNTIME_SUCCESS && name &&
        contract_.inputs[i].name.empty())
      contract_.inputs[i].name = name;
  }
  for (size_t i = 0; i < num_outputs_; ++i) {
    const char* name = nullptr;
    if (fns.AOTInductorModelContainerGetOutputName(container_, i, &name) == AOTI_RUNTIME_SUCCESS && name &&
        contract_.outputs[i].name.empty())
      contract_.outputs[i].name = name;
  }
}

void Method::enable_plugin_input_checks() {
  // Without a contract the host can't know what the plugin was built for, but the plugin can: its
  // generated check_inputs (dtype, sizes, dynamic ranges, strides, device) runs when
  // AOTI_RUNTIME_CHECK_INPUTS is set at its first Run (a function-local static, read once per plugin).
  // setenv is not thread-safe: load programs before starting threads that read the environment.
  const char* env = std::getenv(kCheckInputsEnv);
  if (env == nullptr) {
    ::setenv(kCheckInputsEnv, "1", 0);
    env = std::getenv(kCheckInputsEnv);
  }
  plugin_checks_inputs_ = env != nullptr && env[0] != '0';
  if (plugin_checks_inputs_) {
    log(LogLevel::Info, "%s: no contract in the package: the plugin checks its own inputs (%s=%s)", path_.c_str(),
        kCheckInputsEnv, env);
  } else {
    log(LogLevel::Warning, "%s: no contract in the package and %s=0: inputs are not checked; a wrong shape or "
        "layout gives wrong numbers. Unset %s or re-export with aoti-toolchain export", path_.c_str(),
        kCheckInputsEnv, kCheckInputsEnv);
  }
}

// Every load validates the constants result once (constants.cpp), or says what an older plugin loses.
void Method::check_constants() {
  if (has_entries_call(*plugin_)) {
    extract_constants(*plugin_, container_);
    if (!weights_pending_) constants_changed();
  } else {
    warn_no_entries_call(path_);
  }
}

void Method::share_pack_cache(const Method& other) {
  if (pack_cache_ == other.pack_cache_) return;
  pack_cache_->set_ranges(this, {});
  pack_cache_ = other.pack_cache_;
  constants_changed();
}

void Method::constants_changed() {
  pack_cache_->set_ranges(this, {});
  if (cuda_ || weights_pending_ || !has_entries_call(*plugin_) || !cpu::pack_weights_enabled()) return;
  std::map<std::string, const ConstantInfo*> by_fqn;
  const std::vector<ConstantInfo> infos = constant_infos(*plugin_, container_);
  for (const auto& c : infos) by_fqn[c.fqn] = &c;
  std::vector<std::pair<const void*, size_t>> ranges;
  for (const auto& e : extract_constants(*plugin_, container_)) {
    auto it = by_fqn.find(e.fqn);
    // Only what no kernel writes: Buffers are state the plugin updates in place (sessions rely on that
    // type too), folded constants are recomputed by the plugin. Frozen parameters of an eval() export
    // come as Unknown (torch 2.13): those are weights.
    if (it == by_fqn.end() || it->second->from_folded || it->second->type == kBuffer || it->second->type == kFolded)
      continue;
    const Tensor* t = from_handle(e.handle);
    if (t->device_type() != device_code::kCPU || t->numel() == 0) continue;
    int64_t lo = 0, hi = 0;
    for (size_t d = 0; d < t->sizes().size(); ++d) {
      const int64_t span = (t->sizes()[d] - 1) * t->strides()[d];
      (span < 0 ? lo : hi) += span;
    }
    const int64_t isz = static_cast<int64_t>(t->itemsize());
    ranges.emplace_back(static_cast<const char*>(t->data_ptr()) + lo * isz, static_cast<size_t>((hi - lo + 1) * isz));
  }
  pack_cache_->set_ranges(this, ranges);
  log(LogLevel::Debug, "%s: %zu constant(s) registered for packed GEMM weights", path_.c_str(), ranges.size());
}

void Method::load_pending_weights() {
  if (!weights_pending_) return;
  if (pending_zip_) {
    // The blob's CRC-32 is checked in the pass that reads it when the host uploads it to the device, else
    // before anything reads it (load_weights).
    const BlobCheck check{pending_zip_.get(), pending_blob_};
    load_weights(pending_zip_->unchecked_data(*pending_blob_), pending_blob_->size, path_ + ":" + pending_blob_->name,
                 &check, pending_zip_->file_backed());
  } else {
    MappedFile weights(pending_weights_path_, "weights blob");
    load_weights(weights.data(), weights.size(), pending_weights_path_, nullptr, true);
  }
  weights_supplied();
  constants_changed();
}

void Method::load_weights(const unsigned char* blob, size_t size, const std::string& from, const BlobCheck* check,
                          bool file_backed) {
  const AotiEntryPoints& fns = plugin_->fns;
  if (fns.AOTInductorModelUpdateConstantsFromBlob == nullptr) {
    throw Error(path_ + ": the plugin keeps its weights outside but does not export "
                "AOTInductorModelUpdateConstantsFromBlob; re-export it with embedded weights",
                AOTI_HOST_NOT_SUPPORTED);
  }
  uint64_t expected = 0;
  if (fns.AOTInductorModelContainerGetConstantsBlobSize != nullptr &&
      fns.AOTInductorModelContainerGetConstantsBlobSize(container_, &expected) == AOTI_RUNTIME_SUCCESS &&
      expected > size) {
    throw Error(from + ": weights blob is " + std::to_string(size) + " bytes, the plugin " + path_ + " needs " +
                    std::to_string(expected) + "; pass the blob exported with this plugin",
                AOTI_HOST_INVALID_ARGUMENT);
  }
  if (place_weights(blob, size, from, check, file_backed)) return;
  if (check != nullptr) check->zip->data(*check->entry);  // the plugin's loader reads checked bytes only
  if (file_backed) release_file_pages(blob, size);        // what the check read, until the plugin reads it
  const unsigned char* const mapped = blob;
  clear_last_error();
#if CUDA_AVAILABLE
  // The plugin copies the blob to the device with cudaMemcpy: from pageable memory that runs at a
  // fraction of the pinned bandwidth, so page-lock it first (a pinned copy by default; see upload_mode()).
  std::unique_ptr<cuda::PinnedBuffer> pinned;
  const auto t0 = std::chrono::steady_clock::now();
  if (cuda_ && cuda::upload_mode() != cuda::UploadMode::Pageable) {
    pinned = cuda::pinned_copy(blob, size);
    if (pinned) blob = static_cast<const unsigned char*>(pinned->data);
    else log(LogLevel::Warning, "%s: cannot allocate %zu bytes of pinned memory; uploading weights from pageable memory",
             path_.c_str(), size);
  }
  const auto t1 = std::chrono::steady_clock::now();
#endif
  if (file_backed && blob != mapped) release_file_pages(mapped, size);  // the plugin reads a pinned copy
  {
    // The plugin copies the blob out constant by constant: the mapping's pages go behind its copy.
    const ReleaseBehindCopy release(file_backed && blob == mapped ? FileRange{blob, size} : FileRange{});
    if (fns.AOTInductorModelUpdateConstantsFromBlob(container_, blob) != AOTI_RUNTIME_SUCCESS)
      throw Error(from + ": " + plugin_error("AOTInductorModelUpdateConstantsFromBlob"), AOTI_HOST_INVALID_PROGRAM);
  }
#if CUDA_AVAILABLE
  if (cuda_) {
    const auto t2 = std::chrono::steady_clock::now();
    cuda_->record_upload(size, std::chrono::duration<double>(t1 - t0).count(),
                         std::chrono::duration<double>(t2 - t1).count(),
                         std::chrono::duration<double>(t2 - t0).count());
    cuda_->record_upload_path(pinned ? "stage" : "pageable", 0, 0, 0);
  }
#endif
  log(LogLevel::Debug, "%s: loaded %zu bytes of weights from %s", path_.c_str(), size, from.c_str());
}

bool Method::place_weights(const unsigned char* blob, size_t size, const std::string& from, const BlobCheck* check,
                           bool file_backed) {
  if (constant_layouts_.empty()) return false;  // a package without layouts: the plugin's loader
  const char* device = "cpu";
#if CUDA_AVAILABLE
  if (cuda_) device = "cuda";
#endif
  BlobPlan plan;
  std::string why;
  if (!plan_blob(*plugin_, container_, constant_layouts_, size, device, &plan, &why)) {
    log(LogLevel::Info, "%s: weights loaded by the plugin itself: %s", path_.c_str(), why.c_str());
    return false;
  }
  std::unique_ptr<PlacedWeights> placed;
#if CUDA_AVAILABLE
  if (cuda_ && cuda::upload_mode() != cuda::UploadMode::Host) {
    log(LogLevel::Info, "%s: AOTI_HOST_WEIGHT_UPLOAD=%s: the plugin loads its weights itself", path_.c_str(),
        cuda::upload_mode_name(cuda::upload_mode()));
    return false;
  }
  if (cuda_) {
    cuda::UploadTimes t;
    const bool unchecked = check != nullptr && !check->zip->verified(*check->entry);
    uint32_t crc = 0;
    size_t upload = std::min(plan.total, size);
    void* mem = nullptr;
    if (prefetch_ && prefetch_->source() == blob && prefetch_->size() == size) {
      upload = size;  // the whole blob went, its CRC computed on the way
      const std::unique_ptr<cuda::WeightPrefetch, PrefetchDeleter> prefetched = std::move(prefetch_);
      mem = prefetched->take(&t, &crc);
    } else {
      mem = cuda::upload_to_device(blob, upload, cuda_->device(), cuda_->stream(), &t, unchecked ? &crc : nullptr);
    }
    placed = std::make_unique<PlacedWeights>(mem, &cuda::device_free);
    // the bytes the upload left out (past the last constant) complete the blob's CRC; a mismatch throws here,
    // before the plugin sees any of it (placed frees the device copy)
    if (unchecked) check->zip->verify(*check->entry, crc32(crc, blob + upload, size - upload));
    placed->hand_over(*plugin_, container_, plan, device_code::kCUDA, cuda_->device());
    cuda_->record_upload(upload, t.wall_s - t.dma_s, t.dma_s, t.wall_s);
    cuda_->record_upload_path("host", t.chunks, t.chunk_bytes, t.threads);
    log(LogLevel::Info, "%s: %zu constants (%llu bytes) from %s uploaded by the host in %zu chunks: %.2f ms copy "
        "engine (%.1f GB/s), %.2f ms in all (%.1f GB/s)", path_.c_str(), plan.items.size(),
        static_cast<unsigned long long>(plan.total), from.c_str(), t.chunks, t.dma_s * 1e3,
        t.dma_s > 0 ? plan.total / t.dma_s / 1e9 : 0.0, t.wall_s * 1e3, t.wall_s > 0 ? plan.total / t.wall_s / 1e9 : 0.0);
  }
#endif
  if (!placed) {
    // One pass: the CRC-32 computed as the bytes are copied (a mismatch throws here, before the plugin sees
    // any of them), the mapping's pages dropped behind the copy.
    const bool unchecked = check != nullptr && !check->zip->verified(*check->entry);
    uint32_t crc = 0;
    placed = place_on_host(blob, size, plan, unchecked ? &crc : nullptr, file_backed);
    if (unchecked) check->zip->verify(*check->entry, crc);
    placed->hand_over(*plugin_, container_, plan, device_code::kCPU, 0);
    log(LogLevel::Debug, "%s: %zu constants (%llu bytes) from %s placed by the host", path_.c_str(), plan.items.size(),
        static_cast<unsigned long long>(plan.total), from.c_str());
  }
  placed_weights_ = std::move(placed);
  if (file_backed) release_file_pages(blob, size);  // read once, never again: the program holds its copy
  return true;
}

Method::~Method() {
  if (pack_cache_) pack_cache_->set_ranges(this, {});  // before the container frees the memory they describe
  // The handles the container wrapped our placed weights in: read before it goes, deleted after it.
  std::vector<AtenTensorHandle> wrappers;
  if (container_ != nullptr && placed_weights_ && has_entries_call(*plugin_)) {
    try {
      std::vector<AtenTensorHandle> handles;
      for (const auto& e : extract_constants(*plugin_, container_)) handles.push_back(e.handle);
      wrappers = placed_weights_->wrappers_among(handles);
    } catch (const Error& e) {
      log(LogLevel::Warning, "%s", e.what());  // leaks the small handles, never frees what is in use
    }
  }
  if (container_ != nullptr) plugin_->fns.AOTInductorModelContainerDelete(container_);
  for (AtenTensorHandle h : wrappers) delete from_handle(h);
}

void Method::CudaStateDeleter::operator()(cuda::MethodState* s) const {
#if CUDA_AVAILABLE
  delete s;
#else
  (void)s;
#endif
}

std::string Method::input_name(size_t i) const {
  const std::string& name = contract_.inputs[i].name;
  return path_ + ": input " + std::to_string(i) + (name.empty() ? "" : " (" + name + ")");
}

void Method::check_run_arguments(const aoti_host_tensor_view* inputs, size_t num_inputs,
                                 const AtenTensorHandle* outputs, size_t num_outputs) const {
  if (weights_pending_) throw Error(path_ + ": its weights are not loaded yet", AOTI_HOST_INVALID_PROGRAM);
  if (num_inputs != num_inputs_)
    throw Error(path_ + ": the model takes " + std::to_string(num_inputs_) + " input(s), got " +
                    std::to_string(num_inputs), AOTI_HOST_INVALID_ARGUMENT);
  if (num_outputs < num_outputs_ || (num_outputs_ > 0 && outputs == nullptr))
    throw Error(path_ + ": room for " + std::to_string(num_outputs) + " output(s), the model produces " +
                    std::to_string(num_outputs_), AOTI_HOST_INVALID_ARGUMENT);
  if (num_inputs > 0 && inputs == nullptr) throw Error("inputs is NULL", AOTI_HOST_INVALID_ARGUMENT);
}

void Method::check_contract(size_t i, int32_t dtype, const std::vector<int64_t>& sizes) const {
  const TensorContract& c = contract_.inputs[i];
  if (dtype != c.dtype)
    throw Error(input_name(i) + ": dtype " + dtype_name(dtype) + ", the model was exported for " + dtype_name(c.dtype),
                AOTI_HOST_INVALID_ARGUMENT);
  if (sizes.size() != c.sizes.size())
    throw Error(input_name(i) + ": shape " + dims(sizes) + " has rank " + std::to_string(sizes.size()) +
                    ", the model was exported for shape " + dims(c.sizes), AOTI_HOST_INVALID_ARGUMENT);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] >= c.min_sizes[d] && sizes[d] <= c.max_sizes[d]) continue;
    std::string range = c.sizes[d] >= 0 ? std::to_string(c.sizes[d])
                                        : std::to_string(c.min_sizes[d]) + ".." + std::to_string(c.max_sizes[d]);
    // A contract narrowed to >= 2 records torch's 0/1 specialisation: say how to get the small sizes.
    const std::string why =
        sizes[d] <= 1 && c.min_sizes[d] == 2
            ? "; torch compiled it for sizes >= 2 there (it specialises sizes 0 and 1 while tracing): "
              "re-export with aoti-toolchain export and a minimum of 0 or 1, which compiles size-obliviously"
            : "";
    throw Error(input_name(i) + ": shape " + dims(sizes) + ", dimension " + std::to_string(d) + " must be " + range +
                    " (the model was exported for shape " + dims(c.sizes) + why + ")",
                AOTI_HOST_INVALID_ARGUMENT);
  }
}

std::vector<int64_t> Method::plugin_strides(size_t i, const std::vector<int64_t>& sizes) const {
  std::vector<int64_t> want = expected_strides(contract_.inputs[i].strides, sizes);
  if (layouts_[i].empty()) return want;
  if (layouts_[i].size() != sizes.size())
    throw Error(input_name(i) + ": the layout given for it has " + std::to_string(layouts_[i].size()) +
                    " strides, the input has shape " + dims(sizes), AOTI_HOST_INVALID_ARGUMENT);
  std::vector<int64_t> given = expected_strides(layouts_[i], sizes);
  if (has_contract_ && !same_layout(sizes, given, want))
    throw Error(input_name(i) + ": the layout given for it (" + layout_name(sizes, given) + ") is not the one the "
                    "package's contract records for the plugin (" + layout_name(sizes, want) +
                    "); drop the layout: with a contract the runtime knows it", AOTI_HOST_INVALID_ARGUMENT);
  return given;
}

Tensor* Method::input_tensor(size_t i, const aoti_host_tensor_view& v, std::vector<char>* caller_memory) const {
  if (v.ndim < 0 || (v.ndim > 0 && v.sizes == nullptr))
    throw Error(input_name(i) + ": ndim/sizes invalid", AOTI_HOST_INVALID_ARGUMENT);
  if (v.device_type != 0 && !(cuda_ && v.device_type == device_code::kCUDA))
    throw Error(input_name(i) + ": on device type " + std::to_string(v.device_type) + "; this program runs on " +
                    (cuda_ ? "cuda (give host or cuda memory)" : "the CPU"), AOTI_HOST_INVALID_ARGUMENT);
#if CUDA_AVAILABLE
  if (cuda_ && v.device_type == device_code::kCUDA && v.device_index != cuda_->device())
    throw Error(input_name(i) + ": in the memory of cuda:" + std::to_string(v.device_index) + ", the program runs on "
                    "cuda:" + std::to_string(cuda_->device()) + "; copy the input to that device (or pass host "
                    "memory), or load the program on cuda:" + std::to_string(v.device_index),
                AOTI_HOST_INVALID_ARGUMENT);
#endif
  if (!dtype_is_supported(v.dtype))
    throw Error(input_name(i) + ": dtype " + dtype_name(v.dtype) + " is not supported", AOTI_HOST_INVALID_ARGUMENT);
  std::vector<int64_t> sizes(v.sizes, v.sizes + v.ndim);
  std::vector<int64_t> strides =
      v.strides != nullptr ? std::vector<int64_t>(v.strides, v.strides + v.ndim) : Tensor::contiguous_strides(sizes);
  int64_t numel = 1;
  for (auto s : sizes) {
    if (s < 0) throw Error(input_name(i) + ": negative size", AOTI_HOST_INVALID_ARGUMENT);
    numel *= s;
  }
  if (numel > 0 && v.data == nullptr) throw Error(input_name(i) + ": data is NULL", AOTI_HOST_INVALID_ARGUMENT);
  if (has_contract_) check_contract(i, v.dtype, sizes);
  std::vector<int64_t> want = plugin_strides(i, sizes);
  const bool convert = !same_layout(sizes, strides, want);
  if (convert && strict_)
    throw Error(input_name(i) + ": " + layout_name(sizes, strides) + ", the plugin was built for " +
                    layout_name(sizes, want) + "; strict mode refuses to convert: pass the array in that layout "
                    "or drop --strict", AOTI_HOST_INVALID_ARGUMENT);
  if (convert)  // the plugin indexes inputs with the strides it was built for and never checks them
    log(LogLevel::Debug, "%s: %s converted to the plugin's %s", input_name(i).c_str(),
        layout_name(sizes, strides).c_str(), layout_name(sizes, want).c_str());
  Tensor* t = Tensor::from_blob(v.data, v.dtype, std::move(sizes), std::move(strides), 0, v.device_type,
                                v.device_type ? v.device_index : 0);
  if (convert) {
    std::unique_ptr<Tensor> borrowed(t);
    t = Tensor::empty_strided(v.dtype, borrowed->sizes(), std::move(want), t->device_type(), t->device_index());
    AtenTensorHandle dst = to_handle(t);
    if (aoti_torch_copy_(dst, to_handle(borrowed.get()), 0) != AOTI_TORCH_SUCCESS) {
      delete t;
      throw Error(input_name(i) + ": layout conversion failed: " + last_error(), AOTI_HOST_INTERNAL);
    }
  }
#if CUDA_AVAILABLE
  if (cuda_) {  // host inputs are copied to the device; device inputs are used as they are
    caller_memory->push_back(!convert && v.device_type == device_code::kCUDA);
    t = cuda_->to_device(t);
  }
#else
  (void)caller_memory;
#endif
  return t;
}

void Method::run(const aoti_host_tensor_view* inputs, size_t num_inputs, AtenTensorHandle* outputs,
                 size_t num_outputs) {
  check_run_arguments(inputs, num_inputs, outputs, num_outputs);
  // A CUDA method's device and stream are current for everything of the run (input conversions and uploads
  // included); the caller's are restored when it returns.
  const StreamScopePtr scope = stream_scope(*this);
  std::vector<AtenTensorHandle> handles;
  handles.reserve(num_inputs);
  std::vector<char> caller_memory;  // CUDA: input i is the caller's device memory, used in place
  auto release = [&handles]() {
    for (auto h : handles) delete from_handle(h);
  };
  try {
    for (size_t i = 0; i < num_inputs; ++i) handles.push_back(to_handle(input_tensor(i, inputs[i], &caller_memory)));
    if (has_contract_ && contract_.has_shared_sizes()) {
      // Inputs that share a size must agree before the plugin reads one by the other's extent.
      std::vector<const int64_t*> sizes(num_inputs);
      for (size_t i = 0; i < num_inputs; ++i) sizes[i] = inputs[i].sizes;
      std::vector<int64_t> values;
      bind_sizes(contract_, sizes.data(), path_, values);
    }
  } catch (...) {
    release();
    throw;
  }
  for (size_t i = 0; i < num_outputs_; ++i) outputs[i] = nullptr;
  auto free_outputs = [&]() {
    for (size_t i = 0; i < num_outputs_; ++i) {
      if (outputs[i] != nullptr) aoti_torch_delete_tensor_object(outputs[i]);
      outputs[i] = nullptr;
    }
  };
  clear_last_error();
#if CUDA_AVAILABLE
  if (cuda_) {
    try {
      const CerrCapture capture(plugin_cerr_);
      cuda_->run(plugin_->fns, container_, handles, caller_memory, outputs, num_outputs_,
                 [this](const char* call) { return path_ + ": " + plugin_error(call); });
    } catch (const Error& e) {
      release();
      free_outputs();
      if (e.status() != AOTI_HOST_RUN_FAILED) throw;
      const std::string text = e.what(), prefix = path_ + ": ";
      throw run_error(text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text);
    } catch (...) {
      release();
      free_outputs();
      throw;
    }
    return;
  }
#endif
  // Run takes ownership of the input handles (the plugin deletes them); the caller owns the outputs. The
  // CPU kernels it calls on this thread take packed copies of this method's constant weights.
  AOTIRuntimeError rc;
  {
    const cpu::PackScope packed(pack_cache_.get());
    const CerrCapture capture(plugin_cerr_);
    rc = plugin_->fns.AOTInductorModelContainerRun(container_, handles.data(), handles.size(), outputs, num_outputs_,
                                                   nullptr, nullptr);
  }
  if (rc != AOTI_RUNTIME_SUCCESS) {
    free_outputs();
    throw run_error(plugin_error("AOTInductorModelContainerRun"));
  }
}

void Method::set_input_layout(size_t i, std::vector<int64_t> strides) {
  if (i >= num_inputs_)
    throw Error(path_ + ": input index " + std::to_string(i) + " out of range (the model takes " +
                    std::to_string(num_inputs_) + ")", AOTI_HOST_INVALID_ARGUMENT);
  for (int64_t s : strides)
    if (s < 0) throw Error(path_ + ": input " + std::to_string(i) + ": layout strides " + dims(strides) +
                               " must not be negative", AOTI_HOST_INVALID_ARGUMENT);
  layouts_[i] = std::move(strides);
}

}  // namespace aoti_host
