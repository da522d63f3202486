/* cohort-train: the reference trainer, built only on the public C API.
 *
 * What the labs run as `mpirun -np 4 … tf_cnn_benchmarks.py --model=resnet50 …` is
 * `cohortrun -np 4 cohort-train --model=resnet50 …` here. Every flag is a key of the
 * library's option registry (see --help). Only rank 0 prints; the output follows
 * tf_cnn_benchmarks: the header, a line every display_every steps, then
 * `images/sec: MEAN +/- STDERR (jitter = J)` and `total images/sec`. With --json the
 * last line is the run summary (schema cohort.run/1). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cohort/cohort.h>

typedef struct {
  cohort_config_t* cfg;
  cohort_runtime_t* rt;
  cohort_model_t* model;
  cohort_optimizer_t* opt;
  cohort_pipeline_t* train;
  cohort_pipeline_t* eval;
  cohort_metrics_t* metrics;
  int rank, size, local_size;
  int tty; /* draw a live progress line */
  char *model_name, *precision, *data_dir, *data_format, *progress, *checkpoint_dir;
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

static int fail_msg(const trainer_t* t, cohort_status_t s, const char* what) {
  if (t->rank <= 0 || s != COHORT_ERR_INVALID_ARGUMENT) {
    if (t->size > 1)
      fprintf(stderr, "cohort-train: rank %d: %s: %s\n", t->rank, what, error_text());
    else
      fprintf(stderr, "cohort-train: %s: %s\n", what, error_text());
  }
  return 1;
}

#define CHECK(call, what)                              \
  do {                                                 \
    cohort_status_t s_ = (call);                       \
    if (s_ != COHORT_OK) return fail_msg(t, s_, what); \
  } while (0)

static char* get_string(const cohort_config_t* cfg, const char* key) {
  size_t needed = 0;
  cohort_config_get(cfg, key, NULL, 0, &needed);
  char* buf = malloc(needed ? needed : 1);
  if (!buf) return NULL;
  buf[0] = '\0';
  if (needed) cohort_config_get(cfg, key, buf, needed, NULL);
  return buf;
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
    char* v = get_string(cfg, k);
    if (!v) continue;
    strcpy(seen[nseen++], k);
    printf("  --%s=%s\n", k, v);
    free(v);
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

/* Sets a pipeline option unless the user chose it. */
static int default_option(cohort_config_t* cfg, const char* key, int64_t value) {
  if (is_explicit(cfg, key)) return 0;
  return cohort_config_set_int(cfg, key, value) != COHORT_OK;
}

static int open_pipelines(trainer_t* t, int want_eval) {
  int64_t c = 0, h = 0, w = 0, classes = 0;
  CHECK(cohort_model_io_shape(t->model, &c, &h, &w, &classes), "reading the model's input shape");
  cohort_config_t* pc = NULL;
  CHECK(cohort_config_clone(t->cfg, &pc), "copying the configuration");
  int bad = default_option(pc, "image_size", h) | default_option(pc, "num_classes", classes) |
            default_option(pc, "synthetic_channels", c);
  cohort_status_t s = bad ? COHORT_ERR_INVALID_ARGUMENT : cohort_pipeline_create(t->rt, pc, &t->train);
  if (s == COHORT_OK && want_eval) {
    cohort_config_set(pc, "data_split", "validation");
    cohort_config_set(pc, "augment", "none");
    cohort_config_set(pc, "shuffle", "false");
    s = cohort_pipeline_create(t->rt, pc, &t->eval);
  }
  cohort_config_destroy(pc);
  if (s != COHORT_OK) return fail_msg(t, s, "opening the input pipeline");
  return 0;
}

/* --profile: the library's per-layer table of the measured steps. */
static void print_profile(const trainer_t* t) {
  size_t needed = 0;
  cohort_model_profile(t->model, NULL, 0, &needed);
  char* text = needed ? malloc(needed) : NULL;
  if (text && cohort_model_profile(t->model, text, needed, NULL) == COHORT_OK) fputs(text, stdout);
  free(text);
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

static int run(trainer_t* t, int argc, char** argv) {
  const double wall_start = now_s();
  cohort_runtime_info_t info = {.struct_size = sizeof info};
  CHECK(cohort_runtime_create(t->cfg, &t->rt), "starting the runtime");
  CHECK(cohort_runtime_info(t->rt, &info), "cohort_runtime_info");
  t->rank = info.rank;
  t->size = info.size;
  t->local_size = info.local_size;

  char* model_name = t->model_name = get_string(t->cfg, "model");
  char* precision = t->precision = get_string(t->cfg, "precision");
  char* data_dir = t->data_dir = get_string(t->cfg, "data_dir");
  char* data_format = t->data_format = get_string(t->cfg, "data_format");
  char* progress = t->progress = get_string(t->cfg, "progress");
  char* checkpoint_dir = t->checkpoint_dir = get_string(t->cfg, "checkpoint_dir");
  char device[32] = "cpu";
  cohort_runtime_device(t->rt, device, sizeof device, NULL);
  if (!model_name || !precision || !data_dir || !data_format || !progress || !checkpoint_dir) {
    fprintf(stderr, "cohort-train: out of memory\n");
    return 1;
  }
  t->tty = t->rank == 0 && (strcmp(progress, "tty") == 0 || (strcmp(progress, "auto") == 0 && isatty(1)));

  if (cohort_model_create(t->rt, model_name, t->cfg, &t->model) != COHORT_OK) {
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
  if (get_bool(t->cfg, "summary")) {
    if (t->rank == 0) {
      size_t needed = 0;
      int64_t params = 0;
      CHECK(cohort_model_num_params(t->model, &params), "counting parameters");
      cohort_model_summary(t->model, NULL, 0, &needed);
      char* text = malloc(needed);
      if (text && cohort_model_summary(t->model, text, needed, NULL) == COHORT_OK)
        fputs(text, stdout);
      else
        printf("total parameters: %lld\n", (long long)params);
      free(text);
    }
    return 0;
  }
  CHECK(cohort_optimizer_create(t->model, t->cfg, &t->opt), "setting up the optimizer");
  const int want_eval = get_bool(t->cfg, "eval");
  if (open_pipelines(t, want_eval)) return 1;

  cohort_pipeline_info_t pinfo = {.struct_size = sizeof pinfo};
  CHECK(cohort_pipeline_info(t->train, &pinfo), "cohort_pipeline_info");
  const int64_t batch = get_int(t->cfg, "batch_size");
  const int64_t passes = get_int(t->cfg, "backward_passes_per_step");
  const int64_t spe = pinfo.steps_per_epoch;
  int64_t total = get_int(t->cfg, "num_iter");
  if (total == 0) total = (int64_t)ceil(get_float(t->cfg, "num_epochs") * (double)spe);
  if (total < 1) total = 1;
  total = (total + passes - 1) / passes * passes; /* whole optimizer steps */
  int64_t warmup = get_int(t->cfg, "num_warmup_batches");
  if (warmup > total - 1) warmup = total - 1;
  CHECK(cohort_optimizer_set_run_length(t->opt, spe / passes > 0 ? spe / passes : 1, total / passes),
        "setting the learning-rate schedule");
  CHECK(cohort_metrics_create(warmup, &t->metrics), "cohort_metrics_create");

  if (t->rank == 0) {
    print_cmd_line(t->cfg, argc, argv);
    printf("Num ranks:   %d\n", t->size);
    printf("Num images:  %lld\n", (long long)pinfo.dataset_size);
    printf("Model:       %s\n", model_name);
    printf("Batch size:  %lld per device\n", (long long)batch);
    printf("             %lld total\n", (long long)(batch * t->size));
    printf("Data format: %s\n", data_format);
    printf("Data type:   %s\n", labs_dtype(precision));
    fflush(stdout);
  }

  /* Same starting point everywhere, or the saved one. */
  CHECK(cohort_optimizer_broadcast(t->opt, 0), "broadcasting parameters from rank 0");
  int64_t start = 0, epochs_done = 0;
  if (get_bool(t->cfg, "resume")) {
    if (checkpoint_dir[0] == '\0') {
      if (t->rank == 0) fprintf(stderr, "cohort-train: --resume needs --checkpoint_dir\n");
      return 2;
    }
    cohort_checkpoint_info_t ck = {.struct_size = sizeof ck};
    int found = 0;
    CHECK(cohort_optimizer_load_checkpoint(t->opt, checkpoint_dir, &ck, &found), "resuming");
    if (found) {
      start = ck.step * passes;
      epochs_done = ck.epoch;
      CHECK(cohort_pipeline_seek(t->train, ck.pipeline_epoch, ck.pipeline_step), "seeking the input pipeline");
      if (t->rank == 0) printf("Resumed from step %lld (epoch %lld)\n", (long long)ck.step, (long long)ck.epoch);
    } else if (t->rank == 0) {
      printf("No checkpoint in %s: starting from scratch\n", checkpoint_dir);
    }
  }

  const int64_t display = get_int(t->cfg, "display_every");
  double loss = 0;
  int64_t step = start, last_epoch = -1, last_pos_step = 0;
  cohort_rate_summary_t rates = {.struct_size = sizeof rates};
  cohort_train_stats_t st = {.struct_size = sizeof st};
  if (t->rank == 0 && warmup > 0 && start < warmup) {
    printf("Running warm up\n");
    fflush(stdout);
  }
  if (start >= warmup && get_bool(t->cfg, "profile"))
    CHECK(cohort_model_set_profiling(t->model, 1), "starting the profile");
  while (step < total) {
    const double t0 = now_s();
    cohort_batch_t b = {.struct_size = sizeof b};
    CHECK(cohort_pipeline_next(t->train, &b), "reading a batch");
    const double t1 = now_s();
    CHECK(cohort_model_train_step(t->model, t->opt, &b, &st), "training step");
    const double secs = now_s() - t0;
    ++step;
    loss = st.loss;
    last_epoch = b.epoch;
    last_pos_step = b.step;
    CHECK(cohort_metrics_record(t->metrics, secs, t1 - t0, st.comm_wait_s, (double)(b.valid * t->size)),
          "cohort_metrics_record");
    if (step == warmup && get_bool(t->cfg, "profile"))
      CHECK(cohort_model_set_profiling(t->model, 1), "starting the profile");
    if (step == warmup && t->rank == 0) {
      clear_live(t);
      printf("Done warm up\nStep\tImg/sec\ttotal_loss\n");
      fflush(stdout);
    }
    const int epoch_end = spe > 0 && b.step == spe - 1;
    if (step % display == 0 || step == total) {
      CHECK(cohort_metrics_summary(t->metrics, &rates), "cohort_metrics_summary");
      print_rate_line(t, step, (double)(b.valid * t->size) / secs, &rates, loss);
    } else if (t->tty) {
      printf("\r\033[Kstep %lld/%lld  %.1f images/sec  loss %.3f", (long long)step, (long long)total,
             (double)(b.valid * t->size) / secs, loss);
      fflush(stdout);
    }
    if (epoch_end) ++epochs_done;
    if (checkpoint_dir[0] && st.updated && (epoch_end || step == total)) {
      cohort_checkpoint_info_t ck = {.struct_size = sizeof ck};
      ck.epoch = epochs_done;
      ck.pipeline_epoch = epoch_end ? b.epoch + 1 : b.epoch;
      ck.pipeline_step = epoch_end ? 0 : b.step + 1;
      CHECK(cohort_optimizer_save_checkpoint(t->opt, checkpoint_dir, &ck), "saving a checkpoint");
    }
  }
  (void)last_epoch;
  (void)last_pos_step;
  clear_live(t);
  CHECK(cohort_metrics_summary(t->metrics, &rates), "cohort_metrics_summary");

  /* The final loss, averaged over ranks. */
  double mean_loss = loss;
  {
    int64_t one = 1;
    DLTensor x = {.data = &mean_loss, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 64, 1}, .shape = &one};
    cohort_allreduce_options_t ao = {.struct_size = sizeof ao};
    cohort_allreduce_options_default(&ao);
    ao.op = COHORT_REDUCE_AVERAGE;
    CHECK(cohort_allreduce(t->rt, "trainer/final_loss", &x, &x, &ao), "averaging the loss");
  }
  cohort_eval_result_t ev = {.struct_size = sizeof ev};
  if (want_eval) CHECK(cohort_model_evaluate(t->model, t->eval, 0, &ev), "evaluating");

  if (t->rank == 0) {
    printf("----------------------------------------------------------------\n");
    printf("images/sec: %.1f +/- %.1f (jitter = %.1f)\n", rates.mean, rates.std_error, rates.jitter);
    printf("total images/sec: %.2f\n", rates.mean);
    if (get_bool(t->cfg, "profile")) print_profile(t);
    printf("----------------------------------------------------------------\n");
    if (want_eval)
      printf("Accuracy @ 1 = %.4f Accuracy @ 5 = %.4f [%lld examples], loss %.4f\n", ev.top1, ev.top5,
             (long long)ev.samples, ev.loss);
    if (get_bool(t->cfg, "json")) {
      cohort_run_summary_t rs = {.struct_size = sizeof rs};
      rs.model = model_name;
      rs.ranks = t->size;
      rs.local_ranks = t->local_size;
      rs.device = device;
      rs.precision = precision;
      rs.data = data_dir[0] ? data_dir : "synthetic";
      rs.batch_per_rank = batch;
      rs.global_batch = batch * t->size;
      rs.steps = step;
      rs.warmup_steps = warmup;
      rs.images_per_sec = rates;
      rs.epochs = spe > 0 ? (double)step / (double)spe : 0;
      rs.loss = mean_loss;
      rs.has_top1 = want_eval;
      rs.top1 = ev.top1;
      rs.top5 = ev.top5;
      rs.wall_s = now_s() - wall_start;
      size_t needed = 0;
      cohort_run_summary_json(&rs, NULL, 0, &needed);
      char* line = malloc(needed);
      if (line && cohort_run_summary_json(&rs, line, needed, NULL) == COHORT_OK) printf("%s\n", line);
      free(line);
    }
    fflush(stdout);
  }
  return 0;
}

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
  printf(" (--lr is for --base_batch_size images).\n\n%s", cohort_options_help(NULL));
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
  cohort_metrics_destroy(t.metrics);
  cohort_pipeline_destroy(t.eval);
  cohort_pipeline_destroy(t.train);
  cohort_optimizer_destroy(t.opt);
  cohort_model_destroy(t.model);
  cohort_runtime_destroy(t.rt);
  cohort_config_destroy(t.cfg);
  free(t.model_name);
  free(t.precision);
  free(t.data_dir);
  free(t.data_format);
  free(t.progress);
  free(t.checkpoint_dir);
  free(rest);
  return rc;
}
