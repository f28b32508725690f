#include "host/weights.h"

#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/package_records.h"
#include "aoti_host/status.h"
#include "base/json.h"
#include "host/contract.h"

namespace aoti_host {
namespace {

// A list of integer literals, each in [0, kMaxContractInt].
std::vector<int64_t> int_list(const Json* j, const std::string& what) {
  if (j == nullptr || !j->is_array()) throw Error(what + " is missing or not a list", AOTI_HOST_INVALID_PROGRAM);
  if (j->array().size() > kMaxContractRank)
    throw Error(what + " has more than " + std::to_string(kMaxContractRank) + " entries", AOTI_HOST_INVALID_PROGRAM);
  std::vector<int64_t> out;
  for (const auto& v : j->array()) {
    if (!v.is_integer() || v.integer() < 0 || v.integer() > kMaxContractInt)
      throw Error(what + " has an entry that is not an integer in [0, 2^62]", AOTI_HOST_INVALID_PROGRAM);
    out.push_back(v.integer());
  }
  return out;
}

int64_t non_negative(const Json* j, const std::string& what) {
  if (j == nullptr || !j->is_integer() || j->integer() < 0 || j->integer() > kMaxContractInt)
    throw Error(what + " is missing or not an integer in [0, 2^62]", AOTI_HOST_INVALID_PROGRAM);
  return j->integer();
}

// ": <the plugin's message>", or nothing.
std::string plugin_message(const Plugin& plugin) {
  const std::string m = plugin.last_error();
  return m.empty() ? m : ": " + m;
}

}  // namespace

bool storage_nbytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, uint64_t itemsize,
                    uint64_t offset, uint64_t* out) {
  uint64_t extent = 1;  // elements from the storage offset to the last element, inclusive
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      *out = 0;
      return true;
    }
  }
  for (size_t i = 0; i < sizes.size() && i < strides.size(); ++i) {
    uint64_t span = 0;
    if (sizes[i] < 0 || strides[i] < 0 ||
        __builtin_mul_overflow(static_cast<uint64_t>(strides[i]), static_cast<uint64_t>(sizes[i] - 1), &span) ||
        __builtin_add_overflow(extent, span, &extent))
      return false;
  }
  return !__builtin_add_overflow(extent, offset, &extent) && !__builtin_mul_overflow(extent, itemsize, out);
}

std::vector<ConstantLayout> parse_constant_layouts(const std::string& text, const std::string& what,
                                                   uint64_t blob_size) {
  Json j = Json::parse(text, what);
  if (!j.is_object()) throw Error(what + ": the constant layouts are not a JSON object", AOTI_HOST_INVALID_PROGRAM);
  namespace rc = records::constant;
  const Json* schema = j.get(records::constants::kSchema);
  if (schema == nullptr || !schema->is_integer() || schema->integer() != package_layout::kConstantsSchema)
    throw Error(what + ": " + records::constants::kSchema + " is missing or not " + std::to_string(package_layout::kConstantsSchema) +
                    " (written by a newer aoti-toolchain?)",
                AOTI_HOST_INVALID_PROGRAM);
  const Json* list = j.get(records::constants::kConstants);
  if (list == nullptr || !list->is_array())
    throw Error(what + ": " + records::constants::kConstants + " is missing or not a list", AOTI_HOST_INVALID_PROGRAM);
  std::vector<ConstantLayout> out;
  uint64_t total = 0;  // each constant sits at the running sum of the data sizes before it
  for (size_t i = 0; i < list->array().size(); ++i) {
    const Json& c = list->array()[i];
    const std::string w = what + ": " + records::constants::kConstants + "[" + std::to_string(i) + "]";
    if (!c.is_object()) throw Error(w + " is not an object", AOTI_HOST_INVALID_PROGRAM);
    ConstantLayout l;
    const Json* name = c.get(rc::kName);
    if (name == nullptr || !name->is_string() || name->string().empty())
      throw Error(w + "." + rc::kName + " is missing or not a non-empty string", AOTI_HOST_INVALID_PROGRAM);
    l.name = name->string();
    l.sizes = int_list(c.get(rc::kShape), w + "." + rc::kShape);
    l.strides = int_list(c.get(rc::kStride), w + "." + rc::kStride);
    if (l.sizes.size() != l.strides.size())
      throw Error(w + ": " + rc::kShape + " and " + rc::kStride + " differ in rank", AOTI_HOST_INVALID_PROGRAM);
    l.offset = non_negative(c.get(rc::kOffset), w + "." + rc::kOffset);
    l.data_size = static_cast<uint64_t>(non_negative(c.get(rc::kDataSize), w + "." + rc::kDataSize));
    if (const Json* d = c.get(rc::kDevice)) {
      if (!d->is_string()) throw Error(w + "." + rc::kDevice + " is not a string", AOTI_HOST_INVALID_PROGRAM);
      l.device = d->string();
    }
    // The dtype, when recorded as a name this runtime knows, gives the bytes the layout spans; otherwise
    // at least one byte per element (plan_blob checks again with the plugin's own dtype).
    uint64_t itemsize = 1;
    if (const Json* d = c.get(rc::kDtype)) {
      if (!d->is_string()) throw Error(w + "." + rc::kDtype + " is not a string", AOTI_HOST_INVALID_PROGRAM);
      const int32_t code = dtype_from_name(d->string());
      if (code >= 0) itemsize = element_size(code);
    }
    uint64_t need = 0;
    if (!storage_nbytes(l.sizes, l.strides, itemsize, static_cast<uint64_t>(l.offset), &need) || need > l.data_size)
      throw Error(w + ": shape " + list_str(l.sizes) + ", stride " + list_str(l.strides) + " and offset " +
                      std::to_string(l.offset) + " span more than its data_size of " + std::to_string(l.data_size) +
                      " bytes", AOTI_HOST_INVALID_PROGRAM);
    if (__builtin_add_overflow(total, l.data_size, &total) || total > blob_size)
      throw Error(w + " ends beyond the weights blob (" + std::to_string(blob_size) + " bytes)",
                  AOTI_HOST_INVALID_PROGRAM);
    out.push_back(std::move(l));
  }
  return out;
}

bool plan_blob(const Plugin& plugin, AOTInductorModelContainerHandle container,
               const std::vector<ConstantLayout>& layouts, size_t blob_size, const std::string& device_type_name,
               BlobPlan* out, std::string* why) {
  const AotiEntryPoints& f = plugin.fns;
  const char* missing = f.AOTInductorModelContainerUpdateUserManagedConstantBufferPairs == nullptr
                            ? "AOTInductorModelContainerUpdateUserManagedConstantBufferPairs"
                        : f.AOTInductorModelContainerGetNumConstants == nullptr ? "AOTInductorModelContainerGetNumConstants"
                        : f.AOTInductorModelContainerGetConstantName == nullptr ? "AOTInductorModelContainerGetConstantName"
                        : f.AOTInductorModelContainerGetConstantDataSize == nullptr
                            ? "AOTInductorModelContainerGetConstantDataSize"
                        : f.AOTInductorModelContainerGetConstantDtype == nullptr ? "AOTInductorModelContainerGetConstantDtype"
                        : f.AOTInductorModelContainerGetConstantFromFolded == nullptr
                            ? "AOTInductorModelContainerGetConstantFromFolded"
                            : nullptr;
  if (missing != nullptr) {
    *why = std::string("the plugin does not export ") + missing;
    return false;
  }
  const std::string& path = plugin.path;
  size_t n = 0;
  if (f.AOTInductorModelContainerGetNumConstants(container, &n) != AOTI_RUNTIME_SUCCESS)
    throw Error(path + ": AOTInductorModelContainerGetNumConstants failed" + plugin_message(plugin),
                AOTI_HOST_INVALID_PROGRAM);
  if (n != layouts.size())
    throw Error(path + ": the package lists " + std::to_string(layouts.size()) + " constant layouts, the plugin has " +
                    std::to_string(n) + " constants; re-export the model with aoti-toolchain export",
                AOTI_HOST_INVALID_PROGRAM);
  BlobPlan plan;
  for (size_t i = 0; i < n; ++i) {
    const ConstantLayout& l = layouts[i];
    const char* name = nullptr;
    size_t data_size = 0;
    int32_t dtype = -1;
    bool folded = false;
    if (f.AOTInductorModelContainerGetConstantName(container, i, &name) != AOTI_RUNTIME_SUCCESS || name == nullptr ||
        f.AOTInductorModelContainerGetConstantDataSize(container, i, &data_size) != AOTI_RUNTIME_SUCCESS ||
        f.AOTInductorModelContainerGetConstantDtype(container, i, &dtype) != AOTI_RUNTIME_SUCCESS ||
        f.AOTInductorModelContainerGetConstantFromFolded(container, i, &folded) != AOTI_RUNTIME_SUCCESS)
      throw Error(path + ": cannot read constant " + std::to_string(i) + "'s name, size, dtype or origin" +
                      plugin_message(plugin), AOTI_HOST_INVALID_PROGRAM);
    if (l.name != name || l.data_size != data_size)
      throw Error(path + ": constant " + std::to_string(i) + " is " + name + " (" + std::to_string(data_size) +
                      " bytes) in the plugin but " + l.name + " (" + std::to_string(l.data_size) +
                      " bytes) in the package's layouts; re-export the model with aoti-toolchain export",
                  AOTI_HOST_INVALID_PROGRAM);
    if (folded) {
      *why = std::string("constant ") + name + " is constant-folded (the plugin computes it into its own buffer)";
      return false;
    }
    if (!l.device.empty() && l.device != device_type_name) {
      *why = std::string("constant ") + name + " lives on " + l.device + ", the program on " + device_type_name;
      return false;
    }
    if (!dtype_is_supported(dtype)) {
      *why = std::string("constant ") + name + " has dtype code " + std::to_string(dtype) + ", which this runtime does not model";
      return false;
    }
    uint64_t need = 0;
    if (!storage_nbytes(l.sizes, l.strides, element_size(dtype), static_cast<uint64_t>(l.offset), &need) ||
        need > data_size)
      throw Error(path + ": constant " + l.name + " spans " + std::to_string(need) + " bytes with shape " +
                      list_str(l.sizes) + " and strides " + list_str(l.strides) + ", but the blob holds " +
                      std::to_string(data_size) + "; re-export the model with aoti-toolchain export",
                  AOTI_HOST_INVALID_PROGRAM);
    plan.items.push_back({l.name, dtype, plan.total, &l});
    plan.total += data_size;
  }
  if (plan.total > blob_size)
    throw Error(path + ": its constants take " + std::to_string(plan.total) + " bytes, the weights blob has " +
                    std::to_string(blob_size) + "; pass the blob exported with this plugin",
                AOTI_HOST_INVALID_ARGUMENT);
  *out = std::move(plan);
  return true;
}

PlacedWeights::~PlacedWeights() {
  tensors_.clear();
  if (release_ != nullptr && memory_ != nullptr) release_(memory_);
}

void PlacedWeights::hand_over(const Plugin& plugin, AOTInductorModelContainerHandle container, const BlobPlan& plan,
                              int32_t device_type, int32_t device_index) {
  std::vector<AOTInductorConstantMapEntry> pairs;
  pairs.reserve(plan.items.size());
  tensors_.reserve(plan.items.size());
  for (const auto& item : plan.items) {
    void* data = static_cast<unsigned char*>(memory_) + item.blob_offset;
    tensors_.emplace_back(Tensor::from_blob(data, item.dtype, item.layout->sizes, item.layout->strides,
                                            item.layout->offset, device_type, device_index));
    pairs.push_back({item.name.c_str(), to_handle(tensors_.back().get())});
  }
  if (plugin.fns.AOTInductorModelContainerUpdateUserManagedConstantBufferPairs(container, pairs.data(), pairs.size(),
                                                                               false, true) != AOTI_RUNTIME_SUCCESS)
    throw Error(plugin.path + ": AOTInductorModelContainerUpdateUserManagedConstantBufferPairs failed" +
                    plugin_message(plugin), AOTI_HOST_INVALID_PROGRAM);
}

std::vector<AtenTensorHandle> PlacedWeights::wrappers_among(const std::vector<AtenTensorHandle>& handles) const {
  std::unordered_set<const void*> ours_data;
  std::unordered_set<AtenTensorHandle> ours;
  for (const auto& t : tensors_) {
    ours_data.insert(t->data_ptr());
    ours.insert(to_handle(t.get()));
  }
  std::vector<AtenTensorHandle> out;
  for (AtenTensorHandle h : handles)
    if (h != nullptr && ours.count(h) == 0 && ours_data.count(from_handle(h)->data_ptr()) != 0) out.push_back(h);
  return out;
}

std::unique_ptr<PlacedWeights> place_on_host(const unsigned char* blob, const BlobPlan& plan) {
  const size_t bytes = (plan.total + 63) / 64 * 64;
  void* mem = std::aligned_alloc(64, bytes > 0 ? bytes : 64);
  if (mem == nullptr) throw Error("cannot allocate " + std::to_string(bytes) + " bytes for the weights", AOTI_HOST_INTERNAL);
  std::memcpy(mem, blob, plan.total);
  return std::make_unique<PlacedWeights>(mem, [](void* p) { std::free(p); });
}

}  // namespace aoti_host
