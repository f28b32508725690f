#pragma once
// What a plugin without AOTInductorGetLastError (torch < 2.13) says about a failed call: it writes its reason
// ("Error: <what>") to std::cerr and returns a bare error code. The host tees that stream once and keeps, per
// thread, what the plugin wrote while a CerrCapture of that thread is open.

#include <string>

namespace aoti_host {

// The std::cerr object the plugin opened as `dl_handle` writes to (the global scope's, which the loader binds
// first, else its own copy); null when there is none.
void* plugin_cerr(void* dl_handle);

// Tees `cerr_object` (once per process and object; the original buffer still gets everything) and collects
// what this thread writes to it until the scope ends.
class CerrCapture {
 public:
  explicit CerrCapture(void* cerr_object);
  ~CerrCapture();
  CerrCapture(const CerrCapture&) = delete;
  CerrCapture& operator=(const CerrCapture&) = delete;

 private:
  bool armed_ = false;
};

// What the plugin wrote in this thread's last (or open) capture: its last "Error: " line without that prefix,
// or the text as written; "" when nothing was written.
std::string captured_plugin_error();

}  // namespace aoti_host
