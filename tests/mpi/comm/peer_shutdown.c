/* One rank leaves early under mpirun: after a few steps the last rank destroys its
 * runtime (as a program does after an error of its own) while the others wait in an
 * allreduce of a name they have used every step. Within seconds, not after
 * stall_shutdown_s, that allreduce fails on every other rank with
 * COHORT_ERR_PEER_SHUTDOWN naming the rank that left and where to look, and so do a
 * broadcast and a barrier after it; their own cohort_runtime_destroy then completes.
 * A fresh runtime sums every rank's failures at the end. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

enum { kSteps = 3 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static DLTensor vector(float* data, int64_t* n) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = n};
  return t;
}

/* Whether message `e` names rank `gone` as a rank that shut down, alone ("rank G has
 * shut down …") or in a list ("ranks [0, G] have shut down …"): by the time a later
 * collective fails, another rank that stays may have failed and left too. */
static int names_gone_rank(const char* e, int gone) {
  char who[64], look[64];
  snprintf(who, sizeof who, "rank %d has shut down its collective engine", gone);
  snprintf(look, sizeof look, "rank %d's own error output", gone);
  if (strstr(e, who) && strstr(e, look)) return 1;
  const char* list = strstr(e, "ranks [");
  if (!list || !strstr(e, "have shut down their engines") || !strstr(e, "look for the error output of ranks ["))
    return 0;
  for (const char* p = list + 7; *p && *p != ']';) {
    char* end = NULL;
    const long r = strtol(p, &end, 10);
    if (end == p) return 0;
    if (r == gone) return 1;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  return 0;
}

/* The call failed with COHORT_ERR_PEER_SHUTDOWN, naming `gone` and where to look. */
static void check_peer_shutdown(cohort_status_t s, const char* what, int gone) {
  const char* e = cohort_last_error();
  CHECK(s == COHORT_ERR_PEER_SHUTDOWN, "%s returned %d (%s)", what, (int)s, cohort_status_string(s));
  CHECK(names_gone_rank(e, gone), "%s: the message names rank %d and where to look: %s", what, gone, e);
}

/* The ranks that stay: every collective fails fast once the last rank has left. */
static void stay(cohort_runtime_t* rt, int gone) {
  float x[4] = {1, 2, 3, 4};
  int64_t n = 4;
  DLTensor t = vector(x, &n);
  double start = now_s();
  cohort_status_t s = cohort_allreduce(rt, "grad", &t, NULL, NULL);
  check_peer_shutdown(s, "the allreduce waiting for the rank that left", gone);
  CHECK(strstr(cohort_last_error(), "collective 'grad' (allreduce sum f32[4])") != NULL, "%s", cohort_last_error());
  CHECK(now_s() - start < 10, "the allreduce failed after %.1f s, not within seconds", now_s() - start);

  start = now_s();
  check_peer_shutdown(cohort_broadcast(rt, "weights", &t, NULL, gone), "a broadcast from it", gone);
  check_peer_shutdown(cohort_barrier(rt), "a barrier after it", gone);
  CHECK(now_s() - start < 10, "later collectives took %.1f s", now_s() - start);
}

int main(void) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  /* Without the peer's shutdown being noticed, only this would end the wait. */
  MUST(cohort_config_set(cfg, "stall_shutdown_s", "60"));
  MUST(cohort_config_set(cfg, "log_level", "error"));
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(cfg, &rt));
  int rank = 0, size = 1;
  MUST(cohort_runtime_rank(rt, &rank));
  MUST(cohort_runtime_size(rt, &size));
  rank_check_rank = rank;
  const int gone = size - 1;
  for (int step = 0; step < kSteps; ++step) { /* the name is in every rank's response cache */
    float x[4] = {1, 2, 3, 4};
    int64_t n = 4;
    DLTensor t = vector(x, &n);
    OK(cohort_allreduce(rt, "grad", &t, NULL, NULL));
    CHECK(x[3] == 4.0f * (float)size, "step %d: sum %g", step, (double)x[3]);
  }
  double start = now_s();
  if (rank == gone) {
    /* Leave while the others are waiting in their next allreduce. */
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  } else {
    stay(rt, gone);
  }
  cohort_runtime_destroy(rt);
  CHECK(now_s() - start < 20, "cohort_runtime_destroy returned after %.1f s", now_s() - start);
  cohort_config_destroy(cfg);
  const int failures = rank_check_job_failures(); /* a new runtime works after the shutdown */
  if (rank == 0) printf("peer_shutdown: %d ranks, %d failure(s) on all ranks\n", size, failures);
  return failures > 0 ? 1 : 0;
}
