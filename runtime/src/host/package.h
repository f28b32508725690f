// A model file opened for loading: a .pt2 package (a zip written by `aoti-toolchain export` or torch) or a
// bare plugin .so. For a package, its members are found and checked here: the one plugin .so, the
// weights blob, the cubins of a CUDA plugin, the input/output contract and the blob's constant layouts.
// Nothing is extracted until store_plugin().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/zip.h"
#include "host/contract.h"
#include "host/preflight.h"
#include "host/weights.h"

namespace aoti_host {

// The device a program runs on, parsed from aoti_host_load_options::device ("cpu", "cuda", "cuda:N").
struct Device {
  std::string name = "cpu";  // what the plugin's container is created with: "cpu" or "cuda:N" ("cuda" is cuda:0)
  bool cuda = false;
  int index = 0;
};
// Throws Error: INVALID_ARGUMENT for anything that is not cpu, cuda or cuda:N (aoti_host/device_name.h),
// NOT_SUPPORTED for a CUDA device in a runtime built without CUDA. Null means "cpu". Whether the device
// exists is checked by the load (cuda::require_device).
Device parse_device(const char* device);

// Where the plugin loads from (plugin_store.h) and what messages call it.
struct PluginSource {
  std::string load_path;  // what dlopen opens
  std::string shown;      // the file, or package:member
  std::string cubin_dir;  // a CUDA plugin's kernels (<dir>/<name>.cubin); empty when it has none
};

class Package {
 public:
  // Opens `path` (a regular file only): a zip is read as a package and its members checked; anything
  // else is taken for a plugin .so. Throws Error: INVALID_PROGRAM for a malformed package, one without a
  // plugin, or a bad contract or constants file; NOT_SUPPORTED for one with several plugins.
  static Package open(const std::string& path);

  const std::string& path() const { return path_; }
  bool is_package() const { return zip_ != nullptr; }
  // Stores the plugin (and cubins) where they load from: a sealed memfd or the private cache for a
  // package member, the file itself for a bare .so. Throws Error naming the package.
  PluginSource store_plugin() const;

  bool has_contract() const { return has_contract_; }
  const Contract& contract() const { return contract_; }
  // The blob's constant layouts (empty: none, or no blob in the package).
  const std::vector<ConstantLayout>& constant_layouts() const { return constant_layouts_; }
  // The package's weights blob (null: none); valid while archive() is alive.
  const ZipEntry* weights_blob() const { return blob_; }
  const std::shared_ptr<ZipArchive>& archive() const { return zip_; }
  // What the plugin needs of the machine (preflight.h); not present for a bare .so or an older package.
  const TargetNeeds& target() const { return target_; }
  // The plugin's bytes in the package (a bare .so: its path), for the preflight to decode without a record.
  PluginCode plugin_code() const {
    return zip_ ? PluginCode{zip_->data(*plugin_), plugin_->size, path_ + ":" + plugin_->name, ""}
                : PluginCode{nullptr, 0, path_, path_};
  }

 private:
  void find_members();
  void read_contract();
  void read_constant_layouts();
  void derive_constant_layouts();
  void read_target();

  std::string path_;
  std::shared_ptr<ZipArchive> zip_;  // null for a bare .so
  const ZipEntry* plugin_ = nullptr;
  const ZipEntry* blob_ = nullptr;
  std::vector<const ZipEntry*> cubins_;
  std::string prefix_;  // the model's directory in the package, with its '/'
  bool has_contract_ = false;
  Contract contract_;
  std::vector<ConstantLayout> constant_layouts_;
  TargetNeeds target_;
};

}  // namespace aoti_host
