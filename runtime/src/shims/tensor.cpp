#include "aoti_host/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#if CUDA_AVAILABLE
#include "aoti_host/cuda/cuda.h"
#endif

namespace aoti_host {

namespace {

using DtypeInfo = dtypes::Info;  // the generated table (toolchain/spec/abi.toml)

const DtypeInfo* find_dtype(int32_t code) { return dtypes::find(code); }

thread_local char t_unknown_name[32];


void check_geometry(const char* what, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                    int64_t storage_offset) {
  if (sizes.size() != strides.size()) {
    throw Error(std::string(what) + ": sizes " + list_str(sizes) + " and strides " + list_str(strides) +
                " have different lengths");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) throw Error(std::string(what) + ": negative size in " + list_str(sizes));
    if (strides[i] < 0) {
      throw Error(std::string(what) + ": negative stride in " + list_str(strides) + " (not supported)");
    }
  }
  if (storage_offset < 0) {
    throw Error(std::string(what) + ": negative storage_offset " + std::to_string(storage_offset));
  }
}

void check_device(const char* what, int32_t device_type, int32_t device_index) {
#if CUDA_AVAILABLE
  if (device_type == device_code::kCUDA) return cuda::require_device(device_index, what);
#endif
  if (device_type == device_code::kCUDA) {
    throw Error(std::string(what) + ": cannot create a cuda tensor: this runtime was built without CUDA");
  }
  if (device_type != device_code::kCPU) {
    throw Error(std::string(what) + ": device type " + device_type_name(device_type) + " (" +
                std::to_string(device_type) + ") is not supported by this runtime (only cpu)");
  }
  if (device_index != 0 && device_index != -1) {
    throw Error(std::string(what) + ": cpu device index must be 0 or -1, got " + std::to_string(device_index));
  }
}

}  // namespace

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

size_t element_size(int32_t dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  if (info == nullptr) throw Error("unknown dtype code " + std::to_string(dtype));
  return info->itemsize;
}

const char* dtype_name(int32_t dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  if (info != nullptr) return info->name;
  std::snprintf(t_unknown_name, sizeof t_unknown_name, "dtype(%d)", static_cast<int>(dtype));
  return t_unknown_name;
}

bool dtype_is_supported(int32_t dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  return info != nullptr && info->runtime;
}

const char* device_type_name(int32_t device_type) {
  switch (device_type) {
    case device_code::kCPU: return "cpu";
    case device_code::kCUDA: return "cuda";
    case device_code::kXPU: return "xpu";
    case device_code::kMPS: return "mps";
    case device_code::kMeta: return "meta";
    case device_code::kPrivateUse1: return "privateuse1";
    default: return "unknown";
  }
}

size_t compute_storage_nbytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                              size_t itemsize, int64_t storage_offset) {
  uint64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    extent += static_cast<uint64_t>(strides[i]) * static_cast<uint64_t>(sizes[i] - 1);
  }
  return static_cast<size_t>(itemsize * (static_cast<uint64_t>(storage_offset) + extent));
}

// Owned memory is freed with free(); borrowed memory goes to the caller's deleter, if any, once.
class Storage {
 public:
  Storage(void* data, size_t nbytes, bool owning, void (*deleter)(void*), void* ctx)
      : data_(data), nbytes_(nbytes), owning_(owning), deleter_(deleter), ctx_(ctx) {}
  ~Storage() {
    if (owning_ && deleter_ != nullptr) {
      deleter_(ctx_);  // device memory: its allocator's release
    } else if (owning_) {
      std::free(data_);
    } else if (deleter_ != nullptr) {
      deleter_(ctx_);
    }
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  bool owning() const { return owning_; }

 private:
  void* data_;
  size_t nbytes_;
  bool owning_;
  void (*deleter_)(void*);
  void* ctx_;
};

Tensor::Tensor(std::shared_ptr<Storage> storage, int32_t dtype, std::vector<int64_t> sizes,
               std::vector<int64_t> strides, int64_t storage_offset, int32_t device_type, int32_t device_index)
    : storage_(std::move(storage)),
      dtype_(dtype),
      device_type_(device_type),
      device_index_(device_index),
      storage_offset_(storage_offset),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)) {}

Tensor::~Tensor() = default;

std::vector<int64_t> Tensor::contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return strides;
}

Tensor* Tensor::empty_strided(int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                              int32_t device_type, int32_t device_index) {
  const size_t itemsize = element_size(dtype);
  check_geometry("empty_strided", sizes, strides, 0);
  check_device("empty_strided", device_type, device_index);
  const size_t nbytes = compute_storage_nbytes(sizes, strides, itemsize, 0);
#if CUDA_AVAILABLE
  if (device_type == device_code::kCUDA) {
    void (*deleter)(void*) = nullptr;
    void* ctx = nullptr;
    void* dev = cuda::allocate_for_tensor(nbytes, device_index, &deleter, &ctx);
    auto storage = std::make_shared<Storage>(dev, nbytes, true, deleter, ctx);
    return new Tensor(std::move(storage), dtype, std::move(sizes), std::move(strides), 0, device_type, device_index);
  }
#endif
  // aligned_alloc needs a multiple of the alignment; never hand out a null pointer for 0 bytes.
  const size_t alloc = ((nbytes + 63) / 64) * 64 + (nbytes == 0 ? 64 : 0);
  void* data = std::aligned_alloc(64, alloc);
  if (data == nullptr) throw Error("empty_strided: out of memory allocating " + std::to_string(nbytes) + " bytes");
  auto storage = std::make_shared<Storage>(data, nbytes, true, nullptr, nullptr);
  return new Tensor(std::move(storage), dtype, std::move(sizes), std::move(strides), 0, device_type, device_index);
}

Tensor* Tensor::from_blob(void* data, int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                          int64_t storage_offset, int32_t device_type, int32_t device_index,
                          void (*deleter)(void* ctx), void* deleter_ctx) {
  const size_t itemsize = element_size(dtype);
  check_geometry("from_blob", sizes, strides, storage_offset);
  check_device("from_blob", device_type, device_index);
  const size_t nbytes = compute_storage_nbytes(sizes, strides, itemsize, storage_offset);
  if (data == nullptr && nbytes != 0) throw Error("from_blob: data is null for a non-empty tensor");
  auto storage = std::make_shared<Storage>(data, nbytes, false, deleter, deleter_ctx);
  return new Tensor(std::move(storage), dtype, std::move(sizes), std::move(strides), storage_offset, device_type,
                    device_index);
}

void* Tensor::storage_data() const { return storage_->data(); }

void* Tensor::data_ptr() const {
  char* base = static_cast<char*>(storage_->data());
  if (base == nullptr) return nullptr;
  return base + static_cast<size_t>(storage_offset_) * itemsize();
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 0) return true;
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

size_t Tensor::storage_nbytes() const { return storage_->nbytes(); }

Tensor* Tensor::alias(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t storage_offset) const {
  return alias_as(dtype_, std::move(sizes), std::move(strides), storage_offset);
}

Tensor* Tensor::alias_as(int32_t dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                         int64_t storage_offset) const {
  const size_t itemsize = element_size(dtype);
  check_geometry("alias", sizes, strides, storage_offset);
  // Only owned storage has a size we trust; a view past its end is a plugin bug, not a crash to wait for.
  const size_t need = compute_storage_nbytes(sizes, strides, itemsize, storage_offset);
  if (storage_->owning() && need > storage_->nbytes()) {
    throw Error("view with sizes " + list_str(sizes) + ", strides " + list_str(strides) + ", storage_offset " +
                std::to_string(storage_offset) + " and dtype " + dtype_name(dtype) + " needs " +
                std::to_string(need) + " bytes, but the storage has " + std::to_string(storage_->nbytes()));
  }
  return new Tensor(storage_, dtype, std::move(sizes), std::move(strides), storage_offset, device_type_,
                    device_index_);
}

Tensor* Tensor::clone_contiguous() const {
#if CUDA_AVAILABLE
  if (device_type_ == device_code::kCUDA) return cuda::clone_contiguous(*this);
#endif
  Tensor* out = empty_strided(dtype_, sizes_, contiguous_strides(sizes_), device_type_, device_index_);
  const int64_t n = numel();
  if (n == 0) return out;
  const size_t isz = itemsize();
  const char* src = static_cast<const char*>(data_ptr());
  char* dst = static_cast<char*>(out->data_ptr());
  if (is_contiguous()) {
    std::memcpy(dst, src, static_cast<size_t>(n) * isz);
    return out;
  }
  const size_t nd = sizes_.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * isz, src + off * static_cast<int64_t>(isz), isz);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < sizes_[d]) {
        off += strides_[d];
        break;
      }
      off -= strides_[d] * (sizes_[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

void Tensor::assign(const Tensor& other) {
  if (this == &other) return;
  storage_ = other.storage_;
  dtype_ = other.dtype_;
  device_type_ = other.device_type_;
  device_index_ = other.device_index_;
  storage_offset_ = other.storage_offset_;
  sizes_ = other.sizes_;
  strides_ = other.strides_;
}

}  // namespace aoti_host
