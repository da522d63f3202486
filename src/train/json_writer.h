// A small writer for one-line JSON objects (the run summary): keys keep their order,
// strings are escaped (control characters as \u00XX, invalid UTF-8 as U+FFFD) and
// non-finite numbers become null, so the output always parses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cohort {

// A JSON string literal, quotes included.
std::string json_string(std::string_view text);
// The shortest text that reads back as the same double; "null" for NaN and ±inf.
std::string json_number(double value);

class JsonObject {
 public:
  JsonObject& add_string(std::string_view key, std::string_view value);
  JsonObject& add_number(std::string_view key, double value);
  JsonObject& add_number(std::string_view key, std::optional<double> value);  // nullopt → null
  JsonObject& add_int(std::string_view key, int64_t value);
  JsonObject& add_bool(std::string_view key, bool value);
  JsonObject& add_null(std::string_view key);
  JsonObject& add_object(std::string_view key, const JsonObject& value);
  // `json` must already be valid JSON text (a caller-built value).
  JsonObject& add_raw(std::string_view key, std::string_view json);

  // {"a": 1, "b": "x"} — ", " and ": " separators, on one line.
  std::string str() const;

 private:
  std::string body_;
};

}  // namespace cohort
