#include "train/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

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

std::string JsonObject::str() const { return "{" + body_ + "}"; }

}  // namespace cohort
