// One method of a program (program.h): one plugin, its container, its weights and its input/output contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/c_api_types.h"
#include "aoti_host/entry_points.h"
#include "aoti_host/error.h"
#include "base/zip.h"
#include "host/contract.h"
#include "host/plugin.h"
#include "host/weights.h"

namespace aoti_host {
namespace cuda {
class MethodState;  // host/cuda/method_state.h; only created by a CUDA build
class WeightPrefetch;  // aoti_host/cuda/cuda.h; likewise
}
namespace cpu {
class PackCache;  // shims/packed_gemm.h
}
class Error;
class Package;
class Tensor;
struct Device;
class Method;

// A CUDA method's device and stream made current on this thread while it lives (method.cpp); null for a
// cpu method.
struct StreamScope;
struct StreamScopeDeleter {
  void operator()(StreamScope* s) const;
};
using StreamScopePtr = std::unique_ptr<StreamScope, StreamScopeDeleter>;
StreamScopePtr stream_scope(const Method& method);

// The device a load of `path` asks for (aoti_host_load_options::device), checked to be well formed and, for
// cuda:N, a device this process sees; throws Error naming the fix otherwise. Nothing of `path` is read.
Device load_device(const char* device, const std::string& path);

class Method {
 public:
  // defer_weights: a plugin that keeps its weights in a blob gets none yet (weights_pending()); the caller
  // supplies them (weight sharing, program.cpp) or calls load_pending_weights().
  static std::unique_ptr<Method> load(const std::string& path, const aoti_host_load_options& options,
                                       bool defer_weights = false);
  ~Method();
  Method(const Method&) = delete;
  Method& operator=(const Method&) = delete;

  size_t num_inputs() const { return num_inputs_; }
  size_t num_outputs() const { return num_outputs_; }
  bool has_contract() const { return has_contract_; }
  const TensorContract& input(size_t i) const { return contract_.inputs.at(i); }
  const TensorContract& output(size_t i) const { return contract_.outputs.at(i); }
  const std::string& path() const { return path_; }
  const Plugin& plugin() const { return *plugin_; }
  AOTInductorModelContainerHandle container() const { return container_; }
  bool weights_pending() const { return weights_pending_; }
  void load_pending_weights();
  void weights_supplied() { weights_pending_ = false, pending_zip_.reset(); }
  // Tells this method's pack cache which memory holds its constants (packed_gemm.h: packed copies of
  // constant weights, used by the CPU kernels during its runs). Every path that changes the container's
  // constants calls it afterwards, which drops the packed copies of the old ones; ~Method drops them
  // too. Buffer (mutable state) and constant-folded constants are never registered.
  void constants_changed();
  // Uses `other`'s pack cache from now on (the methods of one program share one, so weights they
  // share are packed once).
  void share_pack_cache(const Method& other);

  // strict: an input whose layout differs from the one the plugin was built for is refused instead of
  // converted.
  void set_strict(bool strict) { strict_ = strict; }
  // The layout the plugin expects for input i, as strides (only their order matters: they are
  // recomputed for the actual sizes). For a package without a contract; with one, it must agree.
  void set_input_layout(size_t i, std::vector<int64_t> strides);

  // Checks the inputs against the contract (throws Error with AOTI_HOST_INVALID_ARGUMENT), converts
  // layouts the plugin wasn't built for, runs, and fills `outputs` (owned by the caller).
  void run(const aoti_host_tensor_view* inputs, size_t num_inputs, AtenTensorHandle* outputs, size_t num_outputs);

  // The CUDA side of a program loaded with device "cuda[:N]"; null on the CPU.
  cuda::MethodState* cuda_state() const { return cuda_.get(); }
  bool has_single_threaded_run() const { return plugin_->fns.AOTInductorModelContainerRunSingleThreaded != nullptr; }

 private:
  Method() = default;
  std::string plugin_error(const char* call) const;
  // The steps of load(), in order.
  void adopt_package(const Package& package);
  void create_device_state(const Device& device);
  void create_container(const Device& device, size_t num_models, const std::string& cubin_dir);
  void apply_weights_policy(const aoti_host_load_options& options, const Package& package, bool defer_weights);
  void read_signature();
  void enable_plugin_input_checks();
  void check_constants();
  // A blob read straight from a package member whose CRC-32 has not been checked yet: whoever reads the bytes
  // checks them first (zip->data), or in the same pass (zip->verify with the CRC it computed).
  struct BlobCheck {
    const ZipArchive* zip;
    const ZipEntry* entry;
  };
  // `file_backed`: the blob is a clean read-only mapping of its file, whose pages are dropped behind the copy.
  void load_weights(const unsigned char* blob, size_t size, const std::string& from, const BlobCheck* check,
                    bool file_backed);

  std::string path_;
  std::shared_ptr<Plugin> plugin_;
  AOTInductorModelContainerHandle container_ = nullptr;
  size_t num_inputs_ = 0, num_outputs_ = 0;
  bool has_contract_ = false;
  bool strict_ = false;
  void* plugin_cerr_ = nullptr;  // the std::cerr a plugin without AOTInductorGetLastError writes its reason to
  bool plugin_checks_inputs_ = false;  // AOTI_RUNTIME_CHECK_INPUTS was on for the plugin's first Run
  Contract contract_;  // symbols, size expressions, inputs and outputs (contract.h)
  std::vector<std::vector<int64_t>> layouts_;  // per input: strides given by set_input_layout, or empty
  bool weights_pending_ = false;  // a blob-mode plugin whose weights are not in yet: Run would crash
  std::string pending_weights_path_;
  std::shared_ptr<ZipArchive> pending_zip_;
  const ZipEntry* pending_blob_ = nullptr;
  struct CudaStateDeleter {
    void operator()(cuda::MethodState* s) const;
  };
  std::unique_ptr<cuda::MethodState, CudaStateDeleter> cuda_;
  // A package's weight blob already on its way to the device while the load goes on (start_weight_prefetch);
  // place_weights takes it. Waited for (and its memory freed if untaken) before cuda_ goes.
  struct PrefetchDeleter {
    void operator()(cuda::WeightPrefetch* w) const;
  };
  std::unique_ptr<cuda::WeightPrefetch, PrefetchDeleter> prefetch_;
  void start_weight_prefetch(const aoti_host_load_options& options, const Package& package, bool defer_weights);
  // Blob weights placed by the host (weights.h): the package's layouts, and the memory the constants live
  // in (destroyed before cuda_, after the container: ~Method deletes the container first).
  std::vector<ConstantLayout> constant_layouts_;
  std::unique_ptr<PlacedWeights> placed_weights_;
  std::shared_ptr<cpu::PackCache> pack_cache_;  // this method's (or its program's) packed weights
  bool place_weights(const unsigned char* blob, size_t size, const std::string& from, const BlobCheck* check,
                     bool file_backed);

  // The steps of run(), in order. input_tensor: input i checked (and converted to the plugin's layout, copied to
  // the device on CUDA) as a new tensor the caller owns.
  std::string input_name(size_t i) const;  // "<path>: input i (name)", for messages
  void check_run_arguments(const aoti_host_tensor_view* inputs, size_t num_inputs, const AtenTensorHandle* outputs,
                           size_t num_outputs) const;
  Tensor* input_tensor(size_t i, const aoti_host_tensor_view& v, std::vector<char>* caller_memory) const;
  void check_contract(size_t i, int32_t dtype, const std::vector<int64_t>& sizes) const;
  std::vector<int64_t> plugin_strides(size_t i, const std::vector<int64_t>& sizes) const;
  Error run_error(std::string msg) const;  // what a failed Run means, with the fix
};

}  // namespace aoti_host
