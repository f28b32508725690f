// Blob-mode weights placed by the host instead of the plugin's own loader.
//
// A plugin exported with its weights in a blob (package_constants_in_so=False) copies them itself in
// AOTInductorModelUpdateConstantsFromBlob: one allocation it owns, then one synchronous cudaMemcpy (or
// memcpy) per constant. The host can do better when it knows each constant's layout: one allocation the
// program owns (host or device), the blob copied into it as torch lays it out (each constant at the running
// sum of the data sizes before it; inductor pads each data size to 64 bytes), on the GPU through a ring of
// pinned chunks that host threads fill while the copy engine moves the previous ones, and the constants
// handed to the container as user-managed (AOTInductorModelContainerUpdateUserManagedConstantBufferPairs).
//
// The layouts (sizes, strides, storage offset) come from the package (extra/aoti_toolchain_constants.json,
// written by `aoti-toolchain export` from the generated wrapper) and are checked against the plugin's own
// per-index calls (name, data size, dtype, folded) before anything is copied: a package that contradicts
// its plugin is refused; a plugin or package this path can't serve keeps the plugin's loader, with the
// reason logged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aoti_host/entry_points.h"
#include "aoti_host/package_layout.h"
#include "aoti_host/tensor.h"
#include "host/plugin.h"

namespace aoti_host {

constexpr const char* kConstantsEntry = package_layout::kConstantsEntry;

struct ConstantLayout {
  std::string name;  // the internal name (GetConstantName)
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;      // storage offset, in elements
  uint64_t data_size = 0;  // bytes the constant takes in the blob (padded)
  std::string device;      // "cpu", "cuda", ... as recorded (empty: not recorded)
};

// Parses the package entry; throws Error(AOTI_HOST_INVALID_PROGRAM) naming `what` and the field. Rules
// (docs/package-json.md, the same in toolchain/verify/package.py): strict JSON (json.h); "schema" is 1;
// every shape, stride, offset and data_size entry is an integer in [0, 2^62]; shape and stride have one rank
// (<= 64); the layout, at the recorded dtype's item size (1 byte when the name is unknown), spans at most
// data_size bytes; the data sizes, laid end to end, fit in the blob's `blob_size` bytes.
std::vector<ConstantLayout> parse_constant_layouts(const std::string& text, const std::string& what,
                                                   uint64_t blob_size);

// The same layouts for a package torch wrote itself (no kConstantsEntry), read from the source its plugin was
// built from: the generated wrapper (<hash>.wrapper.cpp beside the .so) sets each constant's fields in its
// constructor, one per line (`constants_info_[i].shape = {...};`), in torch 2.11 to 2.13 alike; the
// aoti-toolchain export reads them the same way (toolchain/export.py constant_layouts). Returns false with
// `why` when the text has no such block, a constant is not a plain strided tensor, or the layouts break
// parse_constant_layouts' rules: the plugin then loads its blob itself, as before. Whatever is derived is
// checked against the plugin's own per-index calls by plan_blob like a recorded layout.
bool derive_constant_layouts(const std::string& wrapper_cpp, uint64_t blob_size, std::vector<ConstantLayout>* out,
                             std::string* why);

// Bytes a strided tensor spans from its storage's start: itemsize * (offset + 1 + sum(stride * (size - 1))),
// or 0 when a size is 0. False when that overflows 64 bits or a size or stride is negative.
bool storage_nbytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, uint64_t itemsize,
                    uint64_t offset, uint64_t* out);

struct BlobPlan {
  struct Item {
    std::string name;
    int32_t dtype = -1;
    uint64_t blob_offset = 0;
    const ConstantLayout* layout = nullptr;
  };
  std::vector<Item> items;
  uint64_t total = 0;  // bytes of the blob the constants take
};

// Checks the layouts against the plugin and the blob. Returns false with `why` when this path can't serve
// the plugin (a call missing, constant-folded or mixed-device constants): the caller keeps the plugin's
// loader. Throws Error(AOTI_HOST_INVALID_PROGRAM) when the package contradicts its plugin.
bool plan_blob(const Plugin& plugin, AOTInductorModelContainerHandle container,
               const std::vector<ConstantLayout>& layouts, size_t blob_size, const std::string& device_type_name,
               BlobPlan* out, std::string* why);

// Memory a program owns for its constants, and the tensors over it that the container uses.
class PlacedWeights {
 public:
  PlacedWeights(void* memory, void (*release)(void*)) : memory_(memory), release_(release) {}
  ~PlacedWeights();
  PlacedWeights(const PlacedWeights&) = delete;
  PlacedWeights& operator=(const PlacedWeights&) = delete;
  void* memory() const { return memory_; }

  // Creates one tensor per planned constant over the memory and hands them to the container.
  void hand_over(const Plugin& plugin, AOTInductorModelContainerHandle container, const BlobPlan& plan,
                 int32_t device_type, int32_t device_index);

  // Of a container's constant handles, those that wrap the tensors handed over: torch 2.13 wraps each
  // user-managed constant in a handle of its own (aoti_torch_new_tensor_handle, same data pointer) that its
  // container never deletes. The owner deletes them after the container.
  std::vector<AtenTensorHandle> wrappers_among(const std::vector<AtenTensorHandle>& handles) const;

 private:
  void* memory_;
  void (*release_)(void*);
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

// Drops the whole pages inside [p, p + n) from the process (madvise MADV_DONTNEED). Only for a clean,
// read-only mapping of a file or memfd (a package's zip mapping, a plugin's read-only segment): such a page
// comes back with the same bytes from its file when it is read again, so this changes residency, never
// contents. Returns the bytes dropped.
size_t release_file_pages(const void* p, size_t n);

// Host placement: one 64-byte aligned allocation holding a copy of the first plan.total bytes of `blob`
// (`size` bytes). One pass in chunks: each chunk is copied, its CRC-32 continued into *crc when crc is not
// null (over the copy, so the bytes checked are the bytes used; the bytes past plan.total from `blob`, so
// *crc covers all `size`), and, with release_source (a clean
// read-only file mapping only, see release_file_pages), its pages dropped behind the copy, so the weights are
// resident about once, not twice, at the peak of a load.
std::unique_ptr<PlacedWeights> place_on_host(const unsigned char* blob, size_t size, const BlobPlan& plan,
                                             uint32_t* crc, bool release_source);

// Where a plugin's embedded weights lie in its mapping (_binary_constants_bin_start/_end), when that range is
// in a read-only PT_LOAD segment of the plugin; empty otherwise (nothing of it may be dropped).
struct FileRange {
  const unsigned char* start = nullptr;
  size_t size = 0;
};
FileRange read_only_embedded_weights(const Plugin& plugin);

// While it lives, the pages of `range` (a clean read-only file mapping, see release_file_pages) are dropped
// progressively as a plugin copies its constants out of them on this thread: torch's loader (container
// creation for embedded weights, AOTInductorModelUpdateConstantsFromBlob for a blob) copies one constant,
// then wraps its copy in a tensor (aoti_torch_create_tensor_from_blob*), whose bytes the tensor shims count;
// every kReleaseStep of them, the range's resident pages go. So the weights are resident about once at the
// peak of a load, not twice; and once more at the end (the plugin holds its own copy).
class ReleaseBehindCopy {
 public:
  static constexpr uint64_t kReleaseStep = uint64_t{16} << 20;
  explicit ReleaseBehindCopy(FileRange range);
  ~ReleaseBehindCopy();
  ReleaseBehindCopy(const ReleaseBehindCopy&) = delete;
  ReleaseBehindCopy& operator=(const ReleaseBehindCopy&) = delete;

 private:
  static void on_tensor(uint64_t bytes);
  FileRange range_;
  uint64_t pending_ = 0;
  ReleaseBehindCopy* outer_ = nullptr;
  BlobTensorHook outer_hook_ = nullptr;
};

}  // namespace aoti_host
