#include "host/package.h"

#include <cstdlib>
#include <cstring>

#include "aoti_host/device_name.h"
#include "aoti_host/error.h"
#include "aoti_host/input_file.h"
#include "aoti_host/log.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/status.h"
#include "host/plugin_store.h"

namespace aoti_host {
namespace {

constexpr const char* kContractEntry = package_layout::kContractEntry;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A name ending in .pt2 in any case ("model.PT2" too): what the user means to be a package.
bool named_pt2(const std::string& path) {
  if (path.size() < 4) return false;
  std::string tail = path.substr(path.size() - 4);
  for (char& c : tail) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return tail == ".pt2";
}

std::string member_text(const ZipArchive& zip, const ZipEntry& e) {
  return std::string(reinterpret_cast<const char*>(zip.data(e)), e.size);
}

}  // namespace

Device parse_device(const char* device) {
  DeviceName parsed;
  std::string why;
  if (!parse_device_name(device, &parsed, &why)) throw Error(why, AOTI_HOST_INVALID_ARGUMENT);
  Device d;
  if (!parsed.cuda) return d;
  if (CUDA_AVAILABLE == 0)
    throw Error(std::string("device \"") + device + "\": this runtime was built without CUDA (scons cuda=on)",
                AOTI_HOST_NOT_SUPPORTED);
  d.cuda = true;
  d.index = parsed.index;
  // The plugin's container is created for this exact device, never for "whichever is current".
  d.name = "cuda:" + std::to_string(parsed.index);
  return d;
}

Package Package::open(const std::string& path) {
  Package pkg;
  pkg.path_ = path;
  {
    // Only a regular file: a FIFO or device given as the model is refused here, before anything reads it.
    const InputFile file(path, "model (.pt2 package or plugin .so)");
    char magic[4] = {};
    if (file.size() >= 4) file.read_at(0, magic, 4);
    if (file.size() < 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
      // Not a zip: a plugin .so, unless it is named .pt2 and is not ELF either (a renamed plugin still
      // loads): then it is a damaged or wrong file given as the package, bad input like a malformed .npy.
      const bool elf = file.size() >= 4 && std::memcmp(magic, "\x7f" "ELF", 4) == 0;
      if (!elf && named_pt2(path))
        throw Error(path + ": not a .pt2 package (not a zip archive" +
                        (file.size() == 0 ? std::string(": the file is empty") : std::string()) +
                        "); pass the .pt2 written by aoti-toolchain export or torch._inductor.aoti_compile_and_package "
                        "(re-export it, or copy it again if this one was damaged)",
                    AOTI_HOST_INVALID_ARGUMENT);
      return pkg;  // a plugin .so
    }
  }
  try {
    pkg.zip_ = std::make_shared<ZipArchive>(path);
  } catch (const Error& e) {
    // The file given is no readable archive (truncated, damaged): bad input, the exit code verify and
    // inspect give the same file (toolchain/spec/exit_codes.toml, bad_input).
    throw Error(e.what(), AOTI_HOST_INVALID_ARGUMENT);
  }
  pkg.find_members();
  pkg.read_contract();
  pkg.read_constant_layouts();
  pkg.read_target();
  return pkg;
}

void Package::find_members() {
  std::vector<const ZipEntry*> sos;
  for (const auto& e : zip_->entries()) {
    if (e.name.find(package_layout::kPluginDir) == std::string::npos) continue;
    if (ends_with(e.name, ".so")) sos.push_back(&e);
    if (ends_with(e.name, "_weights.blob")) blob_ = &e;
    if (ends_with(e.name, ".cubin")) cubins_.push_back(&e);
  }
  if (sos.empty())
    throw Error(path_ + ": package holds no plugin (no data/aotinductor/*/*.so)", AOTI_HOST_INVALID_PROGRAM);
  if (sos.size() > 1)
    throw Error(path_ + ": package holds " + std::to_string(sos.size()) +
                    " plugins; this runtime loads one plugin per package", AOTI_HOST_NOT_SUPPORTED);
  plugin_ = sos[0];
  prefix_ = plugin_->name.substr(0, plugin_->name.find('/') + 1);
}

void Package::read_contract() {
  const ZipEntry* c = zip_->find(prefix_ + kContractEntry);
  if (c == nullptr) return;
  const std::string text = member_text(*zip_, *c);
  try {
    contract_ = parse_contract(text, path_ + ":" + c->name);
    has_contract_ = true;
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; re-export the model with aoti-toolchain export", AOTI_HOST_INVALID_PROGRAM);
  }
}

void Package::read_constant_layouts() {
  if (blob_ == nullptr) return;
  const ZipEntry* c = zip_->find(prefix_ + kConstantsEntry);
  if (c == nullptr) {
    derive_constant_layouts();
    return;
  }
  const std::string text = member_text(*zip_, *c);
  try {
    constant_layouts_ = parse_constant_layouts(text, path_ + ":" + c->name, blob_->size);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; re-export the model with aoti-toolchain export", AOTI_HOST_INVALID_PROGRAM);
  }
}

void Package::derive_constant_layouts() {
  // A package torch wrote: the layouts from the wrapper source its plugin was built from, the one beside it.
  const std::string dir = plugin_->name.substr(0, plugin_->name.rfind('/') + 1);
  const ZipEntry* wrapper = nullptr;
  for (const auto& e : zip_->entries()) {
    if (e.name.size() <= dir.size() || e.name.compare(0, dir.size(), dir) != 0 || !ends_with(e.name, ".wrapper.cpp") ||
        e.name.find('/', dir.size()) != std::string::npos)
      continue;
    if (wrapper != nullptr) {
      log(LogLevel::Info, "%s: several generated wrappers beside the plugin: it loads its weights blob itself",
          path_.c_str());
      return;
    }
    wrapper = &e;
  }
  if (wrapper == nullptr) {
    log(LogLevel::Info, "%s: no constant layouts and no generated wrapper to derive them from: the plugin loads its "
        "weights blob itself", path_.c_str());
    return;
  }
  std::string why;
  if (!aoti_host::derive_constant_layouts(member_text(*zip_, *wrapper), blob_->size, &constant_layouts_, &why)) {
    constant_layouts_.clear();
    log(LogLevel::Info, "%s: constant layouts not derived from %s (%s): the plugin loads its weights blob itself",
        path_.c_str(), wrapper->name.c_str(), why.c_str());
    return;
  }
  log(LogLevel::Debug, "%s: %zu constant layouts derived from %s", path_.c_str(), constant_layouts_.size(),
      wrapper->name.c_str());
}

void Package::read_target() {
  const ZipEntry* t = zip_->find(prefix_ + package_layout::kTargetEntry);
  if (t == nullptr) return;
  try {
    target_ = parse_target(member_text(*zip_, *t), path_ + ":" + t->name);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; re-export the model with aoti-toolchain export", AOTI_HOST_INVALID_PROGRAM);
  }
}

PluginSource Package::store_plugin() const {
  if (!zip_) return {path_, path_, ""};
  // The plugin loads from a sealed memfd or the private cache (plugin_store.h), never from a shared path;
  // the same bytes map once per process however often they are loaded.
  PluginSource src;
  src.shown = path_ + ":" + plugin_->name;
  try {
    src.load_path = aoti_host::store_plugin(zip_->data(*plugin_), plugin_->size, src.shown).load_path;
    // The plugin now loads from its store: the package's pages of it (embedded weights too) need not stay.
    if (zip_->file_backed()) release_file_pages(zip_->unchecked_data(*plugin_), plugin_->size);
    std::vector<CubinMember> members;
    for (const ZipEntry* c : cubins_) members.push_back({c->name, zip_->data(*c), c->size});
    if (!members.empty()) src.cubin_dir = store_cubins(members);
  } catch (const Error& e) {
    throw Error(path_ + ": " + e.what(), e.status() == AOTI_HOST_LOAD_FAILED ? AOTI_HOST_LOAD_FAILED
                                                                              : AOTI_HOST_INVALID_PROGRAM);
  }
  return src;
}

}  // namespace aoti_host
