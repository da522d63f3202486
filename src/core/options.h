// The option registry: every key cohort understands, declared once (type, default,
// range or choices, help) in src/core/options/*.inc, one file per subsystem group.
// The same declaration serves the C API, command lines, COHORT_<KEY> environment
// variables, --help text and docs/guides/options.md.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

enum class OptionType { kInt, kFloat, kBool, kString, kChoice };

struct OptionSpec {
  std::string_view name;
  OptionType type;
  std::string_view default_value;
  double min = 0;
  double max = 0;
  std::string_view choices;  // kChoice: "f32|f16|bf16"
  std::string_view aliases;  // kChoice: "fp32=f32|fp16=f16"
  std::string_view group;
  std::string_view help;
};

std::span<const OptionSpec> option_registry();

// Normalises a key or flag name: '-' → '_', lower case. "Batch-Size" → "batch_size".
std::string normalize_key(std::string_view key);

// The spec of a key (after normalisation), or nullptr.
const OptionSpec* find_option(std::string_view key);

// Like find_option, but throws kInvalidArgument naming the key and the nearest valid one.
const OptionSpec& require_option(std::string_view key);

// The nearest registry key by edit distance ("" when nothing is close).
std::string nearest_option(std::string_view key);

// Validates text for an option and returns its canonical form (e.g. "fp16" → "f16",
// "TRUE" → "true", "1e3" → "1000" for an int). Throws kInvalidArgument naming
// `origin` (e.g. "option 'batch_size'" or "environment variable COHORT_BATCH_SIZE"),
// the value and what is allowed.
std::string canonical_value(const OptionSpec& spec, std::string_view value, std::string_view origin);

// The environment variable for a key: "COHORT_BATCH_SIZE".
std::string env_name(std::string_view key);

// "int in [1, 65536]", "one of f32|f16|bf16 (also fp32, fp16)", ...
std::string describe_allowed(const OptionSpec& spec);

// --help text for one group ("" = all groups), and the Markdown reference page.
const std::string& options_help(std::string_view group);
const std::string& options_markdown();

}  // namespace cohort
