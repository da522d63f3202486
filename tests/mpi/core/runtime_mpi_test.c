/* The runtime under mpirun: rank layout agrees with MPI, every rank sees the same
 * size, runtimes can be created and destroyed in sequence, and the C API's
 * collective calls line up across ranks. Exits non-zero on any failure (rank-tagged). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

static void check_layout(cohort_runtime_t* rt) {
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int world_rank = -1, world_size = -1;
  OK(cohort_runtime_info(rt, &info));
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  rank_check_rank = world_rank;
  CHECK(info.rank == world_rank, "rank %d, MPI says %d", info.rank, world_rank);
  CHECK(info.size == world_size, "size %d, MPI says %d", info.size, world_size);
  /* One node here: every rank is local. */
  CHECK(info.local_size == world_size, "local_size %d on one node of %d", info.local_size, world_size);
  CHECK(info.local_rank == world_rank, "local_rank %d", info.local_rank);
  CHECK(info.cross_size == 1, "cross_size %d on one node", info.cross_size);
  CHECK(info.cross_rank == 0, "cross_rank %d on one node", info.cross_rank);
  CHECK(info.thread_budget >= 1, "thread_budget %d", info.thread_budget);
  /* Every rank agrees on the size, and ranks are a permutation of 0..size-1. */
  int* ranks = calloc((size_t)world_size, sizeof(int));
  MPI_Allgather(&info.rank, 1, MPI_INT, ranks, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r) CHECK(ranks[r] == r, "rank %d reported rank %d", r, ranks[r]);
  free(ranks);
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  cohort_runtime_t* rt = NULL;
  cohort_config_t* cfg = NULL;
  OK(cohort_config_create(&cfg));
  OK(cohort_config_set(cfg, "device", "cpu"));
  for (int round = 0; round < 3; ++round) {
    OK(cohort_runtime_create(cfg, &rt));
    if (!rt) break;
    check_layout(rt);
    OK(cohort_runtime_barrier(rt));
    cohort_runtime_destroy(rt);
  }
  /* Two runtimes at once, each with its own communicator. */
  cohort_runtime_t* a = NULL;
  cohort_runtime_t* b = NULL;
  OK(cohort_runtime_create(cfg, &a));
  OK(cohort_runtime_create(cfg, &b));
  OK(cohort_runtime_barrier(b));
  OK(cohort_runtime_barrier(a));
  cohort_runtime_destroy(a);
  cohort_runtime_destroy(b);
  cohort_config_destroy(cfg);

  int total = 0;
  MPI_Allreduce(&rank_check_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  OK(cohort_finalize());
  if (rank_check_rank == 0)
    printf("runtime_mpi_test: %s (%d failures over all ranks)\n", total ? "FAILED" : "PASSED", total);
  return total ? 1 : 0;
}
