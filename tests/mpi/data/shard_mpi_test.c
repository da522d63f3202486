/* Every rank reads a disjoint share of every epoch and the shares cover the dataset;
 * every rank yields the same number of batches. Run under mpirun at np 2 and 3. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"
#include "support/rank_check.h"

#define N 101

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  cohort_runtime_t* rt = NULL;
  if (cohort_runtime_create(NULL, &rt) != COHORT_OK) {
    fprintf(stderr, "runtime: %s\n", cohort_last_error());
    return 1;
  }
  cohort_runtime_info_t ri;
  memset(&ri, 0, sizeof ri);
  ri.struct_size = sizeof ri;
  cohort_runtime_info(rt, &ri);
  rank_check_rank = ri.rank;

  static uint8_t pixels[N * 4];
  static int32_t labels[N];
  for (int i = 0; i < N; ++i) {
    memset(pixels + 4 * i, i, 4);
    labels[i] = i;
  }
  int64_t img_shape[3] = {N, 2, 2}, lab_shape[1] = {N};
  DLTensor images;
  memset(&images, 0, sizeof images);
  images.data = pixels;
  images.device.device_type = kDLCPU;
  images.ndim = 3;
  images.dtype.code = kDLUInt;
  images.dtype.bits = 8;
  images.dtype.lanes = 1;
  images.shape = img_shape;
  DLTensor labs = images;
  labs.data = labels;
  labs.ndim = 1;
  labs.dtype.code = kDLInt;
  labs.dtype.bits = 32;
  labs.shape = lab_shape;

  cohort_config_t* cfg = NULL;
  cohort_config_create(&cfg);
  cohort_config_set(cfg, "batch_size", "8");
  cohort_config_set(cfg, "augment", "none");
  cohort_config_set(cfg, "image_dtype", "u8");
  cohort_config_set(cfg, "seed", "99");
  cohort_pipeline_t* p = NULL;
  CHECK(cohort_pipeline_create_from_memory(rt, cfg, &images, &labs, &p) == COHORT_OK, "create failed");
  if (!p) return 1;
  int64_t steps = 0, lo = 0, hi = 0;
  cohort_pipeline_steps_per_epoch(p, &steps);
  MPI_Allreduce(&steps, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&steps, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi, "ranks disagree on steps per epoch (%lld vs %lld)", (long long)lo, (long long)hi);

  for (int epoch = 0; epoch < 2; ++epoch) {
    int counts[N] = {0}, total[N] = {0};
    for (int64_t s = 0; s < steps; ++s) {
      cohort_batch_t b;
      memset(&b, 0, sizeof b);
      b.struct_size = sizeof b;
      CHECK(cohort_pipeline_next(p, &b) == COHORT_OK, "next failed");
      CHECK(b.epoch == epoch && b.step == s, "batch %lld/%lld out of order", (long long)b.epoch, (long long)b.step);
      for (int64_t i = 0; i < b.valid; ++i) {
        int32_t l = ((int32_t*)b.labels.data)[i];
        CHECK(((uint8_t*)b.images.data)[i * 4] == (uint8_t)l, "pixels do not match label %d", l);
        if (l >= 0 && l < N) counts[l]++;
      }
    }
    MPI_Allreduce(counts, total, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N; ++i)
      CHECK(total[i] == 1, "epoch %d: sample %d seen %d times across ranks", epoch, i, total[i]);
  }
  cohort_pipeline_destroy(p);
  cohort_config_destroy(cfg);
  int all = 0;
  MPI_Allreduce(&rank_check_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  cohort_runtime_destroy(rt);
  cohort_finalize();
  if (rank_check_rank == 0) printf("%s: %d failures over all ranks\n", all ? "FAILED" : "OK", all);
  return all ? 1 : 0;
}
