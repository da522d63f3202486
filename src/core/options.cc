#include "core/options.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "core/status.h"
#include "core/strings.h"

namespace cohort {
namespace {

constexpr double kNoLimit = 0;

#define COHORT_OPTION_INT(name, def, lo, hi, help) \
  OptionSpec{name, OptionType::kInt, def, lo, hi, "", "", kGroup, help},
#define COHORT_OPTION_FLOAT(name, def, lo, hi, help) \
  OptionSpec{name, OptionType::kFloat, def, lo, hi, "", "", kGroup, help},
#define COHORT_OPTION_BOOL(name, def, help) \
  OptionSpec{name, OptionType::kBool, def, kNoLimit, kNoLimit, "", "", kGroup, help},
#define COHORT_OPTION_STRING(name, def, help) \
  OptionSpec{name, OptionType::kString, def, kNoLimit, kNoLimit, "", "", kGroup, help},
#define COHORT_OPTION_CHOICE(name, def, choices, aliases, help) \
  OptionSpec{name, OptionType::kChoice, def, kNoLimit, kNoLimit, choices, aliases, kGroup, help},

const std::vector<OptionSpec>& registry() {
  static const std::vector<OptionSpec> table = [] {
    std::vector<OptionSpec> all;
    auto add = [&all](std::initializer_list<OptionSpec> group) { all.insert(all.end(), group); };
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "core";
      add({
#include "core/options/core.inc"
      });
    }
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "comm";
      add({
#include "core/options/comm.inc"
      });
    }
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "compute";
      add({
#include "core/options/compute.inc"
      });
    }
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "data";
      add({
#include "core/options/data.inc"
      });
    }
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "train";
      add({
#include "core/options/train.inc"
      });
    }
    {
      [[maybe_unused]] constexpr std::string_view kGroup = "launcher";
      add({
#include "core/options/launcher.inc"
      });
    }
    return all;
  }();
  return table;
}

#undef COHORT_OPTION_INT
#undef COHORT_OPTION_FLOAT
#undef COHORT_OPTION_BOOL
#undef COHORT_OPTION_STRING
#undef COHORT_OPTION_CHOICE

const char* type_word(OptionType t) {
  switch (t) {
    case OptionType::kInt:
      return "int";
    case OptionType::kFloat:
      return "float";
    case OptionType::kBool:
      return "bool";
    case OptionType::kString:
      return "string";
    case OptionType::kChoice:
      return "choice";
  }
  return "?";
}

std::string range_text(const OptionSpec& s) { return cat("[", format_double(s.min), ", ", format_double(s.max), "]"); }

}  // namespace

std::span<const OptionSpec> option_registry() { return registry(); }

std::string normalize_key(std::string_view key) {
  std::string k = to_lower(key);
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

const OptionSpec* find_option(std::string_view key) {
  static const std::map<std::string, const OptionSpec*, std::less<>> index = [] {
    std::map<std::string, const OptionSpec*, std::less<>> m;
    for (const OptionSpec& s : registry()) m.emplace(std::string(s.name), &s);
    return m;
  }();
  auto it = index.find(normalize_key(key));
  return it == index.end() ? nullptr : it->second;
}

std::string nearest_option(std::string_view key) {
  std::string k = normalize_key(key);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const OptionSpec& s : registry()) {
    size_t d = edit_distance(k, s.name);
    // A key that contains the typed text (or the reverse) is a good suggestion too.
    if (k.size() >= 3 && (s.name.find(k) != std::string_view::npos || k.find(s.name) != std::string::npos))
      d = std::min<size_t>(d, 2);
    if (d < best_d) {
      best_d = d;
      best = s.name;
    }
  }
  return best_d <= std::max<size_t>(2, k.size() / 3) ? best : "";
}

const OptionSpec& require_option(std::string_view key) {
  if (const OptionSpec* s = find_option(key)) return *s;
  std::string near = nearest_option(key);
  if (near.empty()) fail(Code::kInvalidArgument, "unknown option '", key, "' (see --help for the list of options)");
  fail(Code::kInvalidArgument, "unknown option '", key, "'; did you mean '", near, "'?");
}

std::string env_name(std::string_view key) { return "COHORT_" + to_upper(normalize_key(key)); }

std::string describe_allowed(const OptionSpec& s) {
  switch (s.type) {
    case OptionType::kInt:
      return cat("an integer in ", range_text(s));
    case OptionType::kFloat:
      return cat("a number in ", range_text(s));
    case OptionType::kBool:
      return "true or false (also 1/0, yes/no, on/off)";
    case OptionType::kString:
      return "any text";
    case OptionType::kChoice: {
      std::string text = cat("one of ", s.choices);
      if (!s.aliases.empty()) {
        std::string alias_words;
        for (const std::string& a : split(s.aliases, '|')) {
          if (!alias_words.empty()) alias_words += ", ";
          alias_words += a.substr(0, a.find('='));
        }
        text += cat(" (also ", alias_words, ")");
      }
      return text;
    }
  }
  return "";
}

std::string canonical_value(const OptionSpec& s, std::string_view value, std::string_view origin) {
  auto bad = [&]() -> std::string {
    fail(Code::kInvalidArgument, origin, ": invalid value '", value, "' for '", s.name, "': expected ",
         describe_allowed(s));
  };
  switch (s.type) {
    case OptionType::kInt: {
      auto v = parse_int(value);
      if (!v) {
        // Accept integral floats such as "1e3".
        auto d = parse_double(value);
        if (!d || std::floor(*d) != *d || std::fabs(*d) > 9.0e15) return bad();
        v = static_cast<int64_t>(*d);
      }
      if (static_cast<double>(*v) < s.min || static_cast<double>(*v) > s.max) return bad();
      return std::to_string(*v);
    }
    case OptionType::kFloat: {
      auto v = parse_double(value);
      if (!v || *v < s.min || *v > s.max) return bad();
      return format_double(*v);
    }
    case OptionType::kBool: {
      auto v = parse_bool(value);
      if (!v) return bad();
      return *v ? "true" : "false";
    }
    case OptionType::kString:
      return std::string(value);
    case OptionType::kChoice: {
      std::string lower = to_lower(trim(value));
      for (const std::string& c : split(s.choices, '|'))
        if (to_lower(c) == lower) return c;
      if (!s.aliases.empty()) {
        for (const std::string& a : split(s.aliases, '|')) {
          size_t eq = a.find('=');
          if (to_lower(a.substr(0, eq)) == lower) return a.substr(eq + 1);
        }
      }
      return bad();
    }
  }
  return bad();
}

const std::string& options_help(std::string_view group) {
  static std::mutex mu;
  static std::map<std::string, std::string, std::less<>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(group);
  if (it != cache.end()) return it->second;
  std::string out;
  std::string_view current;
  for (const OptionSpec& s : registry()) {
    if (!group.empty() && s.group != group) continue;
    if (s.group != current) {
      current = s.group;
      out += cat(out.empty() ? "" : "\n", current, " options:\n");
    }
    std::string flag = cat("  --", s.name);
    if (s.type != OptionType::kBool) flag += "=" + to_upper(std::string(type_word(s.type)));
    char line[128];
    std::snprintf(line, sizeof line, "%-34s ", flag.c_str());
    out += line;
    if (flag.size() > 34) out += "\n" + std::string(37, ' ');
    out += cat(s.help, " [", describe_allowed(s),
               "; default: ", s.default_value.empty() ? "\"\"" : std::string(s.default_value), "; env ",
               env_name(s.name), "]\n");
  }
  return cache.emplace(std::string(group), std::move(out)).first->second;
}

const std::string& options_markdown() {
  static const std::string page = [] {
    std::string out =
        "# cohort options\n\n"
        "<!-- Generated from src/core/options/*.inc by cohort_option_markdown(); do not edit. -->\n\n"
        "Every option is a snake_case key. It can be set through `cohort_config_set()`, as a\n"
        "command-line flag (`--key=value` or `--key value`; `-` and `_` are alike; a bool flag\n"
        "alone means true and `--no-key` false) or as the environment variable `COHORT_<KEY>`.\n"
        "An API call or a flag wins over the environment, which wins over the default.\n";
    std::string_view current;
    for (const OptionSpec& s : registry()) {
      if (s.group != current) {
        current = s.group;
        out += cat("\n## ", current, "\n\n| key | type | default | allowed | description |\n|---|---|---|---|---|\n");
      }
      auto escape = [](std::string text) {
        for (size_t i = 0; (i = text.find('|', i)) != std::string::npos; i += 2) text.insert(i, "\\");
        return text;
      };
      out += cat("| `", s.name, "` | ", type_word(s.type), " | `", s.default_value, "` | ", escape(describe_allowed(s)),
                 " | ", escape(std::string(s.help)), " |\n");
    }
    return out;
  }();
  return page;
}

}  // namespace cohort
