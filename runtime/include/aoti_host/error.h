// Error plumbing shared by the shims and the C API. A shim that fails returns AOTI_TORCH_FAILURE
// and records why with set_last_error(); the message is thread-local and survives until the next
// set_last_error() or clear_last_error() on the same thread.
#pragma once

#include <stdexcept>
#include <string>

#include "aoti_host/status.h"

namespace aoti_host {

void set_last_error(std::string message);
void clear_last_error();
const std::string& last_error();

// Thrown inside the runtime; converted to a C error code at the ABI (never crosses it).
// `status` is the aoti_host_status the C API returns for it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int status = AOTI_HOST_INTERNAL)
      : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace aoti_host
