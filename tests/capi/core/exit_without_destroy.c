/* A program that leaves on an error path without destroying its runtime (the mistake
 * a `return 1` in a CHECK macro makes). Modes:
 *   leak        every rank returns 3 with its runtime alive;
 *   leak-one    the last rank does; the others' next collective fails with
 *               COHORT_ERR_PEER_SHUTDOWN, and they destroy their runtime and return 0;
 *   finalize    cohort_finalize() refuses while a runtime is alive, then succeeds.
 * exit_without_destroy.sh runs it and judges the exit status and the output. */
#include <stdio.h>
#include <string.h>

#include <cohort/cohort.h>

static int failed(const char* what) {
  fprintf(stderr, "%s: %s\n", what, cohort_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  cohort_config_t* cfg = NULL;
  cohort_runtime_t* rt = NULL;
  if (cohort_config_create(&cfg) != COHORT_OK || cohort_config_set(cfg, "device", "cpu") != COHORT_OK ||
      cohort_config_set_int(cfg, "threads_per_rank", 1) != COHORT_OK)
    return failed("config");
  if (cohort_runtime_create(cfg, &rt) != COHORT_OK) return failed("cohort_runtime_create");
  cohort_config_destroy(cfg);
  int rank = 0, size = 1;
  cohort_runtime_rank(rt, &rank);
  cohort_runtime_size(rt, &size);

  if (strcmp(mode, "leak") == 0) return 3;
  if (strcmp(mode, "leak-one") == 0) {
    if (rank == size - 1) return 3;
    float v[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor t = {.data = v, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    const cohort_status_t s = cohort_allreduce(rt, "after_the_error", &t, NULL, NULL);
    cohort_runtime_destroy(rt);
    if (s != COHORT_ERR_PEER_SHUTDOWN) return failed("expected COHORT_ERR_PEER_SHUTDOWN from cohort_allreduce");
    printf("rank %d: the collective failed with COHORT_ERR_PEER_SHUTDOWN\n", rank);
    return 0;
  }
  if (strcmp(mode, "finalize") == 0) {
    if (cohort_finalize() != COHORT_ERR_INVALID_STATE) return failed("cohort_finalize with a live runtime");
    if (!strstr(cohort_last_error(), "cohort_runtime_destroy")) return failed("the refusal does not say what to do");
    printf("refused: %s\n", cohort_last_error());
    cohort_runtime_destroy(rt);
    if (cohort_finalize() != COHORT_OK) return failed("cohort_finalize after the destroy");
    return 0;
  }
  fprintf(stderr, "usage: %s leak|leak-one|finalize\n", argv[0]);
  cohort_runtime_destroy(rt);
  return 2;
}
