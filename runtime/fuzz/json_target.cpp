// libFuzzer target: the JSON reader (json.h) on arbitrary bytes. A refusal is aoti_host::Error; anything else
// (a crash, a sanitizer report, another exception, an allocation past -malloc_limit_mb) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "aoti_host/error.h"
#include "base/json.h"

namespace {

// Visits every value so that what the parser built is read back (ASan sees bad strings/containers).
size_t walk(const aoti_host::Json& j, int depth) {
  if (depth > 200) __builtin_trap();  // the parser limits nesting; deeper means the limit broke
  size_t n = 1;
  switch (j.kind()) {
    case aoti_host::Json::Kind::String: n += j.string().size(); break;
    case aoti_host::Json::Kind::Array:
      for (const auto& v : j.array()) n += walk(v, depth + 1);
      break;
    case aoti_host::Json::Kind::Number: n += j.number() == j.number() ? 1 : 0; break;
    default: break;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const aoti_host::Json doc = aoti_host::Json::parse(text, "fuzz input");
    volatile size_t sink = walk(doc, 0);
    (void)sink;
    if (const aoti_host::Json* v = doc.get("inputs")) (void)walk(*v, 1);
  } catch (const aoti_host::Error& e) {
    if (std::string(e.what()).find("fuzz input") == std::string::npos) __builtin_trap();  // must name the file
  }
  return 0;
}
