#define _POSIX_C_SOURCE 200809L /* setenv */
/* The runtime part of the C API on a single rank (no mpirun), every error path
 * included. Runs as one process: the finalize tests come last. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

static void assert_error(cohort_status_t s, cohort_status_t expected, const char* fn, const char* fragment) {
  assert_int_equal(s, expected);
  const char* msg = cohort_last_error();
  if (strncmp(msg, fn, strlen(fn)) != 0 || !strstr(msg, fragment)) fail_msg("unexpected error text: %s", msg);
}

/* The device text and the info struct say the same: "cpu" with device_id -1, or
 * "cuda:N" with device_id N, one of the GPUs the process sees. */
static void assert_device_consistent(const cohort_runtime_info_t* info, const char* device) {
  if (info->device_type == COHORT_DEVICE_CPU) {
    assert_string_equal(device, "cpu");
    assert_int_equal(info->device_id, -1);
    return;
  }
  assert_int_equal(info->device_type, COHORT_DEVICE_CUDA);
  assert_true(info->device_id >= 0 && info->device_id < info->cuda_device_count);
  char expect[32];
  snprintf(expect, sizeof expect, "cuda:%d", info->device_id);
  assert_string_equal(device, expect);
}

static void single_rank_without_mpirun(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int rank = -1, size = -1;
  char device[16];
  size_t needed = 0;
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  assert_int_equal(info.rank, 0);
  assert_int_equal(info.size, 1);
  assert_int_equal(info.local_rank, 0);
  assert_int_equal(info.local_size, 1);
  assert_int_equal(info.cross_rank, 0);
  assert_int_equal(info.cross_size, 1);
  assert_true(info.thread_budget >= 1);
  assert_true(info.mpi_thread_level >= 2); /* at least MPI_THREAD_SERIALIZED */
  assert_int_equal(cohort_runtime_rank(rt, &rank), COHORT_OK);
  assert_int_equal(cohort_runtime_size(rt, &size), COHORT_OK);
  assert_int_equal(rank, 0);
  assert_int_equal(size, 1);
  assert_int_equal(cohort_runtime_device(rt, device, sizeof device, &needed), COHORT_OK);
  assert_device_consistent(&info, device);
  /* Models compute on the GPU where one is visible (device=auto), else on the CPU. */
  if (info.cuda_device_count == 0) {
    assert_string_equal(device, "cpu");
    assert_int_equal(info.device_type, COHORT_DEVICE_CPU);
    assert_int_equal(info.device_id, -1);
  } else {
    assert_string_equal(device, "cuda:0");
    assert_int_equal(info.device_type, COHORT_DEVICE_CUDA);
    assert_int_equal(info.device_id, 0);
  }
  /* A visible GPU serves collectives of CUDA tensors: rank 0 takes the first. */
  assert_int_equal(info.collective_device_id, info.cuda_device_count == 0 ? -1 : 0);
  assert_int_equal(cohort_runtime_barrier(rt), COHORT_OK);
  cohort_runtime_destroy(rt);
  cohort_runtime_destroy(NULL);
}

static void config_is_copied_and_readable(void** state) {
  (void)state;
  cohort_config_t* cfg = NULL;
  cohort_config_t* effective = NULL;
  cohort_runtime_t* rt = NULL;
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int64_t threads = 0;
  assert_int_equal(cohort_config_create(&cfg), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "threads_per_rank", "3"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "device", "cpu"), COHORT_OK);
  assert_int_equal(cohort_runtime_create(cfg, &rt), COHORT_OK);
  cohort_config_destroy(cfg); /* the runtime keeps its own copy */
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  assert_int_equal(info.thread_budget, 3);
  assert_int_equal(info.device_type, COHORT_DEVICE_CPU);
  assert_int_equal(cohort_runtime_config(rt, &effective), COHORT_OK);
  assert_int_equal(cohort_config_get_int(effective, "threads_per_rank", &threads), COHORT_OK);
  assert_int_equal(threads, 3);
  cohort_config_destroy(effective);
  cohort_runtime_destroy(rt);
}

static void runtimes_in_sequence_and_side_by_side(void** state) {
  (void)state;
  cohort_runtime_t* a = NULL;
  cohort_runtime_t* b = NULL;
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(cohort_runtime_create(NULL, &a), COHORT_OK);
    cohort_runtime_destroy(a);
  }
  assert_int_equal(cohort_runtime_create(NULL, &a), COHORT_OK);
  assert_int_equal(cohort_runtime_create(NULL, &b), COHORT_OK);
  assert_int_equal(cohort_runtime_barrier(a), COHORT_OK);
  assert_int_equal(cohort_runtime_barrier(b), COHORT_OK);
  cohort_runtime_destroy(a);
  cohort_runtime_destroy(b);
}

static void info_and_query_errors(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int v;
  char tiny[2];
  size_t needed = 0;
  cohort_config_t* out = NULL;
  assert_error(cohort_runtime_create(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_create", "out is NULL");
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  assert_error(cohort_runtime_info(NULL, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_info", "runtime is NULL");
  assert_error(cohort_runtime_info(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_info", "info is NULL");
  info.struct_size = 3;
  assert_error(cohort_runtime_info(rt, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_info",
               "set it to sizeof(cohort_runtime_info_t)");
  /* An older header's smaller struct is filled up to its size. */
  info.struct_size = offsetof(cohort_runtime_info_t, local_rank);
  info.local_rank = -77;
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  assert_int_equal(info.size, 1);
  assert_int_equal(info.local_rank, -77);
  /* One field smaller than today's: the last field is not written. */
  info.struct_size = offsetof(cohort_runtime_info_t, mpi_thread_level);
  info.mpi_thread_level = -5;
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  assert_int_equal(info.mpi_thread_level, -5);
  info.struct_size = sizeof(size_t);
  assert_error(cohort_runtime_info(rt, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_info",
               "not the size of any version of cohort_runtime_info_t");
  info.struct_size = sizeof info;
  assert_error(cohort_runtime_rank(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_rank", "rank is NULL");
  assert_error(cohort_runtime_rank(NULL, &v), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_rank", "runtime is NULL");
  assert_error(cohort_runtime_size(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_size", "size is NULL");
  assert_error(cohort_runtime_size(NULL, &v), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_size", "runtime is NULL");
  assert_error(cohort_runtime_device(rt, tiny, sizeof tiny, &needed), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_runtime_device", "too small");
  assert_true(needed >= 4);
  assert_error(cohort_runtime_device(NULL, tiny, sizeof tiny, &needed), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_runtime_device", "runtime is NULL");
  assert_error(cohort_runtime_config(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_config", "out is NULL");
  assert_error(cohort_runtime_config(NULL, &out), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_config",
               "runtime is NULL");
  assert_error(cohort_runtime_barrier(NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_barrier", "runtime is NULL");
  cohort_runtime_destroy(rt);
}

/* CPU times: the calling thread's grows with its own work, the process's holds it and the
 * engine thread's, and the engine, asleep while nothing is submitted, uses next to none. */
static void cpu_times_follow_the_threads(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  cohort_cpu_times_t before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
  assert_int_equal(cohort_runtime_cpu_times(rt, &before), COHORT_OK);
  volatile double sink = 0;
  while (1) {
    for (int i = 0; i < 100000; ++i) sink += i * 0.5;
    assert_int_equal(cohort_runtime_cpu_times(rt, &after), COHORT_OK);
    if (after.calling_thread_s - before.calling_thread_s >= 0.05) break;
  }
  assert_true(sink > 0); /* the work happened (and the sum is read) */
  assert_true(after.process_s >= after.calling_thread_s + after.engine_s - 1e-3);
  assert_true(after.engine_s >= before.engine_s && after.engine_s < 0.5);
  assert_error(cohort_runtime_cpu_times(NULL, &after), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_cpu_times",
               "runtime is NULL");
  assert_error(cohort_runtime_cpu_times(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_cpu_times",
               "times is NULL");
  after.struct_size = 3;
  assert_error(cohort_runtime_cpu_times(rt, &after), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_cpu_times",
               "set it to sizeof(cohort_cpu_times_t)");
  cohort_runtime_destroy(rt);
}

/* Engine counters: two allreduces are two operations completed, each after a negotiation
 * cycle; an engine barrier takes a cycle but is not an operation; counts only grow; bad
 * arguments are refused. */
static void engine_stats_count_the_collectives(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  cohort_engine_stats_t before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
  assert_int_equal(cohort_runtime_engine_stats(rt, &before), COHORT_OK);
  float values[3] = {1, 2, 3};
  int64_t shape[1] = {3};
  DLTensor t = {.data = values, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
  assert_int_equal(cohort_allreduce(rt, "stats/a", &t, NULL, NULL), COHORT_OK);
  assert_int_equal(cohort_allreduce(rt, "stats/b", &t, NULL, NULL), COHORT_OK);
  assert_int_equal(cohort_runtime_engine_stats(rt, &after), COHORT_OK);
  assert_int_equal(after.completed - before.completed, 2);
  assert_true(after.cycles >= before.cycles + 2);
  before = after;
  assert_int_equal(cohort_barrier(rt), COHORT_OK);
  assert_int_equal(cohort_runtime_engine_stats(rt, &after), COHORT_OK);
  assert_int_equal(after.completed, before.completed);
  assert_true(after.cycles >= before.cycles + 1);
  assert_true(after.full_exchanges >= before.full_exchanges && after.full_exchanges <= after.cycles);
  assert_true(after.cache_hits >= before.cache_hits && after.fused_batches >= before.fused_batches);
  assert_true(after.held >= before.held);
  assert_error(cohort_runtime_engine_stats(NULL, &after), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_engine_stats",
               "runtime is NULL");
  assert_error(cohort_runtime_engine_stats(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_engine_stats",
               "stats is NULL");
  after.struct_size = 3;
  assert_error(cohort_runtime_engine_stats(rt, &after), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_engine_stats",
               "set it to sizeof(cohort_engine_stats_t)");
  cohort_runtime_destroy(rt);
}

/* Device memory: the compute device's cache, nothing counted on the CPU; emptying the
 * cache keeps the peaks; bad arguments are refused. */
static void memory_stats_follow_the_compute_device(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  cohort_runtime_info_t info = {.struct_size = sizeof info};
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  cohort_model_t* model = NULL; /* its parameters come from the compute device's memory */
  assert_int_equal(cohort_model_create(rt, "mnist_cnn", NULL, &model), COHORT_OK);
  cohort_memory_stats_t m = {.struct_size = sizeof m, .device_id = 99};
  assert_int_equal(cohort_runtime_memory_stats(rt, &m), COHORT_OK);
  cohort_model_destroy(model);
  assert_int_equal(m.device_id, info.device_id);
  if (info.device_type == COHORT_DEVICE_CPU) {
    const uint64_t figures[] = {m.in_use_bytes, m.reserved_bytes, m.peak_in_use_bytes,  m.peak_reserved_bytes,
                                m.requests,     m.cache_hits,     m.device_allocations, m.device_frees};
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; ++i) assert_int_equal(figures[i], 0);
  } else {
    assert_true(m.in_use_bytes > 0 && m.requests > 0 && m.device_allocations > 0);
    assert_true(m.peak_in_use_bytes >= m.in_use_bytes && m.reserved_bytes >= m.in_use_bytes);
    assert_true(m.requests >= m.cache_hits);
  }
  assert_int_equal(cohort_runtime_empty_cache(rt), COHORT_OK);
  cohort_memory_stats_t after = {.struct_size = sizeof after};
  assert_int_equal(cohort_runtime_memory_stats(rt, &after), COHORT_OK);
  assert_true(after.reserved_bytes <= m.reserved_bytes);
  assert_true(after.peak_reserved_bytes == m.peak_reserved_bytes);
  /* An older caller's struct, up to device_id: filled that far. */
  cohort_memory_stats_t old = {.struct_size = offsetof(cohort_memory_stats_t, in_use_bytes), .in_use_bytes = 7};
  assert_int_equal(cohort_runtime_memory_stats(rt, &old), COHORT_OK);
  assert_int_equal(old.device_id, info.device_id);
  assert_int_equal(old.in_use_bytes, 7);
  assert_error(cohort_runtime_memory_stats(NULL, &m), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_memory_stats",
               "runtime is NULL");
  assert_error(cohort_runtime_memory_stats(rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_memory_stats",
               "stats is NULL");
  m.struct_size = 3;
  assert_error(cohort_runtime_memory_stats(rt, &m), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_memory_stats",
               "set it to sizeof(cohort_memory_stats_t)");
  assert_error(cohort_runtime_empty_cache(NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_empty_cache",
               "runtime is NULL");
  cohort_runtime_destroy(rt);
}

static void bad_settings_fail_creation(void** state) {
  (void)state;
  cohort_runtime_t* rt = (cohort_runtime_t*)0x1;
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  setenv("COHORT_DEVICE", "tpu", 1);
  assert_error(cohort_runtime_create(NULL, &rt), COHORT_ERR_INVALID_ARGUMENT, "cohort_runtime_create",
               "environment variable COHORT_DEVICE: invalid value 'tpu'");
  assert_null(rt);
  unsetenv("COHORT_DEVICE");
  /* Asking for a GPU where none is usable says what would work. */
  cohort_config_t* cfg = NULL;
  assert_int_equal(cohort_config_create(&cfg), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "device", "cuda"), COHORT_OK);
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  assert_int_equal(cohort_runtime_info(rt, &info), COHORT_OK);
  cohort_runtime_destroy(rt);
  if (info.cuda_device_count == 0) {
    assert_error(cohort_runtime_create(cfg, &rt), COHORT_ERR_UNSUPPORTED, "cohort_runtime_create",
                 "use --device=cpu or --device=auto");
  } else { /* a GPU computes */
    assert_int_equal(cohort_runtime_create(cfg, &rt), COHORT_OK);
    cohort_runtime_destroy(rt);
  }
  cohort_config_destroy(cfg);
}

static void finalize_is_once_and_final(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(cohort_finalize(), COHORT_OK);
  assert_int_equal(cohort_finalize(), COHORT_OK);
  assert_error(cohort_runtime_create(NULL, &rt), COHORT_ERR_INVALID_STATE, "cohort_runtime_create",
               "MPI was already finalized");
}

int main(void) {
  unsetenv("COHORT_DEVICE");
  unsetenv("COHORT_THREADS_PER_RANK");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(single_rank_without_mpirun),
      cmocka_unit_test(config_is_copied_and_readable),
      cmocka_unit_test(runtimes_in_sequence_and_side_by_side),
      cmocka_unit_test(info_and_query_errors),
      cmocka_unit_test(cpu_times_follow_the_threads),
      cmocka_unit_test(engine_stats_count_the_collectives),
      cmocka_unit_test(memory_stats_follow_the_compute_device),
      cmocka_unit_test(bad_settings_fail_creation),
      cmocka_unit_test(finalize_is_once_and_final),
  };
  return cmocka_run_group_tests_name("capi_runtime", tests, NULL, NULL);
}
