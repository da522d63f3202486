/* The runtime under mpirun: rank layout agrees with MPI, every rank sees the same
 * size, runtimes can be created and destroyed in sequence, and the C API's
 * collective calls line up across ranks. Exits non-zero on any failure (rank-tagged). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

static int g_failures = 0;
static int g_rank = -1;

#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s (%s)\n", g_rank, __FILE__, __LINE__, #cond, \
              cohort_last_error());                                                                 \
      g_failures++;                                                                                 \
    }                                                                                               \
  } while (0)

static void check_layout(cohort_runtime_t* rt) {
  cohort_runtime_info_t info = {.struct_size = sizeof(cohort_runtime_info_t)};
  int world_rank = -1, world_size = -1;
  CHECK(cohort_runtime_info(rt, &info) == COHORT_OK);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  g_rank = world_rank;
  CHECK(info.rank == world_rank);
  CHECK(info.size == world_size);
  /* One node here: every rank is local. */
  CHECK(info.local_size == world_size);
  CHECK(info.local_rank == world_rank);
  CHECK(info.cross_size == 1);
  CHECK(info.cross_rank == 0);
  CHECK(info.thread_budget >= 1);
  /* Every rank agrees on the size, and ranks are a permutation of 0..size-1. */
  int* ranks = calloc((size_t)world_size, sizeof(int));
  MPI_Allgather(&info.rank, 1, MPI_INT, ranks, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r) CHECK(ranks[r] == r);
  free(ranks);
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  cohort_runtime_t* rt = NULL;
  cohort_config_t* cfg = NULL;
  CHECK(cohort_config_create(&cfg) == COHORT_OK);
  CHECK(cohort_config_set(cfg, "device", "cpu") == COHORT_OK);
  for (int round = 0; round < 3; ++round) {
    CHECK(cohort_runtime_create(cfg, &rt) == COHORT_OK);
    if (!rt) break;
    check_layout(rt);
    CHECK(cohort_runtime_barrier(rt) == COHORT_OK);
    cohort_runtime_destroy(rt);
  }
  /* Two runtimes at once, each with its own communicator. */
  cohort_runtime_t* a = NULL;
  cohort_runtime_t* b = NULL;
  CHECK(cohort_runtime_create(cfg, &a) == COHORT_OK);
  CHECK(cohort_runtime_create(cfg, &b) == COHORT_OK);
  CHECK(cohort_runtime_barrier(b) == COHORT_OK);
  CHECK(cohort_runtime_barrier(a) == COHORT_OK);
  cohort_runtime_destroy(a);
  cohort_runtime_destroy(b);
  cohort_config_destroy(cfg);

  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(cohort_finalize() == COHORT_OK);
  if (g_rank == 0) printf("runtime_mpi_test: %s (%d failures over all ranks)\n", total ? "FAILED" : "PASSED", total);
  return total ? 1 : 0;
}
