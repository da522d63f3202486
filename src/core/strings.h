// Small text helpers shared by the option registry, parsers and messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);
std::string trim(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep);
// Edit distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

// Strict whole-string parses: nullopt on any trailing text, overflow or empty input.
std::optional<int64_t> parse_int(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::optional<bool> parse_bool(std::string_view s);
// Sizes with optional binary suffix: 8, 64K, 512M, 1G (powers of 1024).
std::optional<uint64_t> parse_size(std::string_view s);
// Shortest text that parses back to the same double.
std::string format_double(double v);
// Bytes as "1.5 MiB".
std::string format_bytes(double bytes);

}  // namespace cohort
