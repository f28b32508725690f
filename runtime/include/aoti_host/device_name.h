// The device a program is loaded on, as users spell it (aoti_host_load_options::device, aoti-run --device):
// "cpu", "cuda" (cuda:0) or "cuda:N", N a device index in decimal without a sign, spaces or leading zeros
// (torch.device's spelling). Header-only so the C API's loader and aoti-run parse it by the same rules.
// Whether cuda:N exists on this host is not decided here (aoti_host/cuda/cuda.h: require_device).
#pragma once

#include <climits>
#include <cstring>
#include <string>

namespace aoti_host {

struct DeviceName {
  bool cuda = false;
  int index = 0;
};

// true and *out for a well-formed name; false and *why (what is wrong, with the fix) otherwise. Null is "cpu".
inline bool parse_device_name(const char* text, DeviceName* out, std::string* why) {
  *out = DeviceName{};
  if (text == nullptr || std::strcmp(text, "cpu") == 0) return true;
  const std::string s = text;
  const std::string quoted = "device \"" + s + "\"";
  const std::string fix = "; use cpu, cuda (cuda:0) or cuda:N with N a device index (0, 1, ...)";
  if (s == "cuda") {
    out->cuda = true;
    return true;
  }
  if (s.compare(0, 5, "cuda:") != 0) {
    *why = quoted + ": not a device" + fix;
    return false;
  }
  const std::string digits = s.substr(5);
  long long index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      *why = quoted + ": the index \"" + digits + "\" is not a non-negative decimal integer" + fix;
      return false;
    }
    if (index <= INT_MAX) index = index * 10 + (c - '0');
  }
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) {
    *why = quoted + (digits.empty() ? ": no index after the colon" : ": the index has a leading zero") + fix;
    return false;
  }
  if (index > INT_MAX) {
    *why = quoted + ": the index " + digits + " is out of range (a host has a few devices: cuda:0, cuda:1, ...)";
    return false;
  }
  out->cuda = true;
  out->index = static_cast<int>(index);
  return true;
}

}  // namespace aoti_host
