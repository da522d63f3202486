#include "json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace cohortrun {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  Json document() {
    Json v = value(0);
    space();
    if (pos_ != text_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw std::runtime_error("malformed JSON at offset " + std::to_string(pos_) + ": " + what);
  }
  void space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) error(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    if (text_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) error("nested too deeply");
    space();
    if (pos_ >= text_.size()) error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json{string()};
    if (word("true")) return Json{true};
    if (word("false")) return Json{false};
    if (word("null")) return Json{nullptr};
    return Json{number()};
  }

  Json object(int depth) {
    ++pos_;
    auto members = std::make_shared<Json::Object>();
    if (!eat('}')) {
      do {
        space();
        if (pos_ >= text_.size() || text_[pos_] != '"') error("expected a member name");
        std::string key = string();
        expect(':');
        members->emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}');
    }
    return Json{members};
  }

  Json array(int depth) {
    ++pos_;
    auto items = std::make_shared<Json::Array>();
    if (!eat(']')) {
      do items->push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    }
    return Json{items};
  }

  double number() {
    const char* begin = text_.data() + pos_;
    double v = 0;
    auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), v);
    if (ec != std::errc() || end == begin) error("expected a value");
    pos_ += static_cast<size_t>(end - begin);
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      c = text_[pos_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          unsigned code = 0;
          if (pos_ + 4 > text_.size() ||
              std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16).ptr != text_.data() + pos_ + 4)
            error("bad \\u escape");
          pos_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default:
          out += c;
      }
    }
    if (pos_ >= text_.size()) error("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const Json* Json::get(std::string_view key) const {
  const auto* object = std::get_if<std::shared_ptr<Object>>(&value);
  if (!object) return nullptr;
  for (const auto& [name, member] : **object)
    if (name == key) return &member;
  return nullptr;
}

Json parse_json(std::string_view text) { return Reader(text).document(); }

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, end);
}

}  // namespace cohortrun
