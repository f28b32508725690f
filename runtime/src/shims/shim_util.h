// Shared by the shim translation units: the exception-to-error-code boundary of every shim and the
// checks of tensor arguments and output pointers.
#pragma once

#include <exception>
#include <cstdint>
#include <string>
#include <vector>

#include "aoti_host/error.h"
#include "aoti_host/log.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"

namespace aoti_host {
namespace shim {

// Runs f; a C++ exception never crosses the C ABI: it becomes AOTI_TORCH_FAILURE and a last-error
// message prefixed with the shim's name.
template <class F>
AOTITorchError guarded(const char* shim, F&& f) noexcept {
  try {
    f();
    return AOTI_TORCH_SUCCESS;
  } catch (const std::exception& e) {
    set_last_error(std::string(shim) + ": " + e.what());
  } catch (...) {
    set_last_error(std::string(shim) + ": unknown exception");
  }
  log(LogLevel::Debug, "%s", last_error().c_str());
  return AOTI_TORCH_FAILURE;
}

// A (pointer, length) list argument: a negative length or a null pointer with a length is an error.
inline void check_list(const void* p, int64_t n, const char* name) {
  if (n < 0) throw Error(std::string(name) + " has negative length " + std::to_string(n));
  if (n > 0 && p == nullptr) throw Error(std::string(name) + " is null but its length is " + std::to_string(n));
}

// An (int64_t*, length) argument as a vector.
inline std::vector<int64_t> int_list(const int64_t* p, int64_t n, const char* name) {
  check_list(p, n, name);
  return std::vector<int64_t>(p, p + n);
}

inline Tensor& tensor_arg(AtenTensorHandle h, const char* name) {
  if (h == nullptr) throw Error(std::string("argument '") + name + "' is a null tensor handle");
  return *from_handle(h);
}

// An optional tensor argument: a null pointer or a pointer to a null handle both mean "absent".
inline const Tensor* optional_arg(const AtenTensorHandle* h) {
  return (h != nullptr && *h != nullptr) ? from_handle(*h) : nullptr;
}

// A list of optional tensors (const AtenTensorHandle** and its length): each entry a pointer to a handle, null
// (or a null handle) for None.
inline std::vector<const Tensor*> optional_list(const AtenTensorHandle** p, int64_t n, const char* name) {
  check_list(p, n, name);
  std::vector<const Tensor*> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(optional_arg(p[i]));
  return out;
}

// A string argument; null is an error.
inline std::string str_arg(const char* s, const char* name) {
  if (s == nullptr) throw Error(std::string(name) + " is a null string");
  return s;
}

// An optional string (const char**): null or a pointer to null both mean None.
inline const char* optional_str(const char** s) { return s != nullptr ? *s : nullptr; }

// An output pointer (ret0, ...) the shim writes through.
inline void need(const void* p, const char* name) {
  if (p == nullptr) throw Error(std::string("output pointer '") + name + "' is null");
}

}  // namespace shim
}  // namespace aoti_host
