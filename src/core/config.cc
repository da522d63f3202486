#include "core/config.h"

#include <cstdlib>

#include "core/status.h"
#include "core/strings.h"

namespace cohort {

void Config::set(std::string_view key, std::string_view value) {
  const OptionSpec& spec = require_option(key);
  values_[std::string(spec.name)] = canonical_value(spec, value, cat("option '", spec.name, "'"));
}

namespace {

const OptionSpec& typed(std::string_view key, bool number) {
  const OptionSpec& spec = require_option(key);
  if (number)
    require(spec.type == OptionType::kInt || spec.type == OptionType::kFloat, "option '", spec.name,
            "' is not a number: it takes ", describe_allowed(spec));
  else
    require(spec.type == OptionType::kBool, "option '", spec.name, "' is not a bool: it takes ",
            describe_allowed(spec));
  return spec;
}

}  // namespace

void Config::set_int(std::string_view key, int64_t value) { set(typed(key, true).name, std::to_string(value)); }
void Config::set_float(std::string_view key, double value) { set(typed(key, true).name, format_double(value)); }
void Config::set_bool(std::string_view key, bool value) { set(typed(key, false).name, value ? "true" : "false"); }

void Config::unset(std::string_view key) { values_.erase(std::string(require_option(key).name)); }

std::string Config::lookup(const OptionSpec& spec) const {
  auto it = values_.find(std::string(spec.name));
  if (it != values_.end()) return it->second;
  std::string var = env_name(spec.name);
  if (const char* env = std::getenv(var.c_str())) return canonical_value(spec, env, cat("environment variable ", var));
  return std::string(spec.default_value);
}

OptionSource Config::source(std::string_view key) const {
  const OptionSpec& spec = require_option(key);
  if (values_.count(std::string(spec.name))) return OptionSource::kExplicit;
  if (std::getenv(env_name(spec.name).c_str())) return OptionSource::kEnvironment;
  return OptionSource::kDefault;
}

std::string Config::get_string(std::string_view key) const { return lookup(require_option(key)); }

int64_t Config::get_int(std::string_view key) const {
  const OptionSpec& spec = require_option(key);
  require(spec.type == OptionType::kInt, "option '", spec.name, "' is not an integer (it is ", describe_allowed(spec),
          ")");
  return *parse_int(lookup(spec));
}

double Config::get_float(std::string_view key) const {
  const OptionSpec& spec = require_option(key);
  require(spec.type == OptionType::kInt || spec.type == OptionType::kFloat, "option '", spec.name,
          "' is not a number (it is ", describe_allowed(spec), ")");
  return *parse_double(lookup(spec));
}

bool Config::get_bool(std::string_view key) const {
  const OptionSpec& spec = require_option(key);
  require(spec.type == OptionType::kBool, "option '", spec.name, "' is not a bool (it is ", describe_allowed(spec),
          ")");
  return lookup(spec) == "true";
}

std::vector<int> Config::parse_args(int argc, const char* const* argv, bool strict) {
  std::vector<int> rest;
  if (argc > 0) rest.push_back(0);
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      for (; i < argc; ++i) rest.push_back(i);
      break;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      rest.push_back(i);
      continue;
    }
    std::string_view body = arg.substr(2);
    size_t eq = body.find('=');
    std::string_view name = body.substr(0, eq);
    const OptionSpec* spec = find_option(name);
    bool negated = false;
    if (!spec && eq == std::string_view::npos && normalize_key(name).rfind("no_", 0) == 0) {
      spec = find_option(name.substr(3));
      negated = spec && spec->type == OptionType::kBool;
      if (!negated) spec = nullptr;
    }
    if (!spec) {
      if (strict && name != "help") {
        std::string near = nearest_option(name);
        fail(Code::kInvalidArgument, "unknown flag '--", name, "'",
             near.empty() ? std::string(" (see --help)") : cat("; did you mean '--", near, "'?"));
      }
      rest.push_back(i);
      continue;
    }
    std::string origin = cat("flag --", spec->name);
    if (negated) {
      values_[std::string(spec->name)] = "false";
    } else if (eq != std::string_view::npos) {
      values_[std::string(spec->name)] = canonical_value(*spec, body.substr(eq + 1), origin);
    } else if (spec->type == OptionType::kBool && (i + 1 >= argc || !parse_bool(argv[i + 1]).has_value())) {
      values_[std::string(spec->name)] = "true";
    } else {
      require(i + 1 < argc, origin, ": missing value (expected ", describe_allowed(*spec), ")");
      values_[std::string(spec->name)] = canonical_value(*spec, argv[++i], origin);
    }
  }
  return rest;
}

}  // namespace cohort
