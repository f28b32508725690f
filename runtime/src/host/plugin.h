// Loading a plugin .so: checks before dlopen (shims it imports that this host lacks; C++ runtime
// symbols with no C++ runtime in the global scope), the libstdc++ preload, dlopen(RTLD_NOW), and the
// table of AOTInductor entry points.
#pragma once

#include <memory>
#include <string>

#include "aoti_host/entry_points.h"

namespace aoti_host {

struct Plugin {
  std::string path;
  void* handle = nullptr;
  AotiEntryPoints fns{};
  // Bytes of weights compiled into the .so (the _binary_constants_bin_* range); <= 8 means the
  // plugin expects its weights from a blob. -1 when the plugin doesn't say.
  long long embedded_weight_bytes = -1;

  // The plugin's own message for its last failed call (AOTInductorGetLastError, torch >= 2.13); "" when it
  // has none or lacks the call.
  std::string last_error() const;

  ~Plugin();
};

// Throws Error with status AOTI_HOST_LOAD_FAILED (or NOT_FOUND / INVALID_PROGRAM) and the reason.
// `shown` is what messages and Plugin::path call it (e.g. package.pt2:member for /proc/self/fd/N); "" = path.
std::shared_ptr<Plugin> open_plugin(const std::string& path, const std::string& shown = "");

}  // namespace aoti_host
