/* A checkpoint call that only rank 0 makes, as a Horovod program saves or loads under
 * `if (hvd.rank() == 0)`, fails on rank 0 with a message that says every rank must
 * make it, under mpirun:
 *   - a load on rank 0 alone, while the other ranks wait in a collective of their own:
 *     both sides stall, and after stall_shutdown_s (2 s here) rank 0's load fails with
 *     COHORT_ERR_STALLED and "every rank must call cohort_optimizer_load_checkpoint";
 *   - a save on rank 0 alone, while the other ranks end (the end of a program): the
 *     save fails with COHORT_ERR_PEER_SHUTDOWN and "every rank must call
 *     cohort_optimizer_save_checkpoint".
 * The ctest timeout catches a hang. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

static void expect_error(cohort_status_t s, cohort_status_t want, const char* text) {
  const char* message = cohort_last_error();
  CHECK(s == want, "returned %d (%s), expected %d", (int)s, cohort_status_string(s), (int)want);
  CHECK(strstr(message, text) != NULL, "the message says '%s': %s", text, message);
  CHECK(strstr(message, "if (rank == 0)") != NULL, "the message names the mistake: %s", message);
}

int main(void) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  MUST(cohort_config_set(cfg, "device", "cpu"));
  MUST(cohort_config_set(cfg, "optimizer", "sgd"));
  MUST(cohort_config_set(cfg, "compute_threads", "1"));
  MUST(cohort_config_set(cfg, "stall_shutdown_s", "2"));
  MUST(cohort_config_set(cfg, "log_level", "error"));
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(cfg, &rt));
  int rank = 0;
  MUST(cohort_runtime_rank(rt, &rank));
  rank_check_rank = rank;
  const int64_t in[1] = {3};
  cohort_model_t* m = NULL;
  MUST(cohort_model_create_custom(rt, cfg, in, 1, &m));
  MUST(cohort_model_add_layer(m, "dense", "fc", NULL, 0, "out=2", NULL));
  MUST(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL));
  cohort_optimizer_t* opt = NULL;
  MUST(cohort_optimizer_create(m, cfg, &opt));

  char dir[512] = "/tmp/cohort_one_rank_XXXXXX";
  if (rank == 0 && !CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir)) exit(1);
  MPI_Bcast(dir, (int)sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  /* A load on rank 0 alone; the others are elsewhere. */
  if (rank == 0) {
    cohort_checkpoint_info_t got = {.struct_size = sizeof got};
    int found = 0;
    expect_error(cohort_optimizer_load_checkpoint(opt, dir, &got, &found), COHORT_ERR_STALLED,
                 "every rank must call cohort_optimizer_load_checkpoint");
  } else {
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    DLTensor t = {.data = x, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    CHECK(cohort_allreduce(rt, "elsewhere", &t, NULL, NULL) == COHORT_ERR_STALLED, "%s",
          "the other ranks' own collective stalls too");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* A save on rank 0 alone at the end of the program: the others end. */
  if (rank == 0) {
    cohort_checkpoint_info_t info = {.struct_size = sizeof info, .epoch = 1};
    expect_error(cohort_optimizer_save_checkpoint(opt, dir, &info), COHORT_ERR_PEER_SHUTDOWN,
                 "every rank must call cohort_optimizer_save_checkpoint");
  }
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(m);
  cohort_runtime_destroy(rt);
  cohort_config_destroy(cfg);
  if (rank == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "removing %s", dir);
  }
  int all = 0;
  MPI_Allreduce(&rank_check_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("checkpoint_one_rank_mpi: %d failure(s) on all ranks\n", all);
  cohort_finalize();
  return all ? 1 : 0;
}
