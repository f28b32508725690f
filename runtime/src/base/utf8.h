// Well-formed UTF-8 (Unicode table 3-7: no overlongs, no surrogates, nothing above U+10FFFF): the set Python's
// strict "utf-8" codec decodes. For the JSON reader (strings) and the zip reader (member names). Inline: the
// fuzz targets and the Triton backend compile json.cpp without the rest of base/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aoti_host {

// Offset of the first byte that is not well-formed UTF-8, or text.size().
inline size_t utf8_error(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t len = 0;
    uint32_t lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return n;
}

}  // namespace aoti_host
