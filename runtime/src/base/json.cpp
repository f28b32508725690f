#include "base/json.h"

#include <cmath>
#include <cstdlib>

#include "aoti_host/status.h"
#include "aoti_host/error.h"
#include "base/utf8.h"

namespace aoti_host {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Json document() {
    const size_t bad = utf8_error(s_);
    if (bad != s_.size()) {
      i_ = bad;
      fail("not UTF-8");
    }
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
    throw Error(what_ + ": invalid JSON at offset " + std::to_string(i_) + ": " + why, AOTI_HOST_INVALID_PROGRAM);
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
  uint32_t hex4() {
    if (s_.size() - i_ < 4) fail("short \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      const int h = hex_value(s_[i_ + k]);
      if (h < 0) fail("bad \\u escape");
      cp = cp * 16 + static_cast<uint32_t>(h);
    }
    i_ += 4;
    return cp;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cp = hex4();
          // A surrogate pair is one code point; a lone surrogate is kept as its 3-byte form (as Python does).
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(i_, 2, "\\u") == 0) {
            const size_t at = i_;
            i_ += 2;
            const uint32_t low = hex4();
            if (low >= 0xDC00 && low <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            else i_ = at;
          }
          append_utf8(out, cp);
          break;
        }
        default: --i_, fail("unknown escape");
      }
    }
  }
  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void number(Json& v) {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !is_digit(s_[i_])) fail("unexpected character");
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    }
    bool integer = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      integer = false;
      ++i_;
      if (i_ >= s_.size() || !is_digit(s_[i_])) fail("a digit must follow '.'");
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !is_digit(s_[i_])) fail("a digit must follow the exponent");
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    }
    const std::string token = s_.substr(start, i_ - start);
    v.kind_ = Json::Kind::Number;
    v.number_ = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(v.number_)) {
      i_ = start;
      fail("number " + token + " is out of range");
    }
    if (integer) {  // exact int64 value, or not an integer (beyond int64 it is only a number)
      const bool negative = token[0] == '-';
      uint64_t mag = 0;
      bool fits = true;
      for (size_t k = negative ? 1 : 0; k < token.size() && fits; ++k) {
        const uint64_t d = static_cast<uint64_t>(token[k] - '0');
        if (__builtin_mul_overflow(mag, uint64_t{10}, &mag) || __builtin_add_overflow(mag, d, &mag)) fits = false;
      }
      const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
      if (fits && mag <= limit) {
        v.integer_ = true;
        v.int_ = negative ? (mag == limit ? INT64_MIN : -static_cast<int64_t>(mag)) : static_cast<int64_t>(mag);
      }
    }
  }
  Json value(int depth) {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{' || c == '[') {
      if (depth + 1 > Json::kMaxDepth) fail("nested more than " + std::to_string(Json::kMaxDepth) + " deep");
    }
    if (c == '{') {
      ++i_;
      v.kind_ = Json::Kind::Object;
      if (eat('}')) return v;
      do {
        ws();
        const size_t at = i_;
        std::string key = str();
        expect(':');
        Json item = value(depth + 1);
        if (!v.object_.emplace(std::move(key), std::move(item)).second) {
          i_ = at;
          fail("duplicate key");
        }
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
      number(v);
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
