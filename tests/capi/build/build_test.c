/* What the build can do, through the public C API only (compiled as C99). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <cohort/cohort.h>

static void info_reports_every_library(void** state) {
  (void)state;
  cohort_build_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_int_equal(cohort_build_info(&info), COHORT_OK);
  assert_string_equal(info.cohort_version, cohort_version_string());
  assert_non_null(strstr(info.mpi_library, "MPI"));
  assert_true(info.mpi_version >= 3);
  assert_non_null(info.cuda_runtime);
  assert_non_null(info.cuda_driver);
  assert_non_null(info.cudnn);
  assert_non_null(info.nccl);
  assert_true(strlen(info.dnnl) >= 5); /* "2.6.3" */
  assert_true(strlen(info.dnnl_cpu_runtime) > 0);
  assert_true(strlen(info.jpeg_turbo) >= 5);
  assert_true(info.gpu_count >= 0);
  if (info.gpu_count == 0) assert_true(strlen(info.gpu_note) > 0);
  assert_int_equal(info.cuda_trains, info.cuda_built); /* a build with CUDA trains on GPUs */
  if (info.cuda_built) {
    assert_true(strlen(info.cuda_runtime) > 0);
    assert_true(strlen(info.cudnn) > 0);
    assert_true(strlen(info.nccl) > 0);
  } else {
    assert_string_equal(info.cuda_runtime, "");
  }
}

static void older_smaller_struct_gets_its_prefix(void** state) {
  (void)state;
  cohort_build_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = offsetof(cohort_build_info_t, mpi_version);
  assert_int_equal(cohort_build_info(&info), COHORT_OK);
  assert_string_equal(info.cohort_version, cohort_version_string());
  int untouched;
  memset(&untouched, 0xab, sizeof untouched);
  assert_memory_equal(&info.mpi_version, &untouched, sizeof untouched);
  /* One field smaller than today's. */
  memset(&info, 0xab, sizeof info);
  info.struct_size = offsetof(cohort_build_info_t, gpu_note);
  assert_int_equal(cohort_build_info(&info), COHORT_OK);
  assert_true(info.gpu_count >= 0);
  const char* note;
  memset(&note, 0xab, sizeof note);
  assert_memory_equal(&info.gpu_note, &note, sizeof note);
  /* A GPU struct one field smaller passes the size check: only the index can be wrong. */
  cohort_gpu_info_t gpu;
  memset(&gpu, 0xab, sizeof gpu);
  gpu.struct_size = offsetof(cohort_gpu_info_t, multiprocessors);
  cohort_status_t s = cohort_build_gpu_info(0, &gpu);
  if (s == COHORT_OK) {
    int sms;
    memset(&sms, 0xab, sizeof sms);
    assert_memory_equal(&gpu.multiprocessors, &sms, sizeof sms);
  } else {
    assert_non_null(strstr(cohort_last_error(), "out of range"));
  }
}

static void bad_arguments_are_errors(void** state) {
  (void)state;
  assert_int_equal(cohort_build_info(NULL), COHORT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(cohort_last_error(), "cohort_build_info: info is NULL"));
  cohort_build_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info + 8;
  assert_int_equal(cohort_build_info(&info), COHORT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(cohort_last_error(), "struct_size"));
  info.struct_size = 0;
  assert_int_equal(cohort_build_info(&info), COHORT_ERR_INVALID_ARGUMENT);

  cohort_gpu_info_t gpu;
  memset(&gpu, 0, sizeof gpu);
  gpu.struct_size = sizeof gpu;
  assert_int_equal(cohort_build_gpu_info(-1, &gpu), COHORT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(cohort_last_error(), "out of range"));
  info.struct_size = sizeof info;
  assert_int_equal(cohort_build_info(&info), COHORT_OK);
  assert_int_equal(cohort_build_gpu_info(info.gpu_count, &gpu), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_build_gpu_info(0, NULL), COHORT_ERR_INVALID_ARGUMENT);
  gpu.struct_size = 1;
  assert_int_equal(cohort_build_gpu_info(0, &gpu), COHORT_ERR_INVALID_ARGUMENT);
}

static void each_gpu_is_described(void** state) {
  (void)state;
  cohort_build_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_int_equal(cohort_build_info(&info), COHORT_OK);
  if (info.gpu_count == 0) skip();
  for (int i = 0; i < info.gpu_count; ++i) {
    cohort_gpu_info_t gpu;
    memset(&gpu, 0, sizeof gpu);
    gpu.struct_size = sizeof gpu;
    assert_int_equal(cohort_build_gpu_info(i, &gpu), COHORT_OK);
    assert_true(strlen(gpu.name) > 0);
    assert_true(gpu.total_memory > 0);
    assert_true(gpu.compute_major >= 3);
    assert_true(gpu.multiprocessors > 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(info_reports_every_library),
      cmocka_unit_test(older_smaller_struct_gets_its_prefix),
      cmocka_unit_test(bad_arguments_are_errors),
      cmocka_unit_test(each_gpu_is_described),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
