// Native tests of the strict JSON reader (src/json.cpp) the package entries are read with: values of
// every kind read back exactly (integers within int64 kept exact, escapes and surrogate pairs decoded);
// everything RFC 8259 refuses, and what the reader refuses beyond it so that one entry cannot mean two
// things (duplicate keys, non-finite numbers, invalid UTF-8, nesting beyond kMaxDepth), is an Error
// (AOTI_HOST_INVALID_PROGRAM) naming the entry and the offset.
#include <cstdint>
#include <cstdio>
#include <string>

#include "aoti_host/c_api.h"
#include "aoti_host/error.h"
#include "base/json.h"
#include "check.h"

namespace {

using aoti_host::Error;
using aoti_host::Json;

Json parse(const std::string& text) { return Json::parse(text, "pkg.pt2:entry.json"); }

void expect_refused(const std::string& text, const std::string& why) {
  try {
    parse(text);
    std::printf("FAIL: accepted %s (expected: %s)\n", text.substr(0, 60).c_str(), why.c_str());
    ++g_failures;
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (e.status() != AOTI_HOST_INVALID_PROGRAM || msg.find("pkg.pt2:entry.json: invalid JSON at offset ") != 0 ||
        msg.find(why) == std::string::npos) {
      std::printf("FAIL: %s: status %d, message \"%s\", expected \"%s\"\n", text.substr(0, 60).c_str(),
                  static_cast<int>(e.status()), msg.c_str(), why.c_str());
      ++g_failures;
    }
  }
}

void test_values() {
  const Json doc = parse(
      " {\"schema\": 1, \"name\": \"m\\u00e9\\ud83d\\ude00\\n\\\"\\/\", \"sizes\": [2, -3, 0, 9223372036854775807, "
      "-9223372036854775808], \"f\": 1.5e3, \"big\": 9223372036854775808, \"t\": true, \"n\": null, "
      "\"empty\": {}, \"nested\": [[[]]]} ");
  EXPECT(doc.is_object() && doc.object().size() == 9);
  EXPECT(doc.get("schema") && doc.get("schema")->is_integer() && doc.get("schema")->integer() == 1);
  EXPECT(doc.get("name") && doc.get("name")->string() == "m\xc3\xa9\xf0\x9f\x98\x80\n\"/");
  const Json* sizes = doc.get("sizes");
  EXPECT(sizes && sizes->is_array() && sizes->array().size() == 5);
  if (sizes && sizes->array().size() == 5) {
    EXPECT(sizes->array()[1].integer() == -3);
    EXPECT(sizes->array()[3].is_integer() && sizes->array()[3].integer() == INT64_MAX);  // exact, not via double
    EXPECT(sizes->array()[4].is_integer() && sizes->array()[4].integer() == INT64_MIN);
  }
  EXPECT(doc.get("f") && doc.get("f")->is_number() && !doc.get("f")->is_integer() && doc.get("f")->number() == 1500.0);
  EXPECT(doc.get("big") && doc.get("big")->is_number() && !doc.get("big")->is_integer());  // beyond int64
  EXPECT(doc.get("t") && doc.get("t")->is_bool() && doc.get("t")->boolean());
  EXPECT(doc.get("n") && doc.get("n")->is_null());
  EXPECT(doc.get("empty") && doc.get("empty")->is_object() && doc.get("empty")->object().empty());
  EXPECT(doc.get("missing") == nullptr);
  EXPECT(doc.get("sizes")->get("x") == nullptr);  // get on a non-object
  EXPECT(parse("0").is_integer() && parse("-0").is_integer() && parse("\"\"").string().empty());
  EXPECT(parse("1E2").number() == 100.0 && !parse("1E2").is_integer());
  // A lone surrogate escape is kept as its 3-byte form (as Python's json does).
  EXPECT(parse("\"\\ud800x\"").string() == "\xed\xa0\x80x");
  // Nesting up to the limit is fine.
  EXPECT(parse(std::string(Json::kMaxDepth, '[') + std::string(Json::kMaxDepth, ']')).is_array());
}

void test_refusals() {
  expect_refused("", "unexpected end");
  expect_refused("{\"a\": 1, \"a\": 2}", "duplicate key");
  expect_refused("[NaN]", "unexpected character");
  expect_refused("[Infinity]", "unexpected character");
  expect_refused("[-Infinity]", "unexpected character");
  expect_refused("[1e400]", "out of range");
  expect_refused("[-1e400]", "out of range");
  expect_refused("[01]", "");
  expect_refused("[+1]", "unexpected character");
  expect_refused("[0x10]", "");
  expect_refused("[1.]", "a digit must follow '.'");
  expect_refused("[1e]", "a digit must follow the exponent");
  expect_refused("[1,]", "");
  expect_refused("{\"a\": 1,}", "");
  expect_refused("{\"a\" 1}", "expected ':'");
  expect_refused("{a: 1}", "");
  expect_refused("[1] x", "trailing characters");
  expect_refused("[1][2]", "trailing characters");
  expect_refused("\"abc", "unterminated string");
  expect_refused("\"a\tb\"", "control character in a string");
  expect_refused("\"\\x\"", "unknown escape");
  expect_refused("\"\\u12zz\"", "bad \\u escape");
  expect_refused("\"\\u12", "short \\u escape");
  expect_refused("[\"\xff\"]", "not UTF-8");
  expect_refused("[\"\xc0\xaf\"]", "not UTF-8");      // an overlong '/'
  expect_refused("[\"\xed\xa0\x80\"]", "not UTF-8");  // a raw surrogate
  expect_refused("[tru]", "");
  expect_refused(std::string(Json::kMaxDepth + 1, '[') + std::string(Json::kMaxDepth + 1, ']'), "nested more than");
  expect_refused(std::string(100000, '['), "nested more than");  // no deep recursion on hostile input
}

void test_every_prefix_of_a_document() {
  // Every proper prefix of a document is refused (or, where it is itself a document, read) without a crash.
  const std::string doc = "{\"inputs\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [1, {\"min\": 2, "
                          "\"max\": 8}], \"strides\": [8, 1]}], \"outputs\": []}";
  int accepted = 0;
  for (size_t n = 0; n < doc.size(); ++n) {
    try {
      parse(doc.substr(0, n));
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT(accepted == 0);
  EXPECT(parse(doc).get("inputs")->array()[0].get("shape")->array()[1].get("max")->integer() == 8);
}

}  // namespace

int main() {
  test_values();
  test_refusals();
  test_every_prefix_of_a_document();
  return test_result("test_json");
}
