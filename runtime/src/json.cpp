#include "json.h"

#include <cstdlib>

#include "aoti_host/error.h"

namespace aoti_host {

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Json document() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& why) {
    throw Error(what_ + ": invalid JSON at offset " + std::to_string(i_) + ": " + why);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(i_, n, word) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          unsigned cp = static_cast<unsigned>(std::strtoul(s_.substr(i_, 4).c_str(), nullptr, 16));
          i_ += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: out += e;
      }
    }
  }
  Json value(int depth) {
    if (depth > 64) fail("nested too deeply");
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind_ = Json::Kind::Object;
      if (eat('}')) return v;
      do {
        ws();
        std::string key = str();
        expect(':');
        v.object_[key] = value(depth + 1);
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind_ = Json::Kind::Array;
      if (eat(']')) return v;
      do {
        v.array_.push_back(value(depth + 1));
      } while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind_ = Json::Kind::String;
      v.string_ = str();
    } else if (literal("true")) {
      v.kind_ = Json::Kind::Bool;
      v.bool_ = true;
    } else if (literal("false")) {
      v.kind_ = Json::Kind::Bool;
    } else if (literal("null")) {
      v.kind_ = Json::Kind::Null;
    } else {
      const char* start = s_.c_str() + i_;
      char* end = nullptr;
      v.number_ = std::strtod(start, &end);
      if (end == start) fail("unexpected character");
      i_ += static_cast<size_t>(end - start);
      v.kind_ = Json::Kind::Number;
    }
    return v;
  }
};

Json Json::parse(const std::string& text, const std::string& what) { return JsonParser(text, what).document(); }

const Json* Json::get(const std::string& key) const {
  if (kind_ != Kind::Object) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

}  // namespace aoti_host
