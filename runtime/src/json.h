// A small JSON reader for the package's contract entry: objects, arrays, strings, numbers, bools, null.
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

  static Json parse(const std::string& text, const std::string& what);  // throws Error naming `what`

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  double number() const { return number_; }
  bool boolean() const { return bool_; }
  const std::string& string() const { return string_; }
  const std::vector<Json>& array() const { return array_; }
  const Json* get(const std::string& key) const;  // nullptr when absent or not an object

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

}  // namespace aoti_host
