#define _POSIX_C_SOURCE 200809L /* setenv */
/* The configuration part of the C API, every error path included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

static void assert_error(cohort_status_t s, cohort_status_t expected, const char* fn, const char* fragment) {
  assert_int_equal(s, expected);
  const char* msg = cohort_last_error();
  if (strncmp(msg, fn, strlen(fn)) != 0 || !strstr(msg, fragment)) fail_msg("unexpected error text: %s", msg);
}

static int setup(void** state) {
  cohort_config_t* cfg = NULL;
  unsetenv("COHORT_BATCH_SIZE");
  if (cohort_config_create(&cfg) != COHORT_OK) return -1;
  *state = cfg;
  return 0;
}

static int teardown(void** state) {
  cohort_config_destroy(*state);
  return 0;
}

static void version_and_status_text(void** state) {
  (void)state;
  assert_int_equal(cohort_version(), COHORT_VERSION);
  assert_string_equal(cohort_version_string(), COHORT_VERSION_STRING);
  assert_string_equal(cohort_status_string(COHORT_OK), "ok");
  assert_string_equal(cohort_status_string(COHORT_ERR_INVALID_ARGUMENT), "invalid argument");
  assert_string_equal(cohort_status_string(COHORT_ERR_PEER_LOST), "peer lost");
  assert_string_equal(cohort_status_string(COHORT_ERR_PEER_SHUTDOWN), "peer shut down");
  assert_string_equal(cohort_status_string((cohort_status_t)12345), "unknown status");
}

static void create_and_destroy_null(void** state) {
  (void)state;
  assert_error(cohort_config_create(NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_create", "out is NULL");
  cohort_config_destroy(NULL);
  cohort_config_t* copy = NULL;
  assert_error(cohort_config_clone(NULL, &copy), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_clone", "config is NULL");
}

static void set_and_get_typed(void** state) {
  cohort_config_t* cfg = *state;
  int64_t i = 0;
  double d = 0;
  int b = 0;
  char buf[32];
  size_t needed = 0;
  assert_int_equal(cohort_config_set_int(cfg, "batch_size", 256), COHORT_OK);
  assert_int_equal(cohort_config_get_int(cfg, "batch-size", &i), COHORT_OK);
  assert_int_equal(i, 256);
  assert_int_equal(cohort_config_set_float(cfg, "lr", 0.25), COHORT_OK);
  assert_int_equal(cohort_config_get_float(cfg, "lr", &d), COHORT_OK);
  assert_true(d == 0.25);
  assert_int_equal(cohort_config_set_bool(cfg, "json", 7), COHORT_OK);
  assert_int_equal(cohort_config_get_bool(cfg, "json", &b), COHORT_OK);
  assert_int_equal(b, 1);
  assert_int_equal(cohort_config_set(cfg, "precision", "fp16"), COHORT_OK);
  assert_int_equal(cohort_config_get(cfg, "precision", buf, sizeof buf, &needed), COHORT_OK);
  assert_string_equal(buf, "f16");
  assert_int_equal(needed, 4);
  cohort_option_source_t src;
  assert_int_equal(cohort_config_source(cfg, "precision", &src), COHORT_OK);
  assert_int_equal(src, COHORT_SOURCE_EXPLICIT);
  assert_int_equal(cohort_config_unset(cfg, "precision"), COHORT_OK);
  assert_int_equal(cohort_config_source(cfg, "precision", &src), COHORT_OK);
  assert_int_equal(src, COHORT_SOURCE_DEFAULT);
  cohort_config_t* copy = NULL;
  assert_int_equal(cohort_config_clone(cfg, &copy), COHORT_OK);
  assert_int_equal(cohort_config_get_int(copy, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 256);
  cohort_config_destroy(copy);
}

static void environment_applies_below_explicit(void** state) {
  cohort_config_t* cfg = *state;
  int64_t i = 0;
  cohort_option_source_t src;
  setenv("COHORT_BATCH_SIZE", "48", 1);
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 48);
  assert_int_equal(cohort_config_source(cfg, "batch_size", &src), COHORT_OK);
  assert_int_equal(src, COHORT_SOURCE_ENVIRONMENT);
  assert_int_equal(cohort_config_set(cfg, "batch_size", "12"), COHORT_OK);
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 12);
  assert_int_equal(cohort_config_unset(cfg, "batch_size"), COHORT_OK);
  setenv("COHORT_BATCH_SIZE", "many", 1);
  assert_error(cohort_config_get_int(cfg, "batch_size", &i), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_int",
               "environment variable COHORT_BATCH_SIZE: invalid value 'many'");
  unsetenv("COHORT_BATCH_SIZE");
}

static void set_errors(void** state) {
  cohort_config_t* cfg = *state;
  int64_t i = 0;
  assert_error(cohort_config_set(NULL, "lr", "1"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set", "config is NULL");
  assert_error(cohort_config_set(cfg, NULL, "1"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set", "key is NULL");
  assert_error(cohort_config_set(cfg, "lr", NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set", "value is NULL");
  assert_error(cohort_config_set(cfg, "batchsize", "1"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set",
               "unknown option 'batchsize'; did you mean 'batch_size'?");
  assert_error(cohort_config_set(cfg, "batch_size", "0"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set",
               "invalid value '0' for 'batch_size': expected an integer in [1, ");
  assert_error(cohort_config_set(cfg, "precision", "f8"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set",
               "expected one of f32|f16|bf16 (also fp32");
  assert_error(cohort_config_set_int(cfg, "precision", 3), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set_int",
               "'precision' is not a number");
  assert_error(cohort_config_set_float(cfg, "json", 1.0), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set_float",
               "'json' is not a number");
  assert_error(cohort_config_set_bool(cfg, "lr", 1), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set_bool",
               "'lr' is not a bool");
  assert_error(cohort_config_set_float(cfg, "lr", -1.0), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set_float",
               "invalid value '-1'");
  assert_error(cohort_config_set_int(cfg, "nope", 1), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_set_int",
               "unknown option 'nope'");
  assert_error(cohort_config_unset(cfg, "nope"), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_unset",
               "unknown option 'nope'");
  /* A failed set leaves the previous value. */
  assert_int_equal(cohort_config_set(cfg, "batch_size", "5"), COHORT_OK);
  assert_int_not_equal(cohort_config_set(cfg, "batch_size", "-5"), COHORT_OK);
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 5);
}

static void get_errors(void** state) {
  cohort_config_t* cfg = *state;
  char small[2];
  size_t needed = 0;
  int64_t i;
  double d;
  int b;
  cohort_option_source_t src;
  assert_error(cohort_config_get(cfg, "precision", small, sizeof small, &needed), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_get", "too small: 4 bytes are needed");
  assert_int_equal(needed, 4);
  assert_error(cohort_config_get(cfg, "precision", NULL, 8, &needed), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get",
               "buffer is NULL but size is 8");
  assert_error(cohort_config_get(cfg, "nope", small, sizeof small, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_get", "unknown option 'nope'");
  assert_error(cohort_config_get_int(cfg, "precision", &i), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_int",
               "'precision' is not an integer");
  assert_error(cohort_config_get_int(cfg, "batch_size", NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_int",
               "value is NULL");
  assert_error(cohort_config_get_float(cfg, "json", &d), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_float",
               "'json' is not a number");
  assert_error(cohort_config_get_bool(cfg, "lr", &b), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_bool",
               "'lr' is not a bool");
  assert_error(cohort_config_get_bool(NULL, "json", &b), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_get_bool",
               "config is NULL");
  assert_error(cohort_config_source(cfg, "json", NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_source",
               "source is NULL");
  assert_error(cohort_config_source(cfg, "jsn", &src), COHORT_ERR_INVALID_ARGUMENT, "cohort_config_source",
               "did you mean 'json'");
}

static void parse_args_hands_back_the_rest(void** state) {
  cohort_config_t* cfg = *state;
  char* argv[] = {"prog", "--batch-size=32", "data.txt", "--lr", "0.5", "--json", "--custom", "x", NULL};
  char* rest[9];
  int rest_argc = 0;
  int64_t i;
  int b;
  assert_int_equal(cohort_config_parse_args(cfg, 8, argv, 0, &rest_argc, rest), COHORT_OK);
  assert_int_equal(rest_argc, 4);
  assert_string_equal(rest[0], "prog");
  assert_string_equal(rest[1], "data.txt");
  assert_string_equal(rest[2], "--custom");
  assert_string_equal(rest[3], "x");
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 32);
  assert_int_equal(cohort_config_get_bool(cfg, "json", &b), COHORT_OK);
  assert_int_equal(b, 1);
  /* Outputs may be NULL. */
  assert_int_equal(cohort_config_parse_args(cfg, 2, argv, 0, NULL, NULL), COHORT_OK);
}

static void parse_args_errors_leave_config_unchanged(void** state) {
  cohort_config_t* cfg = *state;
  int64_t i;
  char* bad_value[] = {"prog", "--batch_size=7", "--lr=fast"};
  char* missing[] = {"prog", "--batch_size"};
  char* unknown[] = {"prog", "--batch_size=9", "--reader-thread=2"};
  char* null_entry[] = {"prog", NULL};
  assert_error(cohort_config_parse_args(cfg, 3, bad_value, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "flag --lr: invalid value 'fast'");
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 64);
  assert_error(cohort_config_parse_args(cfg, 2, missing, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "flag --batch_size: missing value");
  assert_error(cohort_config_parse_args(cfg, 3, unknown, COHORT_PARSE_STRICT, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "unknown flag '--reader-thread'; did you mean '--reader_threads'?");
  assert_int_equal(cohort_config_get_int(cfg, "batch_size", &i), COHORT_OK);
  assert_int_equal(i, 64);
  assert_error(cohort_config_parse_args(cfg, 2, null_entry, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "an argv entry is NULL");
  assert_error(cohort_config_parse_args(cfg, 1, NULL, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "argv is NULL");
  assert_error(cohort_config_parse_args(cfg, -1, bad_value, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "argc is -1");
  assert_error(cohort_config_parse_args(cfg, 1, bad_value, 0x10, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "unknown flags 0x10");
  assert_error(cohort_config_parse_args(NULL, 1, bad_value, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_parse_args", "config is NULL");
}

static void describe_options(void** state) {
  (void)state;
  cohort_option_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_int_equal(cohort_option_describe("batch-size", &info), COHORT_OK);
  assert_string_equal(info.name, "batch_size");
  assert_int_equal(info.type, COHORT_OPTION_INT);
  assert_string_equal(info.default_value, "64");
  assert_true(info.min == 1);
  assert_string_equal(info.group, "data");
  assert_int_equal(cohort_option_describe("precision", &info), COHORT_OK);
  assert_string_equal(info.choices, "f32|f16|bf16");
  /* An older, smaller struct is filled up to its size. */
  size_t small = offsetof(cohort_option_info_t, type);
  cohort_option_info_t old;
  memset(&old, 0xAB, sizeof old);
  old.struct_size = small;
  assert_int_equal(cohort_option_describe("lr", &old), COHORT_OK);
  assert_string_equal(old.name, "lr");
  assert_int_equal(((unsigned char*)&old)[small], 0xAB);
  /* One field smaller than today's: the last field is not written. */
  memset(&old, 0xAB, sizeof old);
  old.struct_size = offsetof(cohort_option_info_t, help);
  assert_int_equal(cohort_option_describe("lr", &old), COHORT_OK);
  assert_string_equal(old.group, "train");
  assert_int_equal(((unsigned char*)&old)[offsetof(cohort_option_info_t, help)], 0xAB);
  /* A size inside a field is refused. */
  old.struct_size = offsetof(cohort_option_info_t, help) + 2;
  assert_error(cohort_option_describe("lr", &old), COHORT_ERR_INVALID_ARGUMENT, "cohort_option_describe",
               "not the size of any version of cohort_option_info_t");
  info.struct_size = 0;
  assert_error(cohort_option_describe("lr", &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_option_describe",
               "struct_size is 0");
  info.struct_size = sizeof info + 8;
  assert_error(cohort_option_describe("lr", &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_option_describe",
               "set it to sizeof(cohort_option_info_t)");
  info.struct_size = sizeof info;
  assert_error(cohort_option_describe("lrr", &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_option_describe",
               "did you mean 'lr'");
  assert_error(cohort_option_describe("lr", NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_option_describe",
               "info is NULL");
}

static void registry_listing_and_help(void** state) {
  (void)state;
  size_t n = cohort_option_count();
  assert_true(n > 20);
  for (size_t i = 0; i < n; ++i) {
    cohort_option_info_t info = {.struct_size = sizeof(cohort_option_info_t)};
    assert_non_null(cohort_option_name(i));
    assert_int_equal(cohort_option_describe(cohort_option_name(i), &info), COHORT_OK);
  }
  assert_null(cohort_option_name(n));
  assert_non_null(strstr(cohort_option_help(NULL), "--batch_size=INT"));
  assert_non_null(strstr(cohort_option_help("comm"), "--cycle_time_ms"));
  assert_null(strstr(cohort_option_help("comm"), "--batch_size"));
  assert_string_equal(cohort_option_help("nope"), "");
  assert_non_null(strstr(cohort_option_markdown(), "| `batch_size` | int | `64` |"));
}

/* The plural spellings stay for one minor version as deprecated aliases. */
#if defined(__GNUC__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
static void deprecated_option_spellings(void** state) {
  (void)state;
  assert_string_equal(cohort_options_help("comm"), cohort_option_help("comm"));
  assert_string_equal(cohort_options_markdown(), cohort_option_markdown());
}
#if defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif

static void* fail_on_other_thread(void* arg) {
  cohort_config_t* cfg = arg;
  cohort_config_set(cfg, "other_thread_key", "1");
  return strstr(cohort_last_error(), "other_thread_key") ? arg : NULL;
}

static void last_error_is_per_thread(void** state) {
  cohort_config_t* cfg = *state;
  pthread_t t;
  void* result = NULL;
  assert_int_not_equal(cohort_config_set(cfg, "main_thread_key", "1"), COHORT_OK);
  assert_int_equal(pthread_create(&t, NULL, fail_on_other_thread, cfg), 0);
  assert_int_equal(pthread_join(t, &result), 0);
  assert_ptr_equal(result, cfg);
  assert_non_null(strstr(cohort_last_error(), "main_thread_key"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(version_and_status_text),
      cmocka_unit_test(create_and_destroy_null),
      cmocka_unit_test_setup_teardown(set_and_get_typed, setup, teardown),
      cmocka_unit_test_setup_teardown(environment_applies_below_explicit, setup, teardown),
      cmocka_unit_test_setup_teardown(set_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(get_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(parse_args_hands_back_the_rest, setup, teardown),
      cmocka_unit_test_setup_teardown(parse_args_errors_leave_config_unchanged, setup, teardown),
      cmocka_unit_test(describe_options),
      cmocka_unit_test(registry_listing_and_help),
      cmocka_unit_test(deprecated_option_spellings),
      cmocka_unit_test_setup_teardown(last_error_is_per_thread, setup, teardown),
  };
  return cmocka_run_group_tests_name("capi_config", tests, NULL, NULL);
}
