#include "core/json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/status.h"
#include "core/strings.h"

namespace cohort {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not valid (overlong
// forms, surrogates and code points above U+10FFFF are invalid too).
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == 0) return "0";  // also -0
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

JsonObject& JsonObject::add_raw(std::string_view key, std::string_view json) {
  keys_.emplace_back(key);
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key);
  body_ += ": ";
  body_.append(json);
  return *this;
}

JsonObject& JsonObject::add_string(std::string_view key, std::string_view value) {
  return add_raw(key, json_string(value));
}
JsonObject& JsonObject::add_number(std::string_view key, double value) { return add_raw(key, json_number(value)); }
JsonObject& JsonObject::add_number(std::string_view key, std::optional<double> value) {
  return add_raw(key, value ? json_number(*value) : "null");
}
JsonObject& JsonObject::add_int(std::string_view key, int64_t value) { return add_raw(key, std::to_string(value)); }
JsonObject& JsonObject::add_bool(std::string_view key, bool value) { return add_raw(key, value ? "true" : "false"); }
JsonObject& JsonObject::add_null(std::string_view key) { return add_raw(key, "null"); }
JsonObject& JsonObject::add_object(std::string_view key, const JsonObject& value) { return add_raw(key, value.str()); }

bool JsonObject::has(std::string_view key) const { return std::find(keys_.begin(), keys_.end(), key) != keys_.end(); }

std::string JsonObject::str() const { return "{" + body_ + "}"; }

namespace {

// A strict reader of JSON text (RFC 8259) that validates values and decodes strings;
// errors name the text and the byte offset.
class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  std::vector<std::pair<std::string, std::string>> members() {
    std::vector<std::pair<std::string, std::string>> out;
    blanks();
    while (i_ < s_.size()) {
      if (!out.empty()) {
        expect(',', "',' between members");
        blanks();
      }
      std::string key = string();
      blanks();
      expect(':', "':' after the key");
      blanks();
      const size_t start = i_;
      value(0);
      out.emplace_back(std::move(key), std::string(s_.substr(start, i_ - start)));
      blanks();
    }
    return out;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void error(std::string_view expected) const {
    fail(Code::kInvalidArgument, what_, ": expected ", expected, " at byte ", i_,
         i_ < s_.size() ? cat(" (found '", s_[i_], "')") : std::string(" (found the end)"));
  }
  void blanks() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c, std::string_view expected) {
    if (i_ >= s_.size() || s_[i_] != c) error(expected);
    ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  void value(int depth) {
    if (depth > kMaxDepth) error("less nesting");
    if (i_ >= s_.size()) error("a value");
    const char c = s_[i_];
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      container(depth);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      number();
    } else if (!literal("true") && !literal("false") && !literal("null")) {
      error("a value");
    }
  }

  void container(int depth) {
    const char close = s_[i_++] == '{' ? '}' : ']';
    blanks();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return;
    }
    for (;;) {
      if (close == '}') {
        string();
        blanks();
        expect(':', "':' after the key");
        blanks();
      }
      value(depth + 1);
      blanks();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        blanks();
        continue;
      }
      expect(close, close == '}' ? "',' or '}'" : "',' or ']'");
      return;
    }
  }

  void digits() {
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') error("a digit");
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
  }
  void number() {
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else {
      digits();
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
  }

  std::string string() {
    expect('"', "a string");
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) error("'\"' closing the string");
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') break;
      if (c < 0x20) error("no control character in a string");
      if (c == '\\') {
        ++i_;
        escape(out);
      } else {
        out += static_cast<char>(c);
        ++i_;
      }
    }
    ++i_;
    return out;
  }

  void escape(std::string& out) {
    if (i_ >= s_.size()) error("an escape");
    const char c = s_[i_++];
    static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
    if (const size_t k = kFrom.find(c); k != std::string_view::npos) {
      out += kTo[k];
      return;
    }
    if (c != 'u') error("an escape (\\\", \\\\, \\/, \\b, \\f, \\n, \\r, \\t or \\uXXXX)");
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
      i_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) error("a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
      cp = 0xFFFD;  // a lone surrogate
    }
    utf8(cp, out);
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) error("four hex digits after \\u");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[i_])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    return v;
  }
  static void utf8(uint32_t cp, std::string& out) {
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

  std::string_view s_;
  std::string_view what_;
  size_t i_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_json_members(std::string_view text, std::string_view what) {
  return Reader(text, what).members();
}

}  // namespace cohort
