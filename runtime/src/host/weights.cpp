#include "host/weights.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/package_records.h"
#include "aoti_host/status.h"
#include "base/crc32.h"
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

// The rules every constant layout meets, recorded or derived: the layout, at the dtype's item size (1 byte
// when the name is unknown: plan_blob checks again with the plugin's own dtype), spans at most data_size
// bytes, and the data sizes laid end to end (*total, advanced here) fit in the blob. "" when it does, else
// the defect.
std::string layout_defect(const ConstantLayout& l, const std::string& dtype, uint64_t* total, uint64_t blob_size) {
  uint64_t itemsize = 1;
  const int32_t code = dtype.empty() ? -1 : dtype_from_name(dtype);
  if (code >= 0) itemsize = element_size(code);
  uint64_t need = 0;
  if (!storage_nbytes(l.sizes, l.strides, itemsize, static_cast<uint64_t>(l.offset), &need) || need > l.data_size)
    return "shape " + list_str(l.sizes) + ", stride " + list_str(l.strides) + " and offset " + std::to_string(l.offset) +
           " span more than its data_size of " + std::to_string(l.data_size) + " bytes";
  if (__builtin_add_overflow(*total, l.data_size, total) || *total > blob_size)
    return "it ends beyond the weights blob (" + std::to_string(blob_size) + " bytes)";
  return "";
}

// "{1, 2, 3}" (or "{}") as integers in [0, kMaxContractInt], at most kMaxContractRank of them.
bool brace_ints(std::string_view text, std::vector<int64_t>* out) {
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') return false;
  text = text.substr(1, text.size() - 2);
  out->clear();
  if (text.find_first_not_of(" ") == std::string_view::npos) return true;
  while (true) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() || item.size() > 18 || out->size() >= kMaxContractRank) return false;
    int64_t v = 0;
    for (char c : item) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v > kMaxContractInt) return false;
    out->push_back(v);
    if (comma == std::string_view::npos) return true;
    text.remove_prefix(comma + 1);
  }
}

bool digits(std::string_view text, int64_t* out) {
  std::vector<int64_t> one;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  if (!brace_ints("{" + std::string(text) + "}", &one) || one.size() != 1) return false;
  *out = one[0];
  return true;
}

// What follows the last `marker` ("cached_torch_dtype_float32" -> "float32"); "" without one.
std::string after_last(std::string_view text, std::string_view marker) {
  const size_t at = text.rfind(marker);
  return at == std::string_view::npos ? std::string() : std::string(text.substr(at + marker.size()));
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
    std::string dtype;
    if (const Json* d = c.get(rc::kDtype)) {
      if (!d->is_string()) throw Error(w + "." + rc::kDtype + " is not a string", AOTI_HOST_INVALID_PROGRAM);
      dtype = d->string();
    }
    const std::string defect = layout_defect(l, dtype, &total, blob_size);
    if (!defect.empty()) throw Error(w + ": " + defect, AOTI_HOST_INVALID_PROGRAM);
    out.push_back(std::move(l));
  }
  return out;
}

bool derive_constant_layouts(const std::string& wrapper_cpp, uint64_t blob_size, std::vector<ConstantLayout>* out,
                             std::string* why) {
  // index -> field -> its value text, from lines `constants_info_[<i>].<field> = <value>;`
  std::map<uint64_t, std::map<std::string, std::string>> fields;
  constexpr std::string_view kPrefix = "constants_info_[";
  const std::string_view src(wrapper_cpp);
  for (size_t pos = 0; pos < src.size();) {
    size_t eol = src.find('\n', pos);
    if (eol == std::string_view::npos) eol = src.size();
    std::string_view line = src.substr(pos, eol - pos);
    pos = eol + 1;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    line.remove_prefix(first);
    if (line.substr(0, kPrefix.size()) != kPrefix) continue;
    line.remove_prefix(kPrefix.size());
    size_t i = 0;
    uint64_t index = 0;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9' && index <= (uint64_t{1} << 32))
      index = index * 10 + static_cast<uint64_t>(line[i++] - '0');
    if (i == 0 || index > (uint64_t{1} << 32) || line.substr(i, 2) != "].") continue;
    line.remove_prefix(i + 2);
    size_t j = 0;
    while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_')) ++j;
    if (j == 0 || line.substr(j, 3) != " = ") continue;
    const std::string field(line.substr(0, j));
    line.remove_prefix(j + 3);
    const size_t last = line.find_last_not_of(" \t\r");
    if (last == std::string_view::npos || line[last] != ';') continue;
    line = line.substr(0, last);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    fields[index][field] = std::string(line);
  }
  if (fields.empty()) return *why = "its generated wrapper sets no constants_info_ fields", false;
  if (fields.rbegin()->first != fields.size() - 1)
    return *why = "its generated wrapper sets constants_info_ fields of indices that are not 0.." +
                  std::to_string(fields.size() - 1), false;
  std::vector<ConstantLayout> layouts;
  uint64_t total = 0;
  for (const auto& entry : fields) {
    const uint64_t index = entry.first;
    const std::string w = "constant " + std::to_string(index);
    // torch's AOTInductorModel::ConstantInfo members as its generated code assigns them (not one of our
    // package records: spec/records.toml does not describe torch's C++ source). A named reference, not a
    // structured binding: C++17 lambdas cannot capture those (clang refuses).
    const auto& assigned = entry.second;
    auto member = [&assigned](const char* key) -> std::string {
      auto it = assigned.find(key);
      return it == assigned.end() ? std::string() : it->second;
    };
    ConstantLayout l;
    const std::string name = member("name");
    if (name.size() < 3 || name.front() != '"' || name.back() != '"' ||
        name.find_first_of("\"\\", 1) != name.size() - 1)
      return *why = w + "'s name is not a plain string literal", false;
    l.name = name.substr(1, name.size() - 2);
    if (!brace_ints(member("shape"), &l.sizes) || !brace_ints(member("stride"), &l.strides) ||
        l.sizes.size() != l.strides.size())
      return *why = w + " (" + l.name + ") has no shape and stride of one rank", false;
    if (member("layout").find("layout_strided") == std::string::npos)
      return *why = w + " (" + l.name + ") is not a strided tensor", false;
    int64_t data_size = 0;
    if (!digits(member("offset"), &l.offset) || !digits(member("data_size"), &data_size))
      return *why = w + " (" + l.name + ") has no integer offset and data_size", false;
    l.data_size = static_cast<uint64_t>(data_size);
    l.device = after_last(member("device_type"), "device_type_");
    const std::string defect = layout_defect(l, after_last(member("dtype"), "dtype_"), &total, blob_size);
    if (!defect.empty()) return *why = w + " (" + l.name + "): " + defect, false;
    layouts.push_back(std::move(l));
  }
  *out = std::move(layouts);
  return true;
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

size_t release_file_pages(const void* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (p == nullptr || hi <= lo) return 0;
  return ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

std::unique_ptr<PlacedWeights> place_on_host(const unsigned char* blob, size_t size, const BlobPlan& plan,
                                             uint32_t* crc, bool release_source) {
  const size_t bytes = (plan.total + 63) / 64 * 64;
  void* mem = std::aligned_alloc(64, bytes > 0 ? bytes : 64);
  if (mem == nullptr) throw Error("cannot allocate " + std::to_string(bytes) + " bytes for the weights", AOTI_HOST_INTERNAL);
  std::unique_ptr<PlacedWeights> placed = std::make_unique<PlacedWeights>(mem, [](void* p) { std::free(p); });
  // Chunks small enough to stay in the cache between the CRC and the copy, large enough that the page drops
  // behind them cost nothing measurable.
  constexpr size_t kChunk = size_t{4} << 20;
  auto* dst = static_cast<unsigned char*>(mem);
  const size_t n = std::min<size_t>(plan.total, size);
  for (size_t at = 0; at < size; at += kChunk) {
    const size_t len = std::min(kChunk, size - at);
    const size_t copied = at < n ? std::min(len, n - at) : 0;
    if (copied > 0) std::memcpy(dst + at, blob + at, copied);
    // The CRC of the bytes as copied (private memory now: what is checked is what the plugin uses, even if
    // the file changes under its mapping), then of the tail no constant uses, from the mapping.
    if (crc != nullptr) {
      if (copied > 0) *crc = crc32(*crc, dst + at, copied);
      if (len > copied) *crc = crc32(*crc, blob + at + copied, len - copied);
    }
    if (release_source) release_file_pages(blob + at, len);
    if (crc == nullptr && at + len >= n) break;  // the tail past the constants is only read for its CRC
  }
  return placed;
}

FileRange read_only_embedded_weights(const Plugin& plugin) {
  auto* start = static_cast<const unsigned char*>(::dlsym(plugin.handle, "_binary_constants_bin_start"));
  auto* end = static_cast<const unsigned char*>(::dlsym(plugin.handle, "_binary_constants_bin_end"));
  if (start == nullptr || end == nullptr || end <= start) return {};
  struct Search {
    uintptr_t lo, hi;
    bool read_only = false;
  } search{reinterpret_cast<uintptr_t>(start), reinterpret_cast<uintptr_t>(end)};
  // The PT_LOAD segment holding the whole range, backed by the file (not its zero-filled tail), not writable:
  // its pages are clean copies of the plugin's file.
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type != PT_LOAD || s->lo < lo || s->hi > lo + ph.p_filesz) continue;
          s->read_only = (ph.p_flags & PF_W) == 0;
          return 1;
        }
        return 0;
      },
      &search);
  if (!search.read_only) return {};
  return {start, static_cast<size_t>(end - start)};
}

namespace {
thread_local ReleaseBehindCopy* t_release = nullptr;
}  // namespace

ReleaseBehindCopy::ReleaseBehindCopy(FileRange range) : range_(range) {
  if (range_.size == 0) return;
  outer_ = t_release;
  t_release = this;
  outer_hook_ = set_thread_blob_tensor_hook(&ReleaseBehindCopy::on_tensor);
}

ReleaseBehindCopy::~ReleaseBehindCopy() {
  if (range_.size == 0) return;
  set_thread_blob_tensor_hook(outer_hook_);
  t_release = outer_;
  release_file_pages(range_.start, range_.size);
}

void ReleaseBehindCopy::on_tensor(uint64_t bytes) {
  ReleaseBehindCopy* self = t_release;
  if (self == nullptr) return;
  self->pending_ += bytes;
  if (self->pending_ < kReleaseStep) return;
  self->pending_ = 0;
  release_file_pages(self->range_.start, self->range_.size);
}

}  // namespace aoti_host
