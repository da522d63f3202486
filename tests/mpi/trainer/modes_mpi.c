/* Every variable_update mode through the public C API, under mpirun:
 *   modes_mpi MODE DEDICATED CHECKPOINT_DIR
 * mnist_cnn trains on a small synthetic set (which it can learn by heart) until its loss
 * has fallen; then:
 *  - the synchronous modes (replicated, parameter_server) leave every worker with the
 *    same parameters as its server (consistency check), independent leaves them
 *    different, and async_parameter_server applied every worker's push with a staleness
 *    within (workers - 1) x (2 x ps_max_lead + 1);
 *  - a dedicated server (DEDICATED=1, the last rank) computes nothing and reads no data;
 *  - a checkpoint saved and loaded back gives the same parameters, and evaluation counts
 *    every sample once (a dedicated server passes no pipeline). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

enum { STEPS = 30, SAMPLES = 64, BATCH = 8, LEAD = 1 };

static cohort_config_t* make_config(const char* mode, const char* dedicated) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  const char* settings[][2] = {{"model", "mnist_cnn"},   {"batch_size", "8"},       {"synthetic_samples", "64"},
                               {"compute_threads", "1"}, {"optimizer", "momentum"}, {"lr", "0.02"},
                               {"weight_decay", "0"},    {"variable_update", mode}, {"ps_dedicated", dedicated},
                               {"ps_max_lead", "1"},     {"device", "cpu"}};
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; ++i)
    MUST(cohort_config_set(cfg, settings[i][0], settings[i][1]));
  return cfg;
}

/* The mean over workers of a value this rank holds (0 weight on a dedicated server). */
static double worker_mean(cohort_runtime_t* rt, const char* name, double value, int worker) {
  double v[2] = {worker ? value : 0, worker ? 1 : 0};
  int64_t two = 2;
  DLTensor x = {.data = v, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 64, 1}, .shape = &two};
  MUST(cohort_allreduce(rt, name, &x, NULL, NULL));
  return v[0] / v[1];
}

/* The sum (or the largest, when `max`) over ranks. */
static double over_ranks(cohort_runtime_t* rt, const char* name, double value, int max) {
  int64_t one = 1;
  DLTensor x = {.data = &value, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 64, 1}, .shape = &one};
  cohort_allreduce_options_t o;
  cohort_allreduce_options_default(&o);
  if (max) o.op = COHORT_REDUCE_MAX;
  MUST(cohort_allreduce(rt, name, &x, NULL, &o));
  return value;
}

/* A copy of parameter 0 (the first convolution's weights). */
static float* copy_first_param(cohort_model_t* m, int64_t* n) {
  DLTensor v;
  MUST(cohort_model_param(m, 0, NULL, &v, NULL));
  *n = 1;
  for (int d = 0; d < v.ndim; ++d) *n *= v.shape[d];
  float* out = malloc((size_t)*n * sizeof(float));
  memcpy(out, v.data, (size_t)*n * sizeof(float));
  return out;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: modes_mpi MODE DEDICATED(0|1) CHECKPOINT_DIR\n");
    return 2;
  }
  const char* mode = argv[1];
  const int sync = strcmp(mode, "replicated") == 0 || strcmp(mode, "parameter_server") == 0;
  const int async = strcmp(mode, "async_parameter_server") == 0;
  cohort_config_t* cfg = make_config(mode, strcmp(argv[2], "1") == 0 ? "true" : "false");
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(cfg, &rt));
  cohort_runtime_info_t ri = {.struct_size = sizeof ri};
  MUST(cohort_runtime_info(rt, &ri));
  rank_check_rank = ri.rank;
  cohort_model_t* model = NULL;
  MUST(cohort_model_create(rt, "mnist_cnn", cfg, &model));
  cohort_optimizer_t* opt = NULL;
  MUST(cohort_optimizer_create(model, cfg, &opt));
  cohort_optimizer_info_t info = {.struct_size = sizeof info};
  MUST(cohort_optimizer_info(opt, &info));
  CHECK(strcmp(info.variable_update, mode) == 0, "mode %s", info.variable_update);
  const int dedicated = argv[2][0] == '1';
  CHECK(info.workers == (dedicated ? ri.size - 1 : ri.size), "%d workers of %d ranks", info.workers, ri.size);
  CHECK(info.worker == !(dedicated && ri.rank == ri.size - 1), "rank %d worker %d", ri.rank, info.worker);

  cohort_pipeline_t* train = NULL;
  cohort_pipeline_t* eval = NULL;
  if (info.worker) {
    MUST(cohort_pipeline_create_for_model(model, cfg, &train));
    MUST(cohort_config_set(cfg, "data_split", "validation"));
    MUST(cohort_pipeline_create_for_model(model, cfg, &eval));
  } else {
    /* A dedicated server reads no data: asking for a pipeline says so. */
    CHECK(cohort_pipeline_create_for_model(model, cfg, &train) == COHORT_ERR_INVALID_ARGUMENT &&
              strstr(cohort_last_error(), "dedicated parameter server") != NULL,
          "%s", "a pipeline on a dedicated server");
  }
  MUST(cohort_optimizer_broadcast(opt, 0));

  double first = 0, last = 0;
  for (int s = 0; s < STEPS; ++s) {
    cohort_train_stats_t st = {.struct_size = sizeof st};
    if (info.worker) {
      cohort_batch_t b = {.struct_size = sizeof b};
      MUST(cohort_pipeline_next(train, &b));
      MUST(cohort_optimizer_train_step(opt, &b, &st));
    } else {
      MUST(cohort_optimizer_train_step(opt, NULL, &st)); /* nothing to do */
    }
    if (s < 5) first += st.loss / 5;
    if (s >= STEPS - 5) last += st.loss / 5;
  }
  first = worker_mean(rt, "first_loss", first, info.worker);
  last = worker_mean(rt, "last_loss", last, info.worker);
  if (ri.rank == 0) printf("%s: mean loss of the first 5 steps %.4f, of the last 5 %.4f\n", mode, first, last);
  CHECK(last < 0.8 * first, "the loss fell from %.4f to %.4f only", first, last);

  cohort_status_t consistent = cohort_optimizer_check_consistency(opt);
  if (sync) CHECK(consistent == COHORT_OK, "%s", "workers disagree in a synchronous mode");
  if (strcmp(mode, "independent") == 0)
    CHECK(consistent == COHORT_ERR_MISMATCH && strstr(cohort_last_error(), "independent") != NULL,
          "independent models agree (status %d)", (int)consistent);

  MUST(cohort_optimizer_info(opt, &info));
  const double updates = over_ranks(rt, "updates", (double)info.updates, 0);
  const double behind = over_ranks(rt, "staleness_max", (double)info.staleness_max, 1);
  if (info.servers > 0) {
    const double expected = (double)STEPS * info.servers * (async ? info.workers : 1);
    CHECK(updates == expected, "%.0f updates applied, expected %.0f", updates, expected);
  }
  if (async)
    CHECK(behind <= (double)((info.workers - 1) * (2 * LEAD + 1)), "an update %.0f steps behind", behind);
  else
    CHECK(behind == 0, "staleness %.0f in mode %s", behind, mode);

  /* Save, disturb, load: the saved parameters come back on every rank. */
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck, .epoch = 1};
  MUST(cohort_optimizer_save_checkpoint(opt, argv[3], &ck));
  int64_t n = 0;
  float* saved = copy_first_param(model, &n);
  if (info.worker) {
    cohort_batch_t b = {.struct_size = sizeof b};
    cohort_train_stats_t st = {.struct_size = sizeof st};
    MUST(cohort_pipeline_next(train, &b));
    MUST(cohort_optimizer_train_step(opt, &b, &st));
  } else {
    MUST(cohort_optimizer_train_step(opt, NULL, NULL));
  }
  int found = 0;
  cohort_checkpoint_info_t back = {.struct_size = sizeof back};
  MUST(cohort_optimizer_load_checkpoint(opt, argv[3], &back, &found));
  CHECK(found && back.epoch == 1 && back.step == STEPS, "found %d epoch %lld step %lld", found, (long long)back.epoch,
        (long long)back.step);
  int64_t m = 0;
  float* loaded = copy_first_param(model, &m);
  /* (independent: every rank saved its own model, and loads rank 0's) */
  if (strcmp(mode, "independent") != 0 || ri.rank == 0)
    CHECK(m == n && memcmp(saved, loaded, (size_t)n * sizeof(float)) == 0, "%s",
          "the loaded parameters differ from the saved ones");
  free(saved);
  free(loaded);
  CHECK(cohort_optimizer_check_consistency(opt) == COHORT_OK, "%s", "ranks disagree after loading");

  cohort_eval_result_t ev = {.struct_size = sizeof ev};
  MUST(cohort_model_evaluate(model, eval, 0, &ev));
  CHECK(ev.samples == SAMPLES, "%lld samples evaluated", (long long)ev.samples);

  cohort_pipeline_destroy(eval);
  cohort_pipeline_destroy(train);
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(model);
  cohort_runtime_destroy(rt);
  cohort_config_destroy(cfg);
  return rank_check_exit();
}
