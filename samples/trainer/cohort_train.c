/* cohort-train: the reference trainer, built only on the public C API.
 *
 * What the labs run as `mpirun -np 4 … tf_cnn_benchmarks.py --model=resnet50 …` is
 * `cohortrun -np 4 cohort-train --model=resnet50 …` here. Every flag is a key of the
 * library's option registry (see --help). Only rank 0 prints; the output follows
 * tf_cnn_benchmarks: the header, a line every display_every steps, then
 * `images/sec: MEAN +/- STDERR (jitter = J)` and `total images/sec`. With --json the
 * last line is the run summary (schema cohort.run/1).
 *
 * run() reads as the steps of a training program: start the runtime, build the model,
 * open the pipelines made for it, plan the run, start from rank 0's parameters or a
 * checkpoint, train (saving checkpoints on the way), then evaluate and report. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cohort/cohort.h>

/* The options the trainer reads itself (every other one goes to the library). */
typedef struct {
  char model[128], precision[16], data_dir[4096], data_format[16], progress[16], checkpoint_dir[4096];
  int64_t batch_size, passes, display_every, checkpoint_every, eval_every, eval_every_epochs;
  int eval, resume, json, summary_only, profile;
} settings_t;

/* The run's length, fixed before the first step. */
typedef struct {
  int64_t steps_per_epoch; /* batches per epoch of the training pipeline */
  int64_t total;           /* batches of the whole run (whole optimizer steps) */
  int64_t warmup;          /* batches not measured */
  int64_t dataset_size;
} plan_t;

/* Where training stands. */
typedef struct {
  int64_t step;         /* batches done */
  int64_t epochs_done;  /* completed epochs */
  double loss;          /* loss of the last step on this rank */
  int64_t evaluated_at; /* the step of the last evaluation (--eval_every_epochs), -1 for none */
  cohort_eval_result_t last_eval;
} progress_t;

/* The measured steps' accounting: this rank's CPU times and pipeline statistics when
 * they began, and each step's compute time (forward and backward). */
typedef struct {
  int started;
  int64_t first_step; /* the step after which measuring began */
  cohort_cpu_times_t cpu;
  cohort_engine_stats_t engine;
  cohort_pipeline_stats_t input;
  double* compute_s; /* per step after first_step; NAN on a rank that does not compute */
  int64_t capacity;
} accounting_t;

typedef struct {
  settings_t set;
  cohort_config_t* cfg;
  cohort_runtime_t* rt;
  cohort_model_t* model;
  cohort_optimizer_t* opt;
  cohort_pipeline_t* train;
  cohort_pipeline_t* eval;
  cohort_metrics_t* metrics;
  cohort_run_log_t* log;         /* --tensorboard_dir, --log_csv (rank 0 writes) */
  cohort_optimizer_info_t roles; /* variable_update: whether this rank computes, the workers */
  int rank, size, local_size;
  int tty; /* draw a live progress line */
  double wall_start;
  accounting_t acct; /* where the measured steps' time went */
} trainer_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last error without the "cohort_xxx: " prefix of the failing function. */
static const char* error_text(void) {
  const char* e = cohort_last_error();
  const char* colon = strstr(e, ": ");
  if (strncmp(e, "cohort_", 7) == 0 && colon && !memchr(e, ' ', (size_t)(colon - e))) return colon + 2;
  return e;
}

/* Reports a failed call. The checkpoint calls fail alike on every rank, with the same
 * message (the ranks agree on rank 0's outcome), and every rank makes the same
 * bad-argument mistake, so rank 0 alone says so; other failures are this rank's own. */
static int fail_msg(const trainer_t* t, cohort_status_t s, const char* what, int agreed) {
  if (t->rank <= 0 || (!agreed && s != COHORT_ERR_INVALID_ARGUMENT)) {
    if (t->size > 1)
      fprintf(stderr, "cohort-train: rank %d: %s: %s\n", t->rank, what, error_text());
    else
      fprintf(stderr, "cohort-train: %s: %s\n", what, error_text());
  }
  return 1;
}

#define CHECK_CALL(call, what, agreed)                         \
  do {                                                         \
    cohort_status_t s_ = (call);                               \
    if (s_ != COHORT_OK) return fail_msg(t, s_, what, agreed); \
  } while (0)
/* A call of this rank alone. */
#define CHECK(call, what) CHECK_CALL(call, what, 0)
/* A collective call whose error is the same on every rank (checkpoint save and load). */
#define CHECK_AGREED(call, what) CHECK_CALL(call, what, 1)

/* ---------------------------------------------------------------- options */

static void get_string(const cohort_config_t* cfg, const char* key, char* out, size_t size) {
  out[0] = '\0';
  cohort_config_get(cfg, key, out, size, NULL);
}

static int64_t get_int(const cohort_config_t* cfg, const char* key) {
  int64_t v = 0;
  cohort_config_get_int(cfg, key, &v);
  return v;
}

static double get_float(const cohort_config_t* cfg, const char* key) {
  double v = 0;
  cohort_config_get_float(cfg, key, &v);
  return v;
}

static int get_bool(const cohort_config_t* cfg, const char* key) {
  int v = 0;
  cohort_config_get_bool(cfg, key, &v);
  return v;
}

static int is_explicit(const cohort_config_t* cfg, const char* key) {
  cohort_option_source_t src = COHORT_SOURCE_DEFAULT;
  cohort_config_source(cfg, key, &src);
  return src != COHORT_SOURCE_DEFAULT;
}

static void read_settings(const cohort_config_t* cfg, settings_t* s) {
  get_string(cfg, "model", s->model, sizeof s->model);
  get_string(cfg, "precision", s->precision, sizeof s->precision);
  get_string(cfg, "data_dir", s->data_dir, sizeof s->data_dir);
  get_string(cfg, "data_format", s->data_format, sizeof s->data_format);
  get_string(cfg, "progress", s->progress, sizeof s->progress);
  get_string(cfg, "checkpoint_dir", s->checkpoint_dir, sizeof s->checkpoint_dir);
  s->batch_size = get_int(cfg, "batch_size");
  s->passes = get_int(cfg, "backward_passes_per_step");
  s->display_every = get_int(cfg, "display_every");
  s->checkpoint_every = get_int(cfg, "checkpoint_every");
  s->eval_every = get_int(cfg, "eval_every");
  s->eval_every_epochs = get_int(cfg, "eval_every_epochs");
  s->eval = get_bool(cfg, "eval");
  s->resume = get_bool(cfg, "resume");
  s->json = get_bool(cfg, "json");
  s->summary_only = get_bool(cfg, "summary");
  s->profile = get_bool(cfg, "profile");
}

/* A host f64 vector as a DLTensor (for the trainer's own collectives). */
static DLTensor f64_vector(double* data, int64_t* n) {
  DLTensor x = {.data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 64, 1}, .shape = n};
  return x;
}

/* Collective: n values summed (or their maximum, with `max`) over ranks, in place. */
static cohort_status_t allreduce_f64(cohort_runtime_t* rt, const char* name, double* values, int64_t n, int max) {
  DLTensor x = f64_vector(values, &n);
  cohort_allreduce_options_t ao;
  cohort_allreduce_options_default(&ao);
  if (max) ao.op = COHORT_REDUCE_MAX;
  return cohort_allreduce(rt, name, &x, NULL, &ao);
}

/* ---------------------------------------------------------------- output (rank 0) */

/* "Cmd line args:" lists the options given on the command line, in their order. */
static void print_cmd_line(const cohort_config_t* cfg, int argc, char** argv) {
  char seen[64][64];
  int nseen = 0;
  printf("Cmd line args:\n");
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') continue;
    char key[64];
    size_t n = strcspn(a + 2, "=");
    if (n >= sizeof key) continue;
    memcpy(key, a + 2, n);
    key[n] = '\0';
    for (char* c = key; *c; ++c)
      if (*c == '-') *c = '_';
    const char* k = key;
    if (strncmp(k, "no_", 3) == 0 && cohort_option_describe(k, NULL) != COHORT_OK) k += 3;
    int dup = 0;
    for (int j = 0; j < nseen; ++j) dup |= strcmp(seen[j], k) == 0;
    if (dup || nseen == 64) continue;
    char value[4096];
    if (cohort_config_get(cfg, k, value, sizeof value, NULL) != COHORT_OK) continue;
    strcpy(seen[nseen++], k);
    printf("  --%s=%s\n", k, value);
  }
}

static const char* labs_dtype(const char* precision) {
  if (strcmp(precision, "f16") == 0) return "fp16";
  if (strcmp(precision, "bf16") == 0) return "bf16";
  return "fp32";
}

static void clear_live(const trainer_t* t) {
  if (t->tty) fputs("\r\033[K", stdout);
}

static void print_header(const trainer_t* t, const plan_t* plan, int argc, char** argv) {
  if (t->rank != 0) return;
  print_cmd_line(t->cfg, argc, argv);
  printf("Num ranks:   %d\n", t->size);
  printf("Num images:  %lld\n", (long long)plan->dataset_size);
  printf("Model:       %s\n", t->set.model);
  printf("Batch size:  %lld per device\n", (long long)t->set.batch_size);
  printf("             %lld total\n", (long long)(t->set.batch_size * t->roles.workers));
  printf("Data format: %s\n", t->set.data_format);
  printf("Data type:   %s\n", labs_dtype(t->set.precision));
  printf("Variables:   %s", t->roles.variable_update);
  if (t->roles.servers > 0)
    printf(" (%d server%s, %s)", t->roles.servers, t->roles.servers == 1 ? "" : "s",
           t->roles.workers < t->size ? "dedicated" : "on ranks that also compute");
  printf("\n");
  fflush(stdout);
}

static void print_rate_line(const trainer_t* t, int64_t step, double rate, const cohort_rate_summary_t* r,
                            double loss) {
  if (t->rank != 0) return;
  clear_live(t);
  if (r->count > 0)
    printf("%lld\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f\n", (long long)step, r->mean, r->std_error, r->jitter,
           loss);
  else
    printf("%lld\timages/sec: %.1f (warm-up)\t%.3f\n", (long long)step, rate, loss);
  fflush(stdout);
}

/* ---------------------------------------------------------------- the steps of run() */

static int start_runtime(trainer_t* t) {
  cohort_runtime_info_t info = {.struct_size = sizeof info};
  CHECK(cohort_runtime_create(t->cfg, &t->rt), "starting the runtime");
  CHECK(cohort_runtime_info(t->rt, &info), "reading the runtime's ranks");
  t->rank = info.rank;
  t->size = info.size;
  t->local_size = info.local_size;
  CHECK(cohort_run_log_create(t->rt, t->cfg, &t->log), "opening the run's log");
  const char* p = t->set.progress;
  t->tty = t->rank == 0 && (strcmp(p, "tty") == 0 || (strcmp(p, "auto") == 0 && isatty(1)));
  return 0;
}

static int build_model(trainer_t* t) {
  if (cohort_model_create(t->rt, t->set.model, t->cfg, &t->model) == COHORT_OK) return 0;
  /* The labs' wording, `Invalid model type: NAME`, then the valid names. */
  const char* e = error_text();
  const char* q = "Invalid model type: '";
  const char* end = strncmp(e, q, strlen(q)) == 0 ? strchr(e + strlen(q), '\'') : NULL;
  if (t->rank == 0 && end)
    fprintf(stderr, "cohort-train: Invalid model type: %.*s%s\n", (int)(end - e - strlen(q)), e + strlen(q), end + 1);
  else if (t->rank == 0)
    fprintf(stderr, "cohort-train: building the model: %s\n", e);
  return 1;
}

/* --summary: the layer table, or the parameter count if the table cannot be made. */
static int print_model_summary(const trainer_t* t) {
  if (t->rank != 0) return 0;
  int64_t params = 0;
  CHECK(cohort_model_num_params(t->model, &params), "counting parameters");
  size_t needed = 0;
  cohort_model_summary(t->model, NULL, 0, &needed);
  char* text = malloc(needed);
  if (text && cohort_model_summary(t->model, text, needed, NULL) == COHORT_OK)
    fputs(text, stdout);
  else
    printf("total parameters: %lld\n", (long long)params);
  free(text);
  return 0;
}

/* How this rank takes part in the optimizer's variable_update mode. */
static int read_roles(trainer_t* t) {
  t->roles.struct_size = sizeof t->roles;
  CHECK(cohort_optimizer_info(t->opt, &t->roles), "reading the optimizer's roles");
  return 0;
}

/* The training pipeline and, with --eval, the evaluation one, both made for the model:
 * they take its image size, channels and classes. A dedicated parameter server reads no
 * data. */
static int open_pipelines(trainer_t* t) {
  if (!t->roles.worker) return 0;
  CHECK(cohort_pipeline_create_for_model(t->model, t->cfg, &t->train), "opening the input pipeline");
  if (!t->set.eval) return 0;
  cohort_config_t* ec = NULL;
  CHECK(cohort_config_clone(t->cfg, &ec), "copying the configuration");
  cohort_status_t s = cohort_config_set(ec, "data_split", "validation");
  if (s == COHORT_OK) s = cohort_config_set(ec, "augment", "none");
  if (s == COHORT_OK) s = cohort_config_set(ec, "shuffle", "false");
  if (s == COHORT_OK) s = cohort_pipeline_create_for_model(t->model, ec, &t->eval);
  cohort_config_destroy(ec);
  if (s != COHORT_OK) return fail_msg(t, s, "opening the evaluation pipeline", 0);
  return 0;
}

/* The training pipeline's epoch and dataset size; dedicated parameter servers, which
 * have no pipeline, learn them from rank 0 (always a worker). */
static int epoch_size(trainer_t* t, plan_t* plan) {
  if (t->train) {
    cohort_pipeline_info_t info = {.struct_size = sizeof info};
    CHECK(cohort_pipeline_info(t->train, &info), "reading the pipeline's size");
    plan->steps_per_epoch = info.steps_per_epoch;
    plan->dataset_size = info.dataset_size;
  }
  if (t->roles.workers == t->size) return 0;
  double sizes[2] = {(double)plan->steps_per_epoch, (double)plan->dataset_size};
  int64_t two = 2;
  DLTensor x = f64_vector(sizes, &two);
  CHECK(cohort_broadcast(t->rt, "trainer/epoch_size", &x, NULL, 0), "sharing the epoch size");
  plan->steps_per_epoch = (int64_t)sizes[0];
  plan->dataset_size = (int64_t)sizes[1];
  return 0;
}

/* --num_iter, or --num_epochs of the training pipeline, in whole optimizer steps. */
static int plan_run(trainer_t* t, plan_t* plan) {
  if (epoch_size(t, plan)) return 1;
  const int64_t passes = t->set.passes;
  int64_t total = get_int(t->cfg, "num_iter");
  if (total == 0) total = (int64_t)ceil(get_float(t->cfg, "num_epochs") * (double)plan->steps_per_epoch);
  if (total < 1) total = 1;
  plan->total = (total + passes - 1) / passes * passes;
  plan->warmup = get_int(t->cfg, "num_warmup_batches");
  if (plan->warmup > plan->total - 1) plan->warmup = plan->total - 1;
  const int64_t updates_per_epoch = plan->steps_per_epoch / passes > 0 ? plan->steps_per_epoch / passes : 1;
  CHECK(cohort_optimizer_set_run_length(t->opt, updates_per_epoch, plan->total / passes),
        "setting the learning-rate schedule");
  CHECK(cohort_metrics_create(plan->warmup, &t->metrics), "creating the step metrics");
  return 0;
}

/* Rank 0's parameters on every rank; with --resume, those of the latest checkpoint and
 * the position it recorded. */
static int restore_or_start(trainer_t* t, const plan_t* plan, progress_t* p) {
  CHECK(cohort_optimizer_broadcast(t->opt, 0), "broadcasting parameters from rank 0");
  if (!t->set.resume) return 0;
  if (t->set.checkpoint_dir[0] == '\0') {
    if (t->rank == 0) fprintf(stderr, "cohort-train: --resume needs --checkpoint_dir\n");
    return 2;
  }
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck};
  int found = 0;
  CHECK_AGREED(cohort_optimizer_load_checkpoint(t->opt, t->set.checkpoint_dir, &ck, &found), "resuming");
  if (!found) {
    if (t->rank == 0) printf("No checkpoint in %s: starting from scratch\n", t->set.checkpoint_dir);
    return 0;
  }
  p->step = ck.step * t->set.passes;
  p->epochs_done = ck.epoch;
  if (t->train)
    CHECK(cohort_pipeline_seek(t->train, ck.pipeline_epoch, ck.pipeline_step), "seeking the input pipeline");
  double lr = 0;
  CHECK(cohort_optimizer_state(t->opt, &lr, NULL), "reading the learning rate");
  if (t->rank != 0) return 0;
  printf("Resumed from step %lld (epoch %lld)\n", (long long)ck.step, (long long)ck.epoch);
  /* At another rank count the library resumed at the same sample, and the schedule
   * follows the new global batch. */
  if (ck.ranks > 0 && ck.ranks != t->size)
    printf("Saved by %lld ranks, resumed on %d: global batch %lld, %lld steps per epoch, learning rate %g\n",
           (long long)ck.ranks, t->size, (long long)(t->set.batch_size * t->size), (long long)plan->steps_per_epoch,
           lr);
  return 0;
}

/* The agreed save: rank 0 writes (only its position counts: the pipeline's next batch;
 * a dedicated parameter server has no pipeline, and is never rank 0), and a failure stops
 * every rank alike. */
static int save_checkpoint(const trainer_t* t, int64_t epochs_done) {
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck};
  ck.epoch = epochs_done;
  if (t->train)
    CHECK(cohort_pipeline_position(t->train, &ck.pipeline_epoch, &ck.pipeline_step), "reading the pipeline's position");
  CHECK_AGREED(cohort_optimizer_save_checkpoint(t->opt, t->set.checkpoint_dir, &ck), "saving a checkpoint");
  return 0;
}

/* The progress line every display_every steps (and a live one on a terminal). */
static int show_progress(const trainer_t* t, const plan_t* plan, const progress_t* p, double rate) {
  if (p->step % t->set.display_every == 0 || p->step == plan->total) {
    cohort_rate_summary_t rates = {.struct_size = sizeof rates};
    CHECK(cohort_metrics_summary(t->metrics, &rates), "reading the step metrics");
    print_rate_line(t, p->step, rate, &rates, p->loss);
  } else if (t->tty) {
    printf("\r\033[Kstep %lld/%lld  %.1f images/sec  loss %.3f", (long long)p->step, (long long)plan->total, rate,
           p->loss);
    fflush(stdout);
  }
  return 0;
}

/* Collective: evaluates the model (a dedicated parameter server adds nothing), logs the
 * result at the current step, and prints it when `label` is given (rank 0). */
static int evaluate(const trainer_t* t, progress_t* p, const char* label, cohort_eval_result_t* ev) {
  ev->struct_size = sizeof *ev;
  if (p->evaluated_at == p->step) { /* the model has not changed since */
    *ev = p->last_eval;
    return 0;
  }
  CHECK(cohort_model_evaluate(t->model, t->eval, 0, ev), "evaluating");
  p->evaluated_at = p->step;
  p->last_eval = *ev;
  CHECK(cohort_run_log_eval(t->log, p->step, ev), "logging the evaluation");
  if (label && t->rank == 0) {
    clear_live(t);
    printf("%s: Accuracy @ 1 = %.4f Accuracy @ 5 = %.4f [%lld examples], loss %.4f\n", label, ev->top1, ev->top5,
           (long long)ev->samples, ev->loss);
    fflush(stdout);
  }
  return 0;
}

/* After a step, and after whole updates only: --eval_every_epochs at the end of an epoch,
 * the checkpoint (--checkpoint_dir) at the end of an epoch, every --checkpoint_every
 * steps and at the end of the run, then --eval_every steps (not at the end: the final
 * evaluation follows). */
static int end_step(trainer_t* t, progress_t* p, int epoch_end, int at_end, int updated) {
  if (epoch_end) ++p->epochs_done;
  if (!updated) return 0;
  char label[64];
  cohort_eval_result_t ev;
  if (epoch_end && t->set.eval && t->set.eval_every_epochs > 0 && p->epochs_done % t->set.eval_every_epochs == 0) {
    snprintf(label, sizeof label, "Epoch %lld", (long long)p->epochs_done);
    if (evaluate(t, p, label, &ev)) return 1;
  }
  const int every = t->set.checkpoint_every > 0 && p->step % t->set.checkpoint_every == 0;
  if (t->set.checkpoint_dir[0] && (epoch_end || every || at_end) && save_checkpoint(t, p->epochs_done)) return 1;
  if (t->set.eval && t->set.eval_every > 0 && p->step % t->set.eval_every == 0 && !at_end) {
    snprintf(label, sizeof label, "Step %lld", (long long)p->step);
    if (evaluate(t, p, label, &ev)) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------- accounting */

/* Begins measuring where the time goes, after step `step` (the end of the warm-up). */
static int start_accounting(trainer_t* t, int64_t step) {
  accounting_t* a = &t->acct;
  a->started = 1;
  a->first_step = step;
  a->cpu = (cohort_cpu_times_t){.struct_size = sizeof a->cpu};
  CHECK(cohort_runtime_cpu_times(t->rt, &a->cpu), "reading the CPU times");
  a->engine = (cohort_engine_stats_t){.struct_size = sizeof a->engine};
  CHECK(cohort_runtime_engine_stats(t->rt, &a->engine), "reading the engine's counters");
  a->input = (cohort_pipeline_stats_t){.struct_size = sizeof a->input};
  if (t->train) CHECK(cohort_pipeline_stats(t->train, &a->input), "reading the pipeline's statistics");
  return 0;
}

static void account_step(trainer_t* t, int64_t step, double compute_s) {
  const accounting_t* a = &t->acct;
  if (a->started && step > a->first_step && step - a->first_step <= a->capacity)
    a->compute_s[step - a->first_step - 1] = compute_s;
}

static int compare_doubles(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

/* The q-quantile (0..1) of n values, sorted in place: the nearest rank at or above q; the
 * median (q = 0.5) of an even count is the mean of the two middle values. */
static double quantile(double* v, int64_t n, double q) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, compare_doubles);
  if (q == 0.5 && n % 2 == 0) return 0.5 * (v[n / 2 - 1] + v[n / 2]);
  int64_t i = (int64_t)ceil(q * (double)n) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

enum { kAcctCompute, kAcctEngine, kAcctOther, kAcctReaders, kAcctDecoders, kAcctKinds };

/* One kind of thread's CPU per step over the ranks that compute: the median and the largest
 * (rows: one per rank, kAcctKinds + 1 columns, the first saying whether the rank computes). */
static cohort_over_ranks_t over_ranks(const double* rows, int ranks, int kind) {
  double* v = malloc(sizeof(double) * (size_t)ranks);
  int64_t n = 0;
  for (int r = 0; v && r < ranks; ++r)
    if (rows[r * (kAcctKinds + 1)] > 0) v[n++] = rows[r * (kAcctKinds + 1) + 1 + kind];
  cohort_over_ranks_t o = {0, 0};
  if (n > 0) {
    o.median = quantile(v, n, 0.5);
    o.max = v[n - 1];
  }
  free(v);
  return o;
}

/* Collective: where the measured steps' time went on every rank (gathered once, here):
 * each kind of thread's CPU seconds per step, and, per step, the longest compute of the
 * ranks minus the shortest. Returns 0 and leaves *out alone when nothing was measured. */
static int thread_accounting(trainer_t* t, int64_t steps_done, cohort_thread_cpu_t* out, int* measured) {
  const accounting_t* a = &t->acct;
  double counted = a->started ? (double)(steps_done - a->first_step) : 0;
  CHECK(allreduce_f64(t->rt, "trainer/accounting_steps", &counted, 1, 1), "counting the measured steps");
  const int64_t n = (int64_t)counted;
  *measured = n > 0;
  if (n <= 0) return 0;
  cohort_cpu_times_t now = {.struct_size = sizeof now};
  CHECK(cohort_runtime_cpu_times(t->rt, &now), "reading the CPU times");
  cohort_pipeline_stats_t in = {.struct_size = sizeof in, .limiting_stage = ""};
  if (t->train) CHECK(cohort_pipeline_stats(t->train, &in), "reading the pipeline's statistics");
  const int computes = a->started && t->roles.worker;
  double* rows = calloc((size_t)t->size * (kAcctKinds + 1), sizeof(double));
  double* high = malloc(sizeof(double) * (size_t)n);
  double* low = malloc(sizeof(double) * (size_t)n);
  if (!rows || !high || !low) {
    free(rows), free(high), free(low);
    fprintf(stderr, "cohort-train: out of memory\n");
    return 1;
  }
  double* mine = rows + t->rank * (kAcctKinds + 1);
  if (computes) {
    const double steps = (double)(steps_done - a->first_step);
    mine[0] = 1;
    mine[1 + kAcctCompute] = (now.calling_thread_s - a->cpu.calling_thread_s) / steps;
    mine[1 + kAcctEngine] = (now.engine_s - a->cpu.engine_s) / steps;
    mine[1 + kAcctReaders] = (in.read_cpu_s - a->input.read_cpu_s) / steps;
    mine[1 + kAcctDecoders] = (in.decode_cpu_s + in.augment_cpu_s + in.assemble_cpu_s - a->input.decode_cpu_s -
                               a->input.augment_cpu_s - a->input.assemble_cpu_s) /
                              steps;
    const double other = (now.process_s - a->cpu.process_s) / steps - mine[1 + kAcctCompute] - mine[1 + kAcctEngine] -
                         mine[1 + kAcctReaders] - mine[1 + kAcctDecoders];
    mine[1 + kAcctOther] = other > 0 ? other : 0;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double c = i < a->capacity && computes ? a->compute_s[i] : NAN;
    high[i] = isnan(c) ? -1e300 : c;
    low[i] = isnan(c) ? -1e300 : -c;
  }
  cohort_status_t s = allreduce_f64(t->rt, "trainer/accounting_rows", rows, (int64_t)t->size * (kAcctKinds + 1), 0);
  if (s == COHORT_OK) s = allreduce_f64(t->rt, "trainer/accounting_high", high, n, 1);
  if (s == COHORT_OK) s = allreduce_f64(t->rt, "trainer/accounting_low", low, n, 1);
  if (s == COHORT_OK) {
    out->compute = over_ranks(rows, t->size, kAcctCompute);
    out->engine = over_ranks(rows, t->size, kAcctEngine);
    out->other = over_ranks(rows, t->size, kAcctOther);
    out->readers = over_ranks(rows, t->size, kAcctReaders);
    out->decoders = over_ranks(rows, t->size, kAcctDecoders);
    out->has_input = t->set.data_dir[0] != '\0';
    int64_t steps = 0;
    for (int64_t i = 0; i < n; ++i)
      if (high[i] > -1e300 && low[i] > -1e300) high[steps++] = high[i] + low[i]; /* max - min */
    out->compute_spread_median = quantile(high, steps, 0.5);
    out->compute_spread_p90 = quantile(high, steps, 0.9);
  }
  free(rows), free(high), free(low);
  if (s != COHORT_OK) return fail_msg(t, s, "gathering where the time went", 0);
  return 0;
}

/* The engine's work per measured step on this rank: negotiation cycles (each a barrier of
 * every rank), the cycles that exchanged full descriptions, the operations completed and
 * the allreduce calls that fused several tensors. */
typedef struct {
  double cycles, full_exchanges, operations, fused_batches;
} engine_per_step_t;

static int engine_per_step(const trainer_t* t, int64_t steps_done, engine_per_step_t* out, int* measured) {
  const accounting_t* a = &t->acct;
  *measured = a->started && steps_done > a->first_step;
  if (!*measured) return 0;
  cohort_engine_stats_t now = {.struct_size = sizeof now};
  CHECK(cohort_runtime_engine_stats(t->rt, &now), "reading the engine's counters");
  const double steps = (double)(steps_done - a->first_step);
  out->cycles = (double)(now.cycles - a->engine.cycles) / steps;
  out->full_exchanges = (double)(now.full_exchanges - a->engine.full_exchanges) / steps;
  out->operations = (double)(now.completed - a->engine.completed) / steps;
  out->fused_batches = (double)(now.fused_batches - a->engine.fused_batches) / steps;
  return 0;
}

/* Where a rank's time went, in milliseconds per step (the median rank's). */
static void print_accounting(const cohort_thread_cpu_t* a) {
  printf("CPU per step (median rank, ms): compute %.1f, engine %.2f, other %.2f", 1e3 * a->compute.median,
         1e3 * a->engine.median, 1e3 * a->other.median);
  if (a->has_input) printf(", readers %.1f, decoders %.1f", 1e3 * a->readers.median, 1e3 * a->decoders.median);
  printf("; compute spread across ranks per step: median %.1f ms, p90 %.1f ms\n", 1e3 * a->compute_spread_median,
         1e3 * a->compute_spread_p90);
}

static void print_engine_per_step(const engine_per_step_t* e) {
  printf("engine per step (rank 0): %.1f negotiation cycles (%.1f full), %.1f operations, %.1f fused allreduce calls\n",
         e->cycles, e->full_exchanges, e->operations, e->fused_batches);
}

/* A dedicated parameter server's step: it serves from its own thread, so here it only
 * keeps count, to join the workers' evaluations and checkpoint saves at the same steps. */
static int serve_one_step(trainer_t* t, const plan_t* plan, progress_t* p) {
  const int64_t in_epoch = plan->steps_per_epoch > 0 ? p->step % plan->steps_per_epoch : p->step;
  ++p->step;
  if (p->step == plan->warmup && start_accounting(t, p->step)) return 1;
  const int epoch_end = plan->steps_per_epoch > 0 && in_epoch == plan->steps_per_epoch - 1;
  return end_step(t, p, epoch_end, p->step == plan->total, p->step % t->set.passes == 0);
}

/* Whether the workers' steps move together (the library says: replicated and
 * parameter_server do): one rank's step time is then every worker's. Otherwise workers
 * run at their own pace (more ranks than cores make them take turns), so each measures
 * its own rate and the total is their sum, as tf_cnn_benchmarks reports it. */
static int in_lockstep(const trainer_t* t) { return t->roles.lockstep; }

/* Collective: the workers' own rates summed into the total (modes not in lockstep). */
static int total_rates(const trainer_t* t, cohort_rate_summary_t* rates) {
  if (in_lockstep(t)) return 0;
  if (!t->roles.worker) rates->median = rates->mean = rates->std_error = rates->jitter = 0; /* a dedicated server */
  double v[4] = {rates->median, rates->mean, rates->std_error * rates->std_error, rates->jitter};
  CHECK(allreduce_f64(t->rt, "trainer/total_rates", v, 4, 0), "summing the workers' rates");
  rates->median = v[0];
  rates->mean = v[1];
  rates->std_error = sqrt(v[2]);
  rates->jitter = v[3];
  return 0;
}

/* One batch: read it, train on it, measure it, report it, then checkpoint and evaluate
 * as end_step says. */
static int train_one_step(trainer_t* t, const plan_t* plan, progress_t* p) {
  if (!t->roles.worker) return serve_one_step(t, plan, p);
  const double t0 = now_s();
  cohort_batch_t b = {.struct_size = sizeof b};
  CHECK(cohort_pipeline_next(t->train, &b), "reading a batch");
  const double t1 = now_s();
  cohort_train_stats_t st = {.struct_size = sizeof st};
  CHECK(cohort_optimizer_train_step(t->opt, &b, &st), "training step");
  const double secs = now_s() - t0;
  /* In lockstep every worker trains a batch in this step's time; otherwise this rank's own
   * rate is measured and report() sums the workers'. */
  const double images = (double)(b.valid * (in_lockstep(t) ? t->roles.workers : 1));
  ++p->step;
  p->loss = st.loss;
  CHECK(cohort_metrics_record(t->metrics, secs, t1 - t0, st.comm_wait_s, images), "recording the step");
  account_step(t, p->step, st.compute_s);
  if (p->step == plan->warmup && t->set.profile) CHECK(cohort_model_set_profiling(t->model, 1), "starting the profile");
  if (p->step == plan->warmup && start_accounting(t, p->step)) return 1;
  cohort_step_record_t rec = {.struct_size = sizeof rec, .step = p->step, .loss = st.loss, .lr = st.lr};
  rec.epoch = plan->steps_per_epoch > 0 ? (double)p->step / (double)plan->steps_per_epoch : 0;
  rec.step_s = secs;
  rec.data_wait_s = t1 - t0;
  rec.comm_exposed_s = st.comm_wait_s;
  rec.images = images;
  CHECK(cohort_run_log_step(t->log, &rec), "logging the step");
  if (p->step == plan->warmup && t->rank == 0) {
    clear_live(t);
    printf("Done warm up\nStep\tImg/sec\ttotal_loss\n");
    fflush(stdout);
  }
  if (show_progress(t, plan, p, images / secs)) return 1;
  const int epoch_end = plan->steps_per_epoch > 0 && b.step == plan->steps_per_epoch - 1;
  return end_step(t, p, epoch_end, p->step == plan->total, st.updated);
}

static int train(trainer_t* t, const plan_t* plan, progress_t* p) {
  if (t->rank == 0 && plan->warmup > 0 && p->step < plan->warmup) {
    printf("Running warm up\n");
    fflush(stdout);
  }
  if (t->set.profile && p->step >= plan->warmup) CHECK(cohort_model_set_profiling(t->model, 1), "starting the profile");
  t->acct.capacity = plan->total - p->step;
  t->acct.compute_s = malloc(sizeof(double) * (size_t)(t->acct.capacity > 0 ? t->acct.capacity : 1));
  if (!t->acct.compute_s) {
    fprintf(stderr, "cohort-train: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < t->acct.capacity; ++i) t->acct.compute_s[i] = NAN;
  if (p->step >= plan->warmup && start_accounting(t, p->step)) return 1;
  while (p->step < plan->total)
    if (train_one_step(t, plan, p)) return 1;
  clear_live(t);
  return 0;
}

/* The loss of the last step, averaged over the ranks that compute. */
static int mean_loss(const trainer_t* t, double* loss) {
  double sums[2] = {t->roles.worker ? *loss : 0, t->roles.worker ? 1 : 0};
  CHECK(allreduce_f64(t->rt, "trainer/final_loss", sums, 2, 0), "averaging the loss");
  *loss = sums[0] / sums[1];
  return 0;
}

/* The staleness of the updates of every parameter server (async_parameter_server). */
static int staleness(const trainer_t* t, cohort_run_summary_t* rs) {
  cohort_optimizer_info_t info = {.struct_size = sizeof info};
  CHECK(cohort_optimizer_info(t->opt, &info), "reading the parameter servers' counts");
  double sums[2] = {info.staleness_sum, (double)info.updates}, most = (double)info.staleness_max;
  CHECK(allreduce_f64(t->rt, "trainer/staleness_sum", sums, 2, 0), "summing the staleness");
  CHECK(allreduce_f64(t->rt, "trainer/staleness_max", &most, 1, 1), "finding the largest staleness");
  rs->variable_update = t->roles.variable_update;
  rs->workers = t->roles.workers;
  rs->servers = t->roles.servers;
  rs->has_staleness = strcmp(t->roles.variable_update, "async_parameter_server") == 0;
  rs->staleness_mean = sums[1] > 0 ? sums[0] / sums[1] : 0;
  rs->staleness_max = (int64_t)most;
  return 0;
}

/* The device memory cache's peaks over the run, each the largest over the ranks
 * (collective); computed 0 where no rank's models compute on a GPU. */
typedef struct {
  int computed;                      /* some rank's models compute on a GPU */
  double peak_in_use, peak_reserved; /* bytes */
} device_memory_t;

static int device_memory(const trainer_t* t, device_memory_t* out) {
  cohort_memory_stats_t m = {.struct_size = sizeof m};
  CHECK(cohort_runtime_memory_stats(t->rt, &m), "reading the device memory's statistics");
  double v[3] = {m.device_id >= 0 ? 1 : 0, (double)m.peak_in_use_bytes, (double)m.peak_reserved_bytes};
  CHECK(allreduce_f64(t->rt, "trainer/device_memory", v, 3, 1), "finding the largest device memory");
  out->computed = v[0] > 0;
  out->peak_in_use = v[1];
  out->peak_reserved = v[2];
  return 0;
}

static void print_device_memory(const device_memory_t* m) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  printf(
      "device memory (the largest of the ranks): peak %.2f GiB in use, %.2f GiB reserved by cohort's cache "
      "(cuDNN's, cuBLAS's and NCCL's own not counted)\n",
      m->peak_in_use / gib, m->peak_reserved / gib);
}

/* --profile: the library's per-layer table of the measured steps. */
static void print_profile(const trainer_t* t) {
  size_t needed = 0;
  cohort_model_profile(t->model, NULL, 0, &needed);
  char* text = needed ? malloc(needed) : NULL;
  if (text && cohort_model_profile(t->model, text, needed, NULL) == COHORT_OK) fputs(text, stdout);
  free(text);
}

/* The training pipelines' statistics summed over ranks (collective; elapsed time: the
 * longest): the bad samples left out under on_error=skip (the pipeline itself fails a run
 * that skips more than max_skipped_fraction), the samples read, and each stage's CPU time
 * and the bytes read. limiting_stage is rank 0's. */
static int pipeline_totals(const trainer_t* t, cohort_pipeline_stats_t* total, int64_t* read) {
  cohort_pipeline_stats_t ps = {.struct_size = sizeof ps, .limiting_stage = ""};
  if (t->train) CHECK(cohort_pipeline_stats(t->train, &ps), "reading the pipeline's statistics");
  double n[8] = {(double)ps.skipped,    (double)(ps.images + ps.skipped),
                 ps.read_cpu_s,         ps.decode_cpu_s,
                 ps.augment_cpu_s,      ps.assemble_cpu_s,
                 (double)ps.bytes_read, (double)ps.decoded};
  double longest = ps.elapsed_s;
  CHECK(allreduce_f64(t->rt, "trainer/pipeline_totals", n, 8, 0), "summing the pipelines' statistics");
  CHECK(allreduce_f64(t->rt, "trainer/pipeline_elapsed", &longest, 1, 1), "timing the pipelines");
  *total = ps;
  total->skipped = (int64_t)n[0];
  *read = (int64_t)n[1];
  total->read_cpu_s = n[2];
  total->decode_cpu_s = n[3];
  total->augment_cpu_s = n[4];
  total->assemble_cpu_s = n[5];
  total->bytes_read = (int64_t)n[6];
  total->decoded = (int64_t)n[7];
  total->elapsed_s = longest;
  return 0;
}

/* Where the input pipeline spent its CPU, per image, and how fast it read. */
static void print_input_report(const trainer_t* t, const cohort_pipeline_stats_t* in) {
  const double cpu[4] = {in->read_cpu_s, in->decode_cpu_s, in->augment_cpu_s, in->assemble_cpu_s};
  const char* names[4] = {"read", "decode", "augment", "assemble"};
  const double total = cpu[0] + cpu[1] + cpu[2] + cpu[3];
  const double per = 1e3 / (double)(in->decoded > 0 ? in->decoded : 1);
  printf("input pipeline CPU per image:");
  for (int i = 0; i < 4; ++i)
    printf(" %s %.3f ms (%.0f%%)%s", names[i], cpu[i] * per, total > 0 ? 100 * cpu[i] / total : 0, i < 3 ? "," : "");
  printf("; total %.3f ms; %.1f MB/s read from storage\n", total * per,
         in->elapsed_s > 0 ? (double)in->bytes_read / in->elapsed_s / 1e6 : 0);
  char verdict[1024];
  if (t->train && cohort_pipeline_verdict(t->train, verdict, sizeof verdict, NULL) == COHORT_OK)
    printf("%s\n", verdict);
}

static void print_json_summary(const trainer_t* t, const plan_t* plan, const progress_t* p,
                               const cohort_rate_summary_t* rates, double loss, const cohort_eval_result_t* ev,
                               int64_t skipped, const engine_per_step_t* engine, const device_memory_t* memory,
                               cohort_run_summary_t rs) {
  char device[32] = "cpu";
  cohort_runtime_device(t->rt, device, sizeof device, NULL);
  rs.model = t->set.model;
  rs.ranks = t->size;
  rs.local_ranks = t->local_size;
  rs.device = device;
  rs.precision = t->set.precision;
  rs.data = t->set.data_dir[0] ? t->set.data_dir : "synthetic";
  rs.batch_per_rank = t->set.batch_size;
  rs.global_batch = t->set.batch_size * t->roles.workers;
  rs.steps = p->step;
  rs.warmup_steps = plan->warmup;
  rs.images_per_sec = *rates;
  rs.epochs = plan->steps_per_epoch > 0 ? (double)p->step / (double)plan->steps_per_epoch : 0;
  rs.loss = loss;
  rs.has_top1 = t->set.eval;
  rs.top1 = ev->top1;
  rs.top5 = ev->top5;
  rs.wall_s = now_s() - t->wall_start;
  char extra[512];
  int len = snprintf(extra, sizeof extra, "\"skipped\": %lld", (long long)skipped);
  if (engine)
    len += snprintf(extra + len, sizeof extra - (size_t)len,
                    ", \"engine\": {\"cycles_per_step\": %.3f, \"full_exchanges_per_step\": %.3f, "
                    "\"operations_per_step\": %.3f, \"fused_batches_per_step\": %.3f}",
                    engine->cycles, engine->full_exchanges, engine->operations, engine->fused_batches);
  if (memory->computed)
    snprintf(extra + len, sizeof extra - (size_t)len,
             ", \"device_memory\": {\"peak_in_use_bytes\": %.0f, \"peak_reserved_bytes\": %.0f}", memory->peak_in_use,
             memory->peak_reserved);
  rs.extra_json = extra;
  size_t needed = 0;
  cohort_run_summary_json(&rs, NULL, 0, &needed);
  char* line = malloc(needed);
  if (line && cohort_run_summary_json(&rs, line, needed, NULL) == COHORT_OK) printf("%s\n", line);
  free(line);
}

/* The final rates, the evaluation (--eval) and the run summary (--json). */
static int report(trainer_t* t, const plan_t* plan, progress_t* p) {
  engine_per_step_t engine; /* read first: the report's own collectives are not the steps' */
  int engine_measured = 0;
  if (engine_per_step(t, p->step, &engine, &engine_measured)) return 1;
  cohort_rate_summary_t rates = {.struct_size = sizeof rates};
  CHECK(cohort_metrics_summary(t->metrics, &rates), "reading the step metrics");
  const cohort_rate_summary_t own = rates;
  if (total_rates(t, &rates)) return 1;
  double loss = p->loss;
  int64_t read = 0;
  cohort_run_summary_t rs = {.struct_size = sizeof rs};
  cohort_pipeline_stats_t input;
  cohort_thread_cpu_t threads = {.struct_size = sizeof threads};
  int measured = 0;
  if (mean_loss(t, &loss) || pipeline_totals(t, &input, &read) || staleness(t, &rs) ||
      thread_accounting(t, p->step, &threads, &measured))
    return 1;
  if (measured) rs.threads = &threads;
  const int64_t skipped = input.skipped;
  if (t->set.data_dir[0]) rs.input = &input; /* synthetic data has no pipeline work */
  cohort_eval_result_t ev = {.struct_size = sizeof ev};
  if (t->set.eval && evaluate(t, p, NULL, &ev)) return 1;
  device_memory_t memory = {0}; /* after the evaluation, whose memory counts too */
  if (device_memory(t, &memory)) return 1;
  if (t->rank != 0) return 0;
  printf("----------------------------------------------------------------\n");
  printf("images/sec: %.1f +/- %.1f (jitter = %.1f)\n", own.mean, own.std_error, own.jitter);
  printf("total images/sec: %.2f%s\n", rates.mean, in_lockstep(t) ? "" : " (the workers' own rates summed)");
  if (t->set.profile) print_profile(t);
  printf("----------------------------------------------------------------\n");
  printf("skipped samples: %lld of %lld read\n", (long long)skipped, (long long)read);
  if (rs.input) print_input_report(t, &input);
  if (rs.threads) print_accounting(rs.threads);
  if (engine_measured) print_engine_per_step(&engine);
  if (memory.computed) print_device_memory(&memory);
  if (rs.has_staleness)
    printf("staleness: %.2f updates behind on average, %lld at most\n", rs.staleness_mean, (long long)rs.staleness_max);
  if (t->set.eval)
    printf("Accuracy @ 1 = %.4f Accuracy @ 5 = %.4f [%lld examples], loss %.4f\n", ev.top1, ev.top5,
           (long long)ev.samples, ev.loss);
  if (t->set.json)
    print_json_summary(t, plan, p, &rates, loss, &ev, skipped, engine_measured ? &engine : NULL, &memory, rs);
  fflush(stdout);
  return 0;
}

static int run(trainer_t* t, int argc, char** argv) {
  t->wall_start = now_s();
  read_settings(t->cfg, &t->set);
  if (start_runtime(t) || build_model(t)) return 1;
  if (t->set.summary_only) return print_model_summary(t);
  CHECK(cohort_optimizer_create(t->model, t->cfg, &t->opt), "setting up the optimizer");
  plan_t plan = {0};
  if (read_roles(t) || open_pipelines(t) || plan_run(t, &plan)) return 1;
  print_header(t, &plan, argc, argv);
  progress_t progress = {.evaluated_at = -1};
  const int rc = restore_or_start(t, &plan, &progress);
  if (rc) return rc;
  if (train(t, &plan, &progress)) return 1;
  return report(t, &plan, &progress);
}

/* ---------------------------------------------------------------- main */

/* The trainer's recipe where the library's defaults suit a caller that may not know the
 * run's length: --lr is meant for 256 images and scales with the global batch, and it
 * decays along a cosine over the run. A value given on the command line or through the
 * environment always wins. */
static const char* const kTrainerDefaults[][2] = {{"lr_scaling", "linear"}, {"lr_schedule", "cosine"}};

static int apply_trainer_defaults(cohort_config_t* cfg) {
  for (size_t i = 0; i < sizeof kTrainerDefaults / sizeof kTrainerDefaults[0]; ++i)
    if (!is_explicit(cfg, kTrainerDefaults[i][0]) &&
        cohort_config_set(cfg, kTrainerDefaults[i][0], kTrainerDefaults[i][1]) != COHORT_OK)
      return 0;
  return 1;
}

static void usage(void) {
  printf(
      "usage: cohort-train [--key=value ...]\n"
      "Trains a model of the zoo on synthetic data or a dataset (--data_dir), on one rank or\n"
      "many (cohortrun -np N cohort-train ...). Every option of the library applies.\n"
      "cohort-train's own defaults, where they differ from the library's:");
  for (size_t i = 0; i < sizeof kTrainerDefaults / sizeof kTrainerDefaults[0]; ++i)
    printf(" --%s=%s", kTrainerDefaults[i][0], kTrainerDefaults[i][1]);
  printf(" (--lr is for --base_batch_size images).\n\n%s", cohort_option_help(NULL));
}

/* Destroys in the reverse order of creation; the runtime, the one collective destroy,
 * last, so every rank reaches it. */
static void destroy(trainer_t* t) {
  free(t->acct.compute_s);
  cohort_run_log_destroy(t->log);
  cohort_metrics_destroy(t->metrics);
  cohort_pipeline_destroy(t->eval);
  cohort_pipeline_destroy(t->train);
  cohort_optimizer_destroy(t->opt);
  cohort_model_destroy(t->model);
  cohort_runtime_destroy(t->rt);
  cohort_config_destroy(t->cfg);
}

int main(int argc, char** argv) {
  trainer_t t = {0};
  t.rank = -1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage();
      return 0;
    }
  int rest_argc = 0;
  char** rest = malloc(sizeof(char*) * (size_t)(argc + 1));
  int rc = 2;
  if (!rest || cohort_config_create(&t.cfg) != COHORT_OK) {
    fprintf(stderr, "cohort-train: cannot create a configuration: %s\n", cohort_last_error());
  } else if (cohort_config_parse_args(t.cfg, argc, argv, COHORT_PARSE_STRICT, &rest_argc, rest) != COHORT_OK) {
    fprintf(stderr, "cohort-train: %s\n", error_text());
  } else if (rest_argc > 1) {
    fprintf(stderr, "cohort-train: unexpected argument '%s' (options are --key=value; see --help)\n", rest[1]);
  } else if (!apply_trainer_defaults(t.cfg)) {
    fprintf(stderr, "cohort-train: %s\n", error_text());
  } else {
    rc = run(&t, argc, argv);
  }
  destroy(&t);
  free(rest);
  return rc;
}
