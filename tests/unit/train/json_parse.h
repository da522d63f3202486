// A strict little JSON reader for tests: parses a whole document into a tree, keeping
// object keys in order; throws std::runtime_error on anything malformed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::testing {

struct JsonMember;

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;  // kString; for kNumber the literal as written
  std::vector<Json> items;
  std::vector<JsonMember> members;

  const Json& at(std::string_view key) const;
  bool has(std::string_view key) const;
};

struct JsonMember {
  std::string key;
  Json value;
};

inline const Json& Json::at(std::string_view key) const {
  for (const JsonMember& m : members)
    if (m.key == key) return m.value;
  throw std::runtime_error("no key " + std::string(key));
}

inline bool Json::has(std::string_view key) const {
  for (const JsonMember& m : members)
    if (m.key == key) return true;
  return false;
}

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  Json parse_document() {
    Json v = value();
    ws();
    if (i_ != s_.size()) err("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void err(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
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
    if (!eat(c)) err(std::string("expected '") + c + "'");
  }
  bool literal(std::string_view w) {
    if (s_.substr(i_, w.size()) == w) {
      i_ += w.size();
      return true;
    }
    return false;
  }
  Json value() {
    ws();
    if (i_ >= s_.size()) err("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Json::Kind::kObject;
      if (eat('}')) return v;
      do {
        ws();
        std::string k = string();
        expect(':');
        Json item = value();
        v.members.push_back({std::move(k), std::move(item)});
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = Json::Kind::kArray;
      if (eat(']')) return v;
      do v.items.push_back(value());
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Kind::kString;
      v.text = string();
    } else if (literal("true")) {
      v.kind = Json::Kind::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Json::Kind::kBool;
    } else if (literal("null")) {
      v.kind = Json::Kind::kNull;
    } else {
      v.kind = Json::Kind::kNumber;
      size_t start = i_;
      if (s_[i_] == '-') ++i_;
      auto digits = [&] {
        size_t d = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        if (i_ == d) err("expected a digit");
      };
      if (i_ < s_.size() && s_[i_] == '0')
        ++i_;
      else
        digits();
      if (i_ < s_.size() && s_[i_] == '.') {
        ++i_;
        digits();
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        ++i_;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        digits();
      }
      v.text = std::string(s_.substr(start, i_ - start));
      v.number = std::strtod(v.text.c_str(), nullptr);
    }
    return v;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
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
  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') err("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) err("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) err("raw control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) err("bad escape");
      char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) err("short \\u escape");
          uint32_t cp = static_cast<uint32_t>(std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16));
          i_ += 4;
          put_utf8(out, cp);
          break;
        }
        default:
          err("bad escape");
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

inline Json parse_json(std::string_view s) { return JsonParser(s).parse_document(); }

}  // namespace cohort::testing
