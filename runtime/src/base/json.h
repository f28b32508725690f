// A small, strict JSON reader (RFC 8259) for the package's own entries (contract, constant layouts,
// method manifest): objects, arrays, strings, numbers, bools, null.
//
// Strict where a lenient reader would let a crafted entry mean two things: the text must be UTF-8;
// numbers follow the JSON grammar (no NaN, Infinity, hex, leading '+' or '0') and must be finite as
// doubles (1e400 is refused); integer literals (no fraction, no exponent) that fit in int64 are kept
// exactly (is_integer); an object may not repeat a key; at most kMaxDepth arrays/objects nest.
// toolchain/verify/package.py reads the same subset in Python.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aoti_host {

class Json {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };
  static constexpr int kMaxDepth = 64;

  static Json parse(const std::string& text, const std::string& what);  // throws Error naming `what`

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_integer() const { return kind_ == Kind::Number && integer_; }  // an integer literal within int64
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  double number() const { return number_; }
  int64_t integer() const { return int_; }  // valid when is_integer()
  bool boolean() const { return bool_; }
  const std::string& string() const { return string_; }
  const std::vector<Json>& array() const { return array_; }
  const std::map<std::string, Json>& object() const { return object_; }
  const Json* get(const std::string& key) const;  // nullptr when absent or not an object

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool integer_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

}  // namespace aoti_host
