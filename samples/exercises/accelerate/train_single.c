/* train_single.c — a complete single-device program: it trains the labs' Fashion-MNIST
 * CNN with cohort (the input pipeline, SGD with momentum, a few epochs) and prints
 * images/sec and the test accuracy.
 *
 * The exercise: accelerate it. Started as `cohortrun -np 2 ./train`, it runs two copies
 * that ignore each other. Do the TODOs (1 to 7) the way Horovod does them, so that the
 * ranks train one model together, each on its share of the data, and the run takes
 * about half the time at the same accuracy. Then let the checker grade it:
 *
 *   cc train_single.c $(pkg-config --cflags --libs cohort) -o train
 *   ./train --num_epochs=1                       # one process
 *   cohortrun -np 2 ./train --num_epochs=1       # two ranks
 *   cohort-check accelerate train_single.c       # PASS/FAIL per item, with hints
 *
 * Every flag is a key of cohort's option registry (--batch_size=64, --lr=0.05,
 * --data_dir=..., --json for the run-summary line, --checkpoint_dir=DIR to save the
 * trained model there, --resume to continue from it); see `cohort-options`. The guide is
 * docs/guides/course.md; solution/train_single.c is one answer. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cohort/cohort.h>

#define FASHION_MNIST "/usr/share/datasets/fashion-mnist"

typedef struct {
  cohort_config_t* cfg;
  cohort_runtime_t* rt;
  cohort_model_t* model;
  cohort_optimizer_t* opt;
  cohort_pipeline_t* train;
  cohort_pipeline_t* test;
  cohort_metrics_t* metrics;
  int rank, size, local_size;
} run_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int failed(const char* what) {
  fprintf(stderr, "train_single: %s: %s\n", what, cohort_last_error());
  return 1;
}

#define CHECK(call, what)                         \
  do {                                            \
    if ((call) != COHORT_OK) return failed(what); \
  } while (0)

/* Prints one line of the program's report. */
static void say(const run_t* r, const char* format, ...) {
  /* TODO 6 — only rank 0 prints (Horovod: `if hvd.rank() == 0`). Unlike Horovod's, the
   * checkpoint calls are collective: every rank calls cohort_optimizer_save_checkpoint()
   * and cohort_optimizer_load_checkpoint(), and rank 0 alone writes or reads the file,
   * so they stay outside any `if (rank == 0)` (see save() and resume()). */
  (void)r;
  /* END TODO 6 */
  va_list args;
  va_start(args, format);
  vprintf(format, args);
  va_end(args);
  fflush(stdout);
}

/* The run's metrics as the report gives them: values[0] is a loss, the others rates. */
static int reduce_metrics(run_t* r, double* values, int64_t count) {
  /* TODO 5 — average the metrics over the ranks (Horovod: MetricAverageCallback): the
   * loss should be the mean of the ranks' losses, images/sec the sum of their rates. */
  (void)r;
  (void)values;
  (void)count;
  /* END TODO 5 */
  return 0;
}

/* Sets an option unless the command line or a COHORT_<KEY> variable chose it. */
static int preset(cohort_config_t* cfg, const char* key, const char* value) {
  cohort_option_source_t source = COHORT_SOURCE_DEFAULT;
  if (cohort_config_source(cfg, key, &source) != COHORT_OK) return 1;
  return source == COHORT_SOURCE_DEFAULT && cohort_config_set(cfg, key, value) != COHORT_OK;
}

static int64_t get_int(const cohort_config_t* cfg, const char* key) {
  int64_t v = 0;
  cohort_config_get_int(cfg, key, &v);
  return v;
}

static int get_bool(const cohort_config_t* cfg, const char* key) {
  int v = 0;
  cohort_config_get_bool(cfg, key, &v);
  return v;
}

static int open_pipelines(run_t* r) {
  /* TODO 2 — shard the data, so that each rank reads its own part of every epoch
   * (Horovod: dataset.shard(hvd.size(), hvd.rank())). Without a runtime (NULL), a
   * pipeline reads the whole dataset. */
  const cohort_runtime_t* shard_by = NULL;
  /* END TODO 2 */
  CHECK(cohort_pipeline_create(shard_by, r->cfg, &r->train), "opening the training data");
  cohort_config_t* test_cfg = NULL;
  CHECK(cohort_config_clone(r->cfg, &test_cfg), "copying the configuration");
  cohort_status_t s = cohort_config_set(test_cfg, "data_split", "validation");
  if (s == COHORT_OK) s = cohort_config_set(test_cfg, "shuffle", "false");
  if (s == COHORT_OK) s = cohort_pipeline_create(shard_by, test_cfg, &r->test);
  cohort_config_destroy(test_cfg);
  CHECK(s, "opening the test data");
  return 0;
}

static int create_optimizer(run_t* r) {
  cohort_config_t* opt_cfg = NULL;
  CHECK(cohort_config_clone(r->cfg, &opt_cfg), "copying the configuration");
  int bad =
      preset(opt_cfg, "optimizer", "momentum") | preset(opt_cfg, "momentum", "0.9") | preset(opt_cfg, "lr", "0.05");
  /* TODO 3 — wrap the optimizer as distributed and scale the learning rate, with
   * warm-up (Horovod: hvd.DistributedOptimizer(opt), lr × hvd.size(), and the warm-up
   * callback). See the options lr_scaling, base_batch_size and warmup_epochs. */
  /* END TODO 3 */
  cohort_status_t s = bad ? COHORT_ERR_INVALID_ARGUMENT : cohort_optimizer_create(r->model, opt_cfg, &r->opt);
  cohort_config_destroy(opt_cfg);
  CHECK(s, "creating the optimizer");
  return 0;
}

/* Resumes from the latest checkpoint of `dir` (with --resume): the parameters, the
 * optimizer's state and step count, and where the epochs and the training data were.
 * Collective: every rank calls it; rank 0 reads the file, and its values reach every
 * rank. */
static int resume(run_t* r, const char* dir, int64_t* first_epoch) {
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck};
  int found = 0;
  CHECK(cohort_optimizer_load_checkpoint(r->opt, dir, &ck, &found), "loading the checkpoint");
  if (!found) return 0;
  *first_epoch = ck.epoch;
  CHECK(cohort_pipeline_seek(r->train, ck.pipeline_epoch, ck.pipeline_step), "resuming the training data");
  say(r, "resumed from %s after epoch %lld\n", dir, (long long)ck.epoch);
  return 0;
}

/* Saves the run into `dir`: `epochs` are done and the training data continues after the
 * batch `last`. Collective: every rank calls it; rank 0 writes the file. */
static int save(run_t* r, const char* dir, int64_t epochs, const cohort_batch_t* last, int64_t pipeline_steps) {
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck, .epoch = epochs};
  ck.pipeline_epoch = last->step + 1 < pipeline_steps ? last->epoch : last->epoch + 1;
  ck.pipeline_step = last->step + 1 < pipeline_steps ? last->step + 1 : 0;
  CHECK(cohort_optimizer_save_checkpoint(r->opt, dir, &ck), "saving a checkpoint");
  return 0;
}

static int train(run_t* r, const char* device) {
  const double wall_start = now_s();
  cohort_pipeline_info_t info = {.struct_size = sizeof info};
  CHECK(cohort_pipeline_info(r->train, &info), "reading the dataset size");
  const int64_t batch = info.batch_size;
  double num_epochs = 1;
  cohort_config_get_float(r->cfg, "num_epochs", &num_epochs);
  const int64_t epochs = num_epochs >= 1 ? (int64_t)num_epochs : 1;
  /* TODO 7 — divide the steps per epoch by the number of ranks (each rank takes one
   * batch per step). */
  const int64_t steps_per_epoch = info.dataset_size / batch;
  /* END TODO 7 */
  if (steps_per_epoch < 1) {
    fprintf(stderr, "train_single: %lld images are fewer than one batch per rank\n", (long long)info.dataset_size);
    return 1;
  }
  CHECK(cohort_optimizer_set_run_length(r->opt, steps_per_epoch, steps_per_epoch * epochs),
        "setting the learning-rate schedule");

  /* TODO 4 — broadcast the initial parameters from rank 0, so that every rank starts
   * from the same model (Horovod: BroadcastGlobalVariablesCallback(0)). */
  /* END TODO 4 */
  char checkpoint_dir[4096] = "";
  cohort_config_get(r->cfg, "checkpoint_dir", checkpoint_dir, sizeof checkpoint_dir, NULL);
  int64_t first_epoch = 0;
  if (checkpoint_dir[0] && get_bool(r->cfg, "resume") && resume(r, checkpoint_dir, &first_epoch)) return 1;

  say(r, "Fashion-MNIST CNN: %lld training images, batch %lld, %lld steps per epoch, %lld epochs, on %s\n",
      (long long)info.dataset_size, (long long)batch, (long long)steps_per_epoch, (long long)epochs, device);
  double last_loss = 0;
  int64_t steps = 0;
  cohort_batch_t last = {.struct_size = sizeof last, .epoch = -1, .step = -1};
  for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
    double loss_sum = 0, epoch_images = 0, epoch_start = now_s();
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      const double t0 = now_s();
      cohort_batch_t b = {.struct_size = sizeof b};
      CHECK(cohort_pipeline_next(r->train, &b), "reading a batch");
      const double t1 = now_s();
      cohort_train_stats_t st = {.struct_size = sizeof st};
      CHECK(cohort_optimizer_train_step(r->opt, &b, &st), "training step");
      CHECK(cohort_metrics_record(r->metrics, now_s() - t0, t1 - t0, st.comm_wait_s, (double)b.valid),
            "recording the step");
      loss_sum += st.loss;
      epoch_images += (double)b.valid;
      last_loss = st.loss;
      last = b;
      ++steps;
    }
    double m[2] = {loss_sum / (double)steps_per_epoch, epoch_images / (now_s() - epoch_start)};
    if (reduce_metrics(r, m, 2)) return 1;
    say(r, "epoch %lld: loss %.4f, %.1f images/sec\n", (long long)epoch + 1, m[0], m[1]);
  }

  cohort_eval_result_t ev = {.struct_size = sizeof ev};
  CHECK(cohort_model_evaluate(r->model, r->test, 0, &ev), "evaluating on the test set");
  cohort_rate_summary_t rates = {.struct_size = sizeof rates};
  CHECK(cohort_metrics_summary(r->metrics, &rates), "summarizing the step times");
  double final[3] = {last_loss, rates.median, rates.mean};
  if (reduce_metrics(r, final, 3)) return 1;
  rates.median = final[1];
  rates.mean = final[2];
  say(r, "images/sec: %.1f\ntest accuracy: %.4f (%lld images)\n", rates.median, ev.top1, (long long)ev.samples);

  if (get_bool(r->cfg, "json")) {
    char data_dir[4096] = "";
    cohort_config_get(r->cfg, "data_dir", data_dir, sizeof data_dir, NULL);
    cohort_run_summary_t rs = {
        .struct_size = sizeof rs, .model = "mnist_cnn", .device = device, .precision = "f32", .data = data_dir};
    rs.ranks = r->size;
    rs.local_ranks = r->local_size;
    rs.batch_per_rank = batch;
    rs.global_batch = batch * r->size;
    rs.steps = steps;
    rs.warmup_steps = get_int(r->cfg, "num_warmup_batches");
    rs.images_per_sec = rates;
    rs.epochs = (double)epochs;
    rs.loss = final[0];
    rs.has_top1 = 1;
    rs.top1 = ev.top1;
    rs.top5 = ev.top5;
    rs.wall_s = now_s() - wall_start;
    char line[2048];
    CHECK(cohort_run_summary_json(&rs, line, sizeof line, NULL), "writing the run summary");
    say(r, "%s\n", line);
  }
  if (checkpoint_dir[0] && steps > 0 && save(r, checkpoint_dir, epochs, &last, info.steps_per_epoch)) return 1;
  return 0;
}

static int run(run_t* r, int argc, char** argv) {
  CHECK(cohort_config_create(&r->cfg), "creating a configuration");
  CHECK(cohort_config_parse_args(r->cfg, argc, argv, COHORT_PARSE_STRICT, NULL, NULL), "reading the command line");
  if (preset(r->cfg, "data_dir", FASHION_MNIST) | preset(r->cfg, "augment", "none") | preset(r->cfg, "num_epochs", "3"))
    return failed("setting the defaults");

  /* TODO 1 — create the runtime of the whole job, and use the local rank's device
   * (Horovod: hvd.init(), then pin the GPU of hvd.local_rank()). As written, the runtime
   * is this process alone (world=process): N copies started by cohortrun do not know
   * each other, and each takes every core (or GPU 0) for itself. */
  CHECK(cohort_config_set(r->cfg, "world", "process"), "choosing the runtime's ranks");
  /* END TODO 1 */
  CHECK(cohort_runtime_create(r->cfg, &r->rt), "starting the runtime");
  cohort_runtime_info_t info = {.struct_size = sizeof info};
  CHECK(cohort_runtime_info(r->rt, &info), "reading the ranks");
  r->rank = info.rank;
  r->size = info.size;
  r->local_size = info.local_size;
  char device[64] = "cpu";
  CHECK(cohort_runtime_device(r->rt, device, sizeof device, NULL), "reading the device");

  CHECK(cohort_model_create(r->rt, "mnist_cnn", r->cfg, &r->model), "building the model");
  if (open_pipelines(r) || create_optimizer(r)) return 1;
  CHECK(cohort_metrics_create(get_int(r->cfg, "num_warmup_batches"), &r->metrics), "creating the metrics");
  return train(r, device);
}

int main(int argc, char** argv) {
  run_t r = {0};
  int status = run(&r, argc, argv);
  cohort_metrics_destroy(r.metrics);
  cohort_optimizer_destroy(r.opt);
  cohort_pipeline_destroy(r.test);
  cohort_pipeline_destroy(r.train);
  cohort_model_destroy(r.model);
  cohort_runtime_destroy(r.rt);
  cohort_config_destroy(r.cfg);
  return status;
}
