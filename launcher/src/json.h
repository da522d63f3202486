// A small JSON reader for the one-line run summaries cohortrun reads back
// (docs/design.md, "The run summary"). Numbers are doubles; objects keep their key
// order.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cohortrun {

struct Json {
  using Object = std::vector<std::pair<std::string, Json>>;
  using Array = std::vector<Json>;
  std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> value;

  bool is_number() const { return std::holds_alternative<double>(value); }
  double number() const { return std::get<double>(value); }
  // The member `key` of an object, or nullptr (also when this is not an object).
  const Json* get(std::string_view key) const;
};

// Parses one JSON document; throws std::runtime_error saying where it is malformed.
Json parse_json(std::string_view text);

// A JSON string literal for `text` (quotes and escapes included).
std::string json_quote(std::string_view text);

// Shortest text that reads back as the same double ("null" for NaN and infinities).
std::string json_number(double value);

}  // namespace cohortrun
