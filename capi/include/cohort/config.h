/**
 * @file config.h
 * @brief Options: one vocabulary of snake_case keys shared by the API, command lines,
 *        environment variables and the documentation.
 *
 * Every key is declared once in cohort's option registry with a type, a default, a
 * range or a list of choices, and a help text (see docs/guides/options.md, or
 * cohort_option_help()). The registry's functions are `cohort_option_*`. A value is looked up in this order: set
 * through this API or a command line, then the environment variable `COHORT_<KEY>` (upper case), then the default. In
 * flags, `-` and `_` are the same (`--batch-size=64` = `--batch_size=64`).
 *
 * A config is not thread-safe: use one per thread or guard it. Distinct configs may
 * be used on distinct threads.
 */
#ifndef COHORT_CONFIG_H
#define COHORT_CONFIG_H

#include "cohort/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque set of option values. */
typedef struct cohort_config_t cohort_config_t;

/** The type of an option's value. */
typedef enum cohort_option_type_t {
  COHORT_OPTION_INT = 0,                   /**< A signed 64-bit integer within [min, max]. */
  COHORT_OPTION_FLOAT = 1,                 /**< A double within [min, max]. */
  COHORT_OPTION_BOOL = 2,                  /**< true/false, 1/0, yes/no, on/off. */
  COHORT_OPTION_STRING = 3,                /**< Free text (paths, names). */
  COHORT_OPTION_CHOICE = 4,                /**< One of a fixed list of words (see choices). */
  COHORT_OPTION_TYPE_MAX_ENUM = 0x7FFFFFFF /**< Not a type: keeps the enum 32-bit. */
} cohort_option_type_t;

/** Where a value returned by a getter came from. */
typedef enum cohort_option_source_t {
  COHORT_SOURCE_DEFAULT = 0,          /**< The registry's default. */
  COHORT_SOURCE_ENVIRONMENT = 1,      /**< The variable COHORT_<KEY>. */
  COHORT_SOURCE_EXPLICIT = 2,         /**< cohort_config_set*() or cohort_config_parse_args(). */
  COHORT_SOURCE_MAX_ENUM = 0x7FFFFFFF /**< Not a source: keeps the enum 32-bit. */
} cohort_option_source_t;

/** Description of one option, filled by cohort_option_describe(). */
typedef struct cohort_option_info_t {
  size_t struct_size;        /**< Set by the caller to sizeof(cohort_option_info_t). */
  const char* name;          /**< snake_case key. Static storage. */
  cohort_option_type_t type; /**< Value type. */
  const char* default_value; /**< Default as text. Static storage. */
  double min;                /**< Lower bound (INT and FLOAT). */
  double max;                /**< Upper bound (INT and FLOAT). */
  const char* choices;       /**< CHOICE: allowed words separated by '|'; else "". */
  const char* group;         /**< Subsystem the option belongs to, e.g. "data". */
  const char* help;          /**< One-sentence description. Static storage. */
} cohort_option_info_t;

/** Flags for cohort_config_parse_args(). */
enum {
  /** Unknown `--options` are errors (naming the nearest key) instead of being handed back. */
  COHORT_PARSE_STRICT = 1u
};

/**
 * @brief Creates an empty config (every option at its environment value or default).
 * @param[out] out Receives the config; the caller owns it and frees it with
 *   cohort_config_destroy().
 * @return ::COHORT_OK, or ::COHORT_ERR_INVALID_ARGUMENT if @p out is NULL.
 */
COHORT_API cohort_status_t cohort_config_create(cohort_config_t** out);

/** @brief Frees a config. NULL is a no-op. Objects created from it keep their own copy. */
COHORT_API void cohort_config_destroy(cohort_config_t* config);

/**
 * @brief Creates an independent copy of @p config (explicit values included).
 * @param[out] out Receives the copy, owned by the caller.
 */
COHORT_API cohort_status_t cohort_config_clone(const cohort_config_t* config, cohort_config_t** out);

/**
 * @brief Sets an option from text, validating it against the registry.
 * @param key A registry key; `-` and `_` are alike.
 * @param value Text in the option's type (see ::cohort_option_type_t).
 * @return ::COHORT_ERR_INVALID_ARGUMENT for an unknown key (the message suggests the
 *   nearest key), a value of the wrong type or out of range (the message names the key,
 *   the value and what is allowed). The config is unchanged on error.
 */
COHORT_API cohort_status_t cohort_config_set(cohort_config_t* config, const char* key, const char* value);
/** @brief Sets an INT option (also accepted for FLOAT options). Errors as cohort_config_set(). */
COHORT_API cohort_status_t cohort_config_set_int(cohort_config_t* config, const char* key, int64_t value);
/** @brief Sets a FLOAT option. Errors as cohort_config_set(). */
COHORT_API cohort_status_t cohort_config_set_float(cohort_config_t* config, const char* key, double value);
/** @brief Sets a BOOL option (0 is false, anything else true). Errors as cohort_config_set(). */
COHORT_API cohort_status_t cohort_config_set_bool(cohort_config_t* config, const char* key, int value);
/** @brief Removes an explicit value, so the environment or the default applies again. */
COHORT_API cohort_status_t cohort_config_unset(cohort_config_t* config, const char* key);

/**
 * @brief Reads an option as text.
 * @param buffer Receives the NUL-terminated text; may be NULL when @p size is 0.
 * @param size Size of @p buffer in bytes.
 * @param[out] needed If not NULL, receives the size needed including the NUL.
 * @return ::COHORT_ERR_INVALID_ARGUMENT for an unknown key, a too small buffer (then
 *   @p needed says how much is needed), or a bad value in the environment variable
 *   (the message names the variable).
 */
COHORT_API cohort_status_t cohort_config_get(const cohort_config_t* config, const char* key, char* buffer, size_t size,
                                             size_t* needed);
/** @brief Reads an INT option. ::COHORT_ERR_INVALID_ARGUMENT if the key is not INT. */
COHORT_API cohort_status_t cohort_config_get_int(const cohort_config_t* config, const char* key, int64_t* value);
/** @brief Reads an INT or FLOAT option as a double. */
COHORT_API cohort_status_t cohort_config_get_float(const cohort_config_t* config, const char* key, double* value);
/** @brief Reads a BOOL option as 0 or 1. */
COHORT_API cohort_status_t cohort_config_get_bool(const cohort_config_t* config, const char* key, int* value);
/** @brief Tells where the current value of @p key comes from. */
COHORT_API cohort_status_t cohort_config_source(const cohort_config_t* config, const char* key,
                                                cohort_option_source_t* source);

/**
 * @brief Consumes the registry's options from a command line.
 *
 * Accepts `--key=value`, `--key value`, and for BOOL options `--key` alone (true) and
 * `--no-key` (false). `--` ends option parsing (it and everything after it are handed
 * back). Arguments it does not consume (program arguments, unknown options unless
 * ::COHORT_PARSE_STRICT) are handed back in their original order.
 *
 * @param argc, argv The command line; argv[0] is always handed back first.
 * @param flags 0 or ::COHORT_PARSE_STRICT.
 * @param[out] out_argc Number of arguments handed back; may be NULL.
 * @param[out] out_argv Array of at least @p argc pointers, receiving borrowed pointers
 *   into @p argv; may be NULL.
 * @return ::COHORT_ERR_INVALID_ARGUMENT on the first bad or missing value, or an
 *   unknown option under ::COHORT_PARSE_STRICT (the message names the flag); the config
 *   and the outputs are then unchanged.
 */
COHORT_API cohort_status_t cohort_config_parse_args(cohort_config_t* config, int argc, char** argv, unsigned flags,
                                                    int* out_argc, char** out_argv);

/**
 * @brief Describes a registry key (type, default, bounds, choices, help).
 * @param[in,out] info Caller-owned; set info->struct_size = sizeof(*info) first.
 */
COHORT_API cohort_status_t cohort_option_describe(const char* key, cohort_option_info_t* info);

/** @brief Number of options in the registry. */
COHORT_API size_t cohort_option_count(void);

/** @brief Name of the i-th option (registry order), or NULL when out of range. Static text. */
COHORT_API const char* cohort_option_name(size_t index);

/**
 * @brief `--help` text for every option, grouped by subsystem (static text).
 * @param group A group name ("core", "comm", "data", "train", "launcher", …) or NULL for all.
 * @return Text valid until the process exits; "" for an unknown group.
 */
COHORT_API const char* cohort_option_help(const char* group);

/** @brief The options reference page as Markdown (static text; docs/guides/options.md). */
COHORT_API const char* cohort_option_markdown(void);

/** @brief Deprecated spelling of cohort_option_help(); removed after the next minor version. */
COHORT_API COHORT_DEPRECATED(cohort_option_help) const char* cohort_options_help(const char* group);

/** @brief Deprecated spelling of cohort_option_markdown(); removed after the next minor version. */
COHORT_API COHORT_DEPRECATED(cohort_option_markdown) const char* cohort_options_markdown(void);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_CONFIG_H */
