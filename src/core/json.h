// cohort's one JSON writer, for one-line objects (the run summary, the checker's
// records, the timeline's events): keys keep their order, strings are escaped
// (control characters as \u00XX, invalid UTF-8 as U+FFFD) and non-finite numbers
// become null, so the output always parses. And a reader of the members of an object,
// for fields a caller hands in as JSON text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

  // Whether a member with this key was added.
  bool has(std::string_view key) const;
  // {"a": 1, "b": "x"} — ", " and ": " separators, on one line.
  std::string str() const;

 private:
  std::string body_;
  std::vector<std::string> keys_;
};

// The members of a JSON object written without its braces (`"a": 1, "b": [2, {}]`; empty
// or blank text: none), in order: each key decoded, each value as written (valid JSON,
// surrounding blanks dropped). Throws kInvalidArgument saying what is wrong at which
// byte offset, naming the text as `what`.
std::vector<std::pair<std::string, std::string>> parse_json_members(std::string_view text, std::string_view what);

}  // namespace cohort
