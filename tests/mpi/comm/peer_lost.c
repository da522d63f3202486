/* One rank kills itself with SIGKILL in the middle of a stream of allreduces; the
 * others must not hang. Each rank writes its pid to DIR/pid.RANK so the driver
 * script can check every process is gone. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cohort/cohort.h>

int main(int argc, char** argv) {
  cohort_runtime_t* rt = NULL;
  if (argc < 2 || cohort_runtime_create(NULL, &rt) != COHORT_OK) return 2;
  int rank = 0;
  cohort_runtime_rank(rt, &rank);
  char path[4096];
  snprintf(path, sizeof path, "%s/pid.%d", argv[1], rank);
  FILE* f = fopen(path, "w");
  if (!f) return 2;
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  float data[1024] = {0};
  int64_t shape[1] = {1024};
  DLTensor t = {data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  for (int step = 0;; ++step) {
    if (rank == 1 && step == 20) raise(SIGKILL);
    cohort_status_t s = cohort_allreduce(rt, "grad", &t, NULL, NULL);
    if (s != COHORT_OK) {
      fprintf(stderr, "rank %d: step %d: %s\n", rank, step, cohort_last_error());
      return s == COHORT_ERR_PEER_LOST ? 3 : 4;
    }
  }
}
