/* The smallest cohort program: create a runtime from the command line and print
 * what each rank sees. Run it as `cohortrun -np 2 cohort-hello` or plain `mpirun`. */
#include <stdio.h>
#include <stdlib.h>

#include <cohort/cohort.h>

static int check(cohort_status_t s, const char* what) {
  if (s != COHORT_OK) {
    fprintf(stderr, "cohort-hello: %s failed: %s (%s)\n", what, cohort_last_error(), cohort_status_string(s));
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  cohort_config_t* cfg = NULL;
  cohort_runtime_t* rt = NULL;
  char device[32];
  int rest_argc = 0;
  char** rest = malloc(sizeof(char*) * (size_t)(argc + 1));
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int rc = 1;

  if (!rest || check(cohort_config_create(&cfg), "cohort_config_create")) goto done;
  if (check(cohort_config_parse_args(cfg, argc, argv, COHORT_PARSE_STRICT, &rest_argc, rest),
            "reading the command line"))
    goto done;
  if (rest_argc > 1) {
    fprintf(stderr, "cohort-hello: unexpected argument '%s'\n", rest[1]);
    goto done;
  }
  if (check(cohort_runtime_create(cfg, &rt), "cohort_runtime_create")) goto done;
  if (check(cohort_runtime_info(rt, &info), "cohort_runtime_info")) goto done;
  if (check(cohort_runtime_device(rt, device, sizeof device, NULL), "cohort_runtime_device")) goto done;
  /* mpirun forwards each rank's output on its own, so lines may arrive in any order. */
  printf("rank %d of %d: local %d of %d, node %d of %d, device %s, %d thread%s, cohort %s\n", info.rank, info.size,
         info.local_rank, info.local_size, info.cross_rank, info.cross_size, device, info.thread_budget,
         info.thread_budget == 1 ? "" : "s", cohort_version_string());
  fflush(stdout);
  if (check(cohort_runtime_barrier(rt), "cohort_runtime_barrier")) goto done;
  rc = 0;
done:
  cohort_runtime_destroy(rt);
  cohort_config_destroy(cfg);
  free(rest);
  return rc;
}
