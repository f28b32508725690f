// The slim strided tensor behind every AtenTensorHandle of the host runtime: a refcounted storage
// (owned, or borrowed from the caller with an optional deleter) plus dtype, device, sizes, strides and
// a storage offset. Codes (dtype, device type, layout) are torch's, so handles mean the same thing on
// both sides of the plugin boundary.
#pragma once

#include "aoti_host/config.h"  // records this translation unit's configuration in its object

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// Same declaration as the generated shims.h; repeating an identical typedef is valid C++.
struct AtenTensorOpaque;
typedef struct AtenTensorOpaque* AtenTensorHandle;

namespace aoti_host {

// torch's c10::ScalarType codes.
namespace dtype_code {
constexpr int32_t kUInt8 = 0, kInt8 = 1, kInt16 = 2, kInt32 = 3, kInt64 = 4, kFloat16 = 5, kFloat32 = 6,
                  kFloat64 = 7, kComplex32 = 8, kComplex64 = 9, kComplex128 = 10, kBool = 11,
                  kBFloat16 = 15, kFloat8_e5m2 = 23, kFloat8_e4m3fn = 24, kFloat8_e5m2fnuz = 25,
                  kFloat8_e4m3fnuz = 26, kUInt16 = 27, kUInt32 = 28, kUInt64 = 29, kFloat8_e8m0fnu = 44,
                  kFloat4_e2m1fn_x2 = 45;
}  // namespace dtype_code

// torch's c10::DeviceType codes.
namespace device_code {
constexpr int32_t kCPU = 0, kCUDA = 1, kXPU = 12, kMPS = 13, kMeta = 14, kPrivateUse1 = 20;
}  // namespace device_code

size_t element_size(int32_t dtype);     // throws Error naming the code if unknown
const char* dtype_name(int32_t dtype);  // "float32", ...; "dtype(<code>)" if unknown
bool dtype_is_supported(int32_t dtype);  // dtypes the CPU kernels compute on
const char* device_type_name(int32_t device_type);
// "[2, 3, 4]": sizes, strides and other int lists in messages.
std::string list_str(const std::vector<int64_t>& v);

// Bytes a strided view needs from the start of its storage (c10's computeStorageNbytes).
size_t compute_storage_nbytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                              size_t itemsize, int64_t storage_offset);

// A function called on this thread with the storage bytes of each tensor a plugin wraps over memory of its own
// (aoti_torch_create_tensor_from_blob and _v2): a load counts its plugin's embedded weights copied out at
// container creation with it (host/weights.h). Null: none. Returns the hook it replaces.
using BlobTensorHook = void (*)(uint64_t bytes);
BlobTensorHook set_thread_blob_tensor_hook(BlobTensorHook hook);

class Storage;

class Tensor {
 public:
  static Tensor* empty_strided(int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                               int32_t device_type = 0, int32_t device_index = 0);
  static Tensor* from_blob(void* data, int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                           int64_t storage_offset, int32_t device_type, int32_t device_index,
                           void (*deleter)(void* ctx) = nullptr, void* deleter_ctx = nullptr);
  static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

  void* data_ptr() const;  // includes storage_offset
  void* storage_data() const;
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const;
  int32_t dtype() const { return dtype_; }
  int32_t device_type() const { return device_type_; }
  int32_t device_index() const { return device_index_; }
  int64_t storage_offset() const { return storage_offset_; }
  bool is_contiguous() const;
  size_t storage_nbytes() const;
  size_t itemsize() const { return element_size(dtype_); }

  // New tensor sharing this storage (absolute storage_offset, in elements of this dtype).
  Tensor* alias(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t storage_offset) const;
  // Same, reinterpreting the storage as another dtype (storage_offset in elements of that dtype).
  Tensor* alias_as(int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                   int64_t storage_offset) const;
  Tensor* clone_contiguous() const;  // new owning, row-major copy
  // Makes this tensor a view of other's storage with other's metadata (aoti_torch_assign_tensors).
  void assign(const Tensor& other);

  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

 private:
  Tensor(std::shared_ptr<Storage> storage, int32_t dtype, std::vector<int64_t> sizes,
         std::vector<int64_t> strides, int64_t storage_offset, int32_t device_type, int32_t device_index);

  std::shared_ptr<Storage> storage_;
  int32_t dtype_;
  int32_t device_type_;
  int32_t device_index_;
  int64_t storage_offset_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
};

inline AtenTensorHandle to_handle(Tensor* t) { return reinterpret_cast<AtenTensorHandle>(t); }
inline Tensor* from_handle(AtenTensorHandle h) { return reinterpret_cast<Tensor*>(h); }

}  // namespace aoti_host
