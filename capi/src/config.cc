#include "core/config.h"

#include "core/status.h"
#include "handles.h"
#include "shim.h"
#include "structs.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {
const char* need_key(const char* key) { return need(key, "key"); }

// Static text; "" if it cannot be made (nothing may throw across the boundary).
const char* help_text(const char* group) noexcept {
  try {
    return options_help(group ? group : "").c_str();
  } catch (...) {
    return "";
  }
}

const char* markdown_text() noexcept {
  try {
    return options_markdown().c_str();
  } catch (...) {
    return "";
  }
}
}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_config_create(cohort_config_t** out) {
  return guard("cohort_config_create", [&] {
    need(out, "out");
    *out = new cohort_config_t();
  });
}

COHORT_API void cohort_config_destroy(cohort_config_t* config) { delete config; }

COHORT_API cohort_status_t cohort_config_clone(const cohort_config_t* config, cohort_config_t** out) {
  return guard("cohort_config_clone", [&] {
    need(config, "config");
    need(out, "out");
    *out = new cohort_config_t{config->config};
  });
}

COHORT_API cohort_status_t cohort_config_set(cohort_config_t* config, const char* key, const char* value) {
  return guard("cohort_config_set", [&] { need(config, "config")->config.set(need_key(key), need(value, "value")); });
}

COHORT_API cohort_status_t cohort_config_set_int(cohort_config_t* config, const char* key, int64_t value) {
  return guard("cohort_config_set_int", [&] { need(config, "config")->config.set_int(need_key(key), value); });
}

COHORT_API cohort_status_t cohort_config_set_float(cohort_config_t* config, const char* key, double value) {
  return guard("cohort_config_set_float", [&] { need(config, "config")->config.set_float(need_key(key), value); });
}

COHORT_API cohort_status_t cohort_config_set_bool(cohort_config_t* config, const char* key, int value) {
  return guard("cohort_config_set_bool", [&] { need(config, "config")->config.set_bool(need_key(key), value != 0); });
}

COHORT_API cohort_status_t cohort_config_unset(cohort_config_t* config, const char* key) {
  return guard("cohort_config_unset", [&] { need(config, "config")->config.unset(need_key(key)); });
}

COHORT_API cohort_status_t cohort_config_get(const cohort_config_t* config, const char* key, char* buffer, size_t size,
                                             size_t* needed) {
  return guard("cohort_config_get",
               [&] { capi::copy_out(need(config, "config")->config.get_string(need_key(key)), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_config_get_int(const cohort_config_t* config, const char* key, int64_t* value) {
  return guard("cohort_config_get_int",
               [&] { *need(value, "value") = need(config, "config")->config.get_int(need_key(key)); });
}

COHORT_API cohort_status_t cohort_config_get_float(const cohort_config_t* config, const char* key, double* value) {
  return guard("cohort_config_get_float",
               [&] { *need(value, "value") = need(config, "config")->config.get_float(need_key(key)); });
}

COHORT_API cohort_status_t cohort_config_get_bool(const cohort_config_t* config, const char* key, int* value) {
  return guard("cohort_config_get_bool",
               [&] { *need(value, "value") = need(config, "config")->config.get_bool(need_key(key)) ? 1 : 0; });
}

COHORT_API cohort_status_t cohort_config_source(const cohort_config_t* config, const char* key,
                                                cohort_option_source_t* source) {
  return guard("cohort_config_source", [&] {
    *need(source, "source") = static_cast<cohort_option_source_t>(need(config, "config")->config.source(need_key(key)));
  });
}

COHORT_API cohort_status_t cohort_config_parse_args(cohort_config_t* config, int argc, char** argv, unsigned flags,
                                                    int* out_argc, char** out_argv) {
  return guard("cohort_config_parse_args", [&] {
    need(config, "config");
    require(argc >= 0, "argc is ", argc, ": expected >= 0");
    require(argc == 0 || argv != nullptr, "argv is NULL but argc is ", argc);
    require((flags & ~unsigned{COHORT_PARSE_STRICT}) == 0, "unknown flags 0x", std::hex, flags,
            ": expected 0 or COHORT_PARSE_STRICT");
    for (int i = 0; i < argc; ++i) need(argv[i], "an argv entry");
    // Parse into a copy so that a failure leaves the config as it was.
    Config parsed = config->config;
    std::vector<int> rest = parsed.parse_args(argc, argv, (flags & COHORT_PARSE_STRICT) != 0);
    config->config = std::move(parsed);
    if (out_argv)
      for (size_t i = 0; i < rest.size(); ++i) out_argv[i] = argv[rest[i]];
    if (out_argc) *out_argc = static_cast<int>(rest.size());
  });
}

COHORT_API cohort_status_t cohort_option_describe(const char* key, cohort_option_info_t* info) {
  return guard("cohort_option_describe", [&] {
    capi::check_struct_size<cohort_option_info_t>(need(info, "info")->struct_size, "info");
    const OptionSpec& spec = require_option(need_key(key));
    cohort_option_info_t full{};
    full.name = spec.name.data();
    full.type = static_cast<cohort_option_type_t>(spec.type);
    full.default_value = spec.default_value.data();
    full.min = spec.min;
    full.max = spec.max;
    full.choices = spec.choices.data();
    full.group = spec.group.data();
    full.help = spec.help.data();
    capi::write_out(info, full, "info");
  });
}

COHORT_API size_t cohort_option_count(void) { return option_registry().size(); }

COHORT_API const char* cohort_option_name(size_t index) {
  auto registry = option_registry();
  return index < registry.size() ? registry[index].name.data() : nullptr;
}

COHORT_API const char* cohort_option_help(const char* group) { return help_text(group); }

COHORT_API const char* cohort_option_markdown(void) { return markdown_text(); }

COHORT_API const char* cohort_options_help(const char* group) { return help_text(group); }

COHORT_API const char* cohort_options_markdown(void) { return markdown_text(); }

}  // extern "C"
