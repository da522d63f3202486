/* cohort respects an MPI the program initialised itself: it uses it, never
 * finalises it, and refuses a thread level below MPI_THREAD_SERIALIZED.
 * argv[1] is the thread level the program asks for: "single" or "multiple". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <mpi.h>
#include <string.h>

#include <cohort/cohort.h>

static int g_level = MPI_THREAD_MULTIPLE;

static void uses_the_callers_mpi(void** state) {
  (void)state;
  int provided = 0, finalized = 1;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(MPI_Init_thread(NULL, NULL, g_level, &provided), MPI_SUCCESS);
  cohort_status_t s = cohort_runtime_create(NULL, &rt);
  if (provided < MPI_THREAD_SERIALIZED) {
    assert_int_equal(s, COHORT_ERR_MPI);
    assert_non_null(strstr(cohort_last_error(), "cohort needs at least MPI_THREAD_SERIALIZED"));
  } else {
    assert_int_equal(s, COHORT_OK);
    assert_int_equal(cohort_runtime_barrier(rt), COHORT_OK);
    cohort_runtime_destroy(rt);
  }
  /* cohort did not initialise MPI, so it must not finalise it. */
  assert_int_equal(cohort_finalize(), COHORT_OK);
  MPI_Finalized(&finalized);
  assert_int_equal(finalized, 0);
  assert_int_equal(MPI_Finalize(), MPI_SUCCESS);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "single") == 0) g_level = MPI_THREAD_SINGLE;
  const struct CMUnitTest tests[] = {cmocka_unit_test(uses_the_callers_mpi)};
  return cmocka_run_group_tests_name(g_level == MPI_THREAD_SINGLE ? "capi_preinit_single" : "capi_preinit_multiple",
                                     tests, NULL, NULL);
}
