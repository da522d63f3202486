// A set of option values: explicit values (API or command line) over COHORT_<KEY>
// environment variables over the registry's defaults.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/options.h"

namespace cohort {

enum class OptionSource { kDefault = 0, kEnvironment = 1, kExplicit = 2 };

class Config {
 public:
  // Validates and stores a value; throws kInvalidArgument (unknown key, bad value).
  void set(std::string_view key, std::string_view value);
  // Typed values: set_int and set_float take int and float keys, set_bool bool keys;
  // another key type is kInvalidArgument saying what the key takes (so is a value
  // out of its range, as for set()).
  void set_int(std::string_view key, int64_t value);
  void set_float(std::string_view key, double value);
  void set_bool(std::string_view key, bool value);
  void unset(std::string_view key);

  // Effective values. Throw kInvalidArgument for an unknown key, a type mismatch or a
  // bad environment value (naming the variable).
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  OptionSource source(std::string_view key) const;
  // Whether the user chose the value: set through the API or a command line, or by a
  // COHORT_<KEY> environment variable (an environment variable counts: it is as much
  // the user's choice as a flag). False when the registry's default applies.
  bool is_explicit(std::string_view key) const { return source(key) != OptionSource::kDefault; }

  // Consumes registry options from a command line; returns the indices of the
  // arguments it did not consume (argv[0] first). See cohort_config_parse_args().
  std::vector<int> parse_args(int argc, const char* const* argv, bool strict);

  const std::map<std::string, std::string>& explicit_values() const { return values_; }

 private:
  std::string lookup(const OptionSpec& spec) const;

  std::map<std::string, std::string> values_;  // canonical key → canonical value
};

}  // namespace cohort
