/* The one check of the multi-rank test programs (C99 and C++): a failed CHECK prints
 * the rank, the place, the condition, a message and cohort's last error, counts the
 * failure and lets the program go on, so every rank reaches its collective calls and
 * the job still ends. CHECK and OK are expressions (`if (!OK(call)) return;`); MUST ends
 * the rank instead. At the end, main returns rank_check_exit() or sums the failures
 * (rank_check_job_failures()). */
#ifndef COHORT_TESTS_RANK_CHECK_H
#define COHORT_TESTS_RANK_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

static int rank_check_rank = -1;    /* set by the program once it knows its rank */
static int rank_check_failures = 0; /* failures on this rank */

static inline int rank_check_at(int ok, const char* file, int line, const char* cond, const char* format, ...) {
  if (ok) return 1;
  ++rank_check_failures;
  fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank_check_rank, file, line, cond);
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  const char* last = cohort_last_error();
  if (last[0] != '\0') fprintf(stderr, " (last error: %s)", last);
  fprintf(stderr, "\n");
  return 0;
}

/* CHECK(condition, printf-format, arguments...) */
#define CHECK(cond, ...) rank_check_at((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)
/* OK(a cohort call): CHECK that it returned COHORT_OK. */
#define OK(call) CHECK((call) == COHORT_OK, "%s", "the call failed")
/* MUST(a cohort call): OK, or this rank exits at once (mpirun then ends the job), for
 * calls whose failure leaves nothing sensible to check. */
#define MUST(call) ((void)(OK(call) || (exit(1), 0)))

/* This rank's exit status: 1 after any failed check. */
static inline int rank_check_exit(void) { return rank_check_failures > 0 ? 1 : 0; }

/* The failures of every rank, summed through a runtime of its own (so it works after the
 * program's runtimes are gone). Collective: every rank calls it once, at the end. */
static inline int rank_check_job_failures(void) {
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(NULL, &rt));
  double failures = rank_check_failures;
  int64_t one = 1;
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = &failures;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 64;
  t.dtype.lanes = 1;
  t.shape = &one;
  MUST(cohort_allreduce(rt, "rank_check/failures", &t, NULL, NULL));
  cohort_runtime_destroy(rt);
  return (int)failures;
}

#endif /* COHORT_TESTS_RANK_CHECK_H */
