/* An MPI program that fails the ways cohortrun must name:
 *   launcher_mpi_fail abort R CODE     rank R calls MPI_Abort(MPI_COMM_WORLD, CODE)
 *   launcher_mpi_fail no-finalize R    rank R returns 0 without MPI_Finalize
 * The other ranks wait in a barrier that never completes (mpirun then kills them). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 3) {
    fprintf(stderr, "usage: launcher_mpi_fail abort R CODE | no-finalize R\n");
    MPI_Finalize();
    return 64;
  }
  const int target = atoi(argv[2]);
  if (rank == target && strcmp(argv[1], "abort") == 0) MPI_Abort(MPI_COMM_WORLD, argc > 3 ? atoi(argv[3]) : 1);
  if (rank == target && strcmp(argv[1], "no-finalize") == 0) return 0;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
