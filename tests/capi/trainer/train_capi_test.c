#define _POSIX_C_SOURCE 200809L
/* The training part of the C API on one rank: optimizer, training step, evaluation,
 * checkpoints, metrics and the run summary, every error path included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cohort/cohort.h>

static cohort_runtime_t* g_rt = NULL;

static void assert_error(cohort_status_t s, cohort_status_t expected, const char* fn, const char* fragment) {
  assert_int_equal(s, expected);
  const char* msg = cohort_last_error();
  if (strncmp(msg, fn, strlen(fn)) != 0 || !strstr(msg, fragment)) fail_msg("unexpected error text: %s", msg);
}

static cohort_config_t* config(void) {
  cohort_config_t* cfg = NULL;
  assert_int_equal(cohort_config_create(&cfg), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "optimizer", "sgd"), COHORT_OK);
  assert_int_equal(cohort_config_set_float(cfg, "lr", 0.5), COHORT_OK);
  assert_int_equal(cohort_config_set_float(cfg, "weight_decay", 0), COHORT_OK);
  assert_int_equal(cohort_config_set_int(cfg, "compute_threads", 1), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "model", "tiny"), COHORT_OK);
  return cfg;
}

static cohort_model_t* model(const cohort_config_t* cfg) {
  const int64_t in[1] = {4};
  cohort_model_t* m = NULL;
  assert_int_equal(cohort_model_create_custom(g_rt, cfg, in, 1, &m), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "dense", "fc", NULL, 0, "out=3", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL), COHORT_OK);
  return m;
}

typedef struct {
  float x[8 * 4];
  int32_t y[8];
  int64_t xs[2], ys[1];
  cohort_batch_t b;
} batch_t;

static void make_batch(batch_t* bt, int64_t rows, int64_t valid) {
  for (int i = 0; i < rows * 4; ++i) bt->x[i] = (float)sin(i * 0.7);
  for (int i = 0; i < rows; ++i) bt->y[i] = i % 3;
  bt->xs[0] = rows;
  bt->xs[1] = 4;
  bt->ys[0] = rows;
  memset(&bt->b, 0, sizeof bt->b);
  bt->b.struct_size = sizeof bt->b;
  bt->b.images =
      (DLTensor){.data = bt->x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = bt->xs};
  bt->b.labels = (DLTensor){.data = bt->y, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1}, .shape = bt->ys};
  bt->b.valid = valid;
}

static void optimizer_errors(void** state) {
  (void)state;
  cohort_config_t* cfg = config();
  cohort_model_t* m = model(cfg);
  cohort_optimizer_t* opt = (cohort_optimizer_t*)1;
  assert_error(cohort_optimizer_create(NULL, cfg, &opt), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_create",
               "model");
  assert_null(opt);
  assert_error(cohort_optimizer_create(m, cfg, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_create", "out");
  assert_int_equal(cohort_config_set(cfg, "precision", "fp16"), COHORT_OK);
  assert_error(cohort_optimizer_create(m, cfg, &opt), COHORT_ERR_UNSUPPORTED, "cohort_optimizer_create",
               "--precision=f32");
  assert_int_equal(cohort_config_set(cfg, "precision", "f32"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "lr_schedule", "cosine"), COHORT_OK);
  assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
  assert_error(cohort_optimizer_set_run_length(opt, 10, 0), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_set_run_length", "total");
  assert_error(cohort_optimizer_set_run_length(opt, -1, 5), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_set_run_length", "-1");
  assert_int_equal(cohort_optimizer_set_run_length(opt, 10, 100), COHORT_OK);
  double lr = 0;
  int64_t steps = -1;
  assert_int_equal(cohort_optimizer_state(opt, &lr, &steps), COHORT_OK);
  assert_true(fabs(lr - 0.5) < 1e-12 && steps == 0);
  assert_error(cohort_optimizer_broadcast(opt, 1), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_broadcast", "root");
  assert_error(cohort_optimizer_broadcast(NULL, 0), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_broadcast",
               "optimizer");
  assert_int_equal(cohort_optimizer_check_consistency(opt), COHORT_OK);
  cohort_optimizer_destroy(opt);
  cohort_optimizer_destroy(NULL);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

/* variable_update on one rank: each mode's roles, a parameter server that is also the
 * worker (messages to itself) learning as replicated does, and the modes' errors. */
static void variable_update_modes(void** state) {
  (void)state;
  const char* modes[] = {"replicated", "parameter_server", "async_parameter_server", "independent"};
  float after[4] = {0};
  for (int k = 0; k < 4; ++k) {
    cohort_config_t* cfg = config();
    assert_int_equal(cohort_config_set(cfg, "variable_update", modes[k]), COHORT_OK);
    cohort_model_t* m = model(cfg);
    cohort_optimizer_t* opt = NULL;
    assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
    cohort_optimizer_info_t info = {.struct_size = sizeof info};
    assert_int_equal(cohort_optimizer_info(opt, &info), COHORT_OK);
    assert_string_equal(info.variable_update, modes[k]);
    const int ps = k == 1 || k == 2;
    assert_true(info.worker == 1 && info.server == ps && info.workers == 1 && info.servers == ps &&
                info.worker_index == 0 && info.updates == 0);
    assert_int_equal(info.lockstep, k < 2); /* replicated and parameter_server */
    batch_t bt;
    make_batch(&bt, 8, 8);
    for (int step = 0; step < 3; ++step) assert_int_equal(cohort_optimizer_train_step(opt, &bt.b, NULL), COHORT_OK);
    assert_int_equal(cohort_optimizer_info(opt, &info), COHORT_OK);
    assert_true(info.updates == (ps ? 3 : 0) && info.staleness_max == 0 && info.staleness_sum == 0);
    DLTensor w;
    assert_int_equal(cohort_model_param(m, 0, NULL, &w, NULL), COHORT_OK);
    after[k] = ((const float*)w.data)[0];
    assert_int_equal(cohort_optimizer_check_consistency(opt), COHORT_OK);
    /* Only a dedicated server may step without a batch. */
    assert_error(cohort_optimizer_train_step(opt, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
                 "cohort_optimizer_train_step", "batch");
    cohort_optimizer_destroy(opt);
    cohort_model_destroy(m);
    cohort_config_destroy(cfg);
  }
  /* One rank: every mode takes the same steps. */
  for (int k = 1; k < 4; ++k) assert_true(after[k] == after[0]);

  cohort_config_t* cfg = config();
  cohort_model_t* m = model(cfg);
  cohort_optimizer_t* opt = NULL;
  assert_int_equal(cohort_config_set(cfg, "variable_update", "parameter_server"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "ps_dedicated", "true"), COHORT_OK);
  assert_error(cohort_optimizer_create(m, cfg, &opt), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_create",
               "leaves no rank to compute");
  assert_int_equal(cohort_config_set(cfg, "ps_dedicated", "false"), COHORT_OK);
  assert_int_equal(cohort_config_set_int(cfg, "ps_ranks", 2), COHORT_OK);
  assert_error(cohort_optimizer_create(m, cfg, &opt), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_create",
               "ps_ranks=2 is more than");
  assert_int_equal(cohort_config_set_int(cfg, "ps_ranks", 1), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "compression", "f16"), COHORT_OK);
  assert_error(cohort_optimizer_create(m, cfg, &opt), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_create",
               "compression=f16");
  assert_error(cohort_config_set(cfg, "variable_update", "distributed_all_reduce"), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_config_set", "replicated|parameter_server|async_parameter_server|independent");
  cohort_optimizer_info_t info = {.struct_size = sizeof info};
  assert_error(cohort_optimizer_info(NULL, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_info", "optimizer");
  assert_int_equal(cohort_config_set(cfg, "compression", "none"), COHORT_OK);
  assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
  assert_error(cohort_optimizer_info(opt, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_info", "info");
  info.struct_size = 4;
  assert_error(cohort_optimizer_info(opt, &info), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_info", "struct_size");
  /* One field smaller (an older header): accepted, and staleness_max, beyond it, untouched. */
  info.struct_size = offsetof(cohort_optimizer_info_t, staleness_max);
  info.staleness_max = -7;
  assert_int_equal(cohort_optimizer_info(opt, &info), COHORT_OK);
  assert_true(info.server == 1 && info.staleness_max == -7);
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

static void train_step_learns_and_checks(void** state) {
  (void)state;
  cohort_config_t* cfg = config();
  cohort_model_t* m = model(cfg);
  cohort_optimizer_t* opt = NULL;
  assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  cohort_train_stats_t st = {.struct_size = sizeof st};
  double first = 0;
  for (int i = 0; i < 20; ++i) {
    assert_int_equal(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_OK);
    if (i == 0) first = st.loss;
    assert_true(st.updated == 1 && st.step == i + 1 && st.valid == 6 && st.images == 6);
    assert_true(st.total_s >= st.compute_s && st.compute_s >= 0 && st.comm_wait_s >= 0);
  }
  assert_true(st.loss < first);
  /* Padding rows do not count: a batch with 2 valid rows of 6 gives the loss of those 2. */
  make_batch(bt, 6, 2);
  assert_int_equal(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_OK);
  assert_int_equal(st.valid, 2);
  make_batch(bt, 6, 0);
  assert_int_equal(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_OK);
  assert_true(st.loss == 0 && st.updated == 1);
  make_batch(bt, 6, 7);
  assert_error(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_train_step", "valid");
  make_batch(bt, 6, 6);
  assert_error(cohort_optimizer_train_step(opt, NULL, &st), COHORT_ERR_INVALID_ARGUMENT, "cohort_optimizer_train_step",
               "batch");
  cohort_train_stats_t bad = {.struct_size = 1};
  assert_error(cohort_optimizer_train_step(opt, &bt->b, &bad), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_train_step", "struct_size");
  /* Structs one field smaller than today's (an older header) are accepted; the stats
   * field they lack is not written, the batch field they lack is not read. */
  cohort_train_stats_t older = {.struct_size = offsetof(cohort_train_stats_t, total_s), .total_s = -7};
  bt->b.struct_size = offsetof(cohort_batch_t, step);
  bt->b.step = -99;
  assert_int_equal(cohort_optimizer_train_step(opt, &bt->b, &older), COHORT_OK);
  assert_true(older.total_s == -7 && older.valid == 6 && older.step == st.step + 1);
  /* Too small (no field) or cutting a DLTensor in two: refused. */
  bt->b.struct_size = 8;
  assert_error(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_train_step", "batch->struct_size is 8");
  bt->b.struct_size = offsetof(cohort_batch_t, labels) + 8;
  assert_error(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_train_step", "not the size of any version of cohort_batch_t");
  make_batch(bt, 6, 6);
  bt->xs[1] = 5;
  assert_error(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_train_step", "shape");
  free(bt);
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

/* The deprecated training step stays for one minor version: it takes the model too,
 * which must be the optimizer's. */
#if defined(__GNUC__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
static void deprecated_model_train_step(void** state) {
  (void)state;
  cohort_config_t* cfg = config();
  cohort_model_t* m = model(cfg);
  cohort_model_t* other = model(cfg);
  cohort_optimizer_t* opt = NULL;
  assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  cohort_train_stats_t st = {.struct_size = sizeof st};
  assert_int_equal(cohort_model_train_step(m, opt, &bt->b, &st), COHORT_OK);
  assert_int_equal(st.step, 1);
  assert_error(cohort_model_train_step(other, opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT, "cohort_model_train_step",
               "another model");
  assert_error(cohort_model_train_step(NULL, opt, &bt->b, &st), COHORT_ERR_INVALID_ARGUMENT, "cohort_model_train_step",
               "model is NULL");
  free(bt);
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(other);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}
#if defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif

/* The optimizer keeps its model alive: the model's handle may go first, the optimizer
 * still trains it and then frees it (under ASan, any use after free fails this). */
static void optimizer_keeps_its_model_alive(void** state) {
  (void)state;
  cohort_config_t* cfg = config();
  cohort_model_t* m = model(cfg);
  cohort_optimizer_t* opt = NULL;
  assert_int_equal(cohort_optimizer_create(m, cfg, &opt), COHORT_OK);
  cohort_model_destroy(m);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  cohort_train_stats_t st = {.struct_size = sizeof st};
  for (int i = 0; i < 3; ++i) assert_int_equal(cohort_optimizer_train_step(opt, &bt->b, &st), COHORT_OK);
  assert_int_equal(st.step, 3);
  free(bt);
  cohort_optimizer_destroy(opt);
  cohort_config_destroy(cfg);
}

static void remove_dir(const char* dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Copies every parameter value of a model (checkpoints hold these f32 masters). */
static float* param_values(cohort_model_t* m, size_t* count) {
  size_t n = 0, total = 0;
  assert_int_equal(cohort_model_num_tensors(m, &n), COHORT_OK);
  float* out = NULL;
  for (size_t i = 0; i < n; ++i) {
    DLTensor v;
    assert_int_equal(cohort_model_param(m, i, NULL, &v, NULL), COHORT_OK);
    assert_true(v.dtype.code == kDLFloat && v.dtype.bits == 32);
    int64_t k = 1;
    for (int d = 0; d < v.ndim; ++d) k *= v.shape[d];
    out = realloc(out, (total + (size_t)k) * sizeof *out);
    memcpy(out + total, v.data, (size_t)k * sizeof *out);
    total += (size_t)k;
  }
  *count = total;
  return out;
}

/* A checkpoint written by a bf16 run resumes in f32 and the other way round: both hold
 * the f32 master weights and optimizer state. */
static void checkpoint_resumes_at_another_precision(void** state) {
  (void)state;
  char dir[] = "/tmp/cohort_train_capi_XXXXXX";
  assert_non_null(mkdtemp(dir));
  cohort_config_t* c16 = config();
  assert_int_equal(cohort_config_set(c16, "optimizer", "momentum"), COHORT_OK);
  assert_int_equal(cohort_config_set(c16, "precision", "bf16"), COHORT_OK);
  cohort_config_t* c32 = config();
  assert_int_equal(cohort_config_set(c32, "optimizer", "momentum"), COHORT_OK);
  cohort_model_t* a = model(c16);
  cohort_optimizer_t* oa = NULL;
  const cohort_status_t s = cohort_optimizer_create(a, c16, &oa);
  if (s == COHORT_ERR_UNSUPPORTED) { /* a CPU without bf16 instructions */
    cohort_model_destroy(a);
    cohort_config_destroy(c16);
    cohort_config_destroy(c32);
    rmdir(dir);
    skip();
  }
  assert_int_equal(s, COHORT_OK);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  cohort_train_stats_t st = {.struct_size = sizeof st};
  for (int i = 0; i < 3; ++i) assert_int_equal(cohort_optimizer_train_step(oa, &bt->b, &st), COHORT_OK);
  cohort_checkpoint_info_t info = {.struct_size = sizeof info};
  assert_int_equal(cohort_optimizer_save_checkpoint(oa, dir, &info), COHORT_OK);

  /* bf16 → f32: the same master weights, and training goes on from step 3. */
  cohort_model_t* b = model(c32);
  cohort_optimizer_t* ob = NULL;
  assert_int_equal(cohort_optimizer_create(b, c32, &ob), COHORT_OK);
  int found = 0;
  cohort_checkpoint_info_t got = {.struct_size = sizeof got};
  assert_int_equal(cohort_optimizer_load_checkpoint(ob, dir, &got, &found), COHORT_OK);
  assert_true(found == 1 && got.step == 3);
  size_t na = 0, nb = 0;
  float* wa = param_values(a, &na);
  float* wb = param_values(b, &nb);
  assert_true(na == nb && memcmp(wa, wb, na * sizeof *wa) == 0);
  cohort_train_stats_t sa = {.struct_size = sizeof sa}, sb = {.struct_size = sizeof sb};
  assert_int_equal(cohort_optimizer_train_step(oa, &bt->b, &sa), COHORT_OK);
  assert_int_equal(cohort_optimizer_train_step(ob, &bt->b, &sb), COHORT_OK);
  assert_true(sa.step == 4 && sb.step == 4);
  assert_true(fabs(sa.loss - sb.loss) < 0.02 * fabs(sb.loss) + 1e-3); /* bf16 vs f32 arithmetic */

  /* f32 → bf16. */
  assert_int_equal(cohort_optimizer_save_checkpoint(ob, dir, &info), COHORT_OK);
  cohort_model_t* c = model(c16);
  cohort_optimizer_t* oc = NULL;
  assert_int_equal(cohort_optimizer_create(c, c16, &oc), COHORT_OK);
  assert_int_equal(cohort_optimizer_load_checkpoint(oc, dir, &got, &found), COHORT_OK);
  assert_true(found == 1 && got.step == 4);
  free(wb);
  size_t nc = 0;
  wb = param_values(b, &nb);
  float* wc = param_values(c, &nc);
  assert_true(nb == nc && memcmp(wb, wc, nb * sizeof *wb) == 0);
  assert_int_equal(cohort_optimizer_train_step(oc, &bt->b, &st), COHORT_OK);
  assert_int_equal(st.step, 5);
  free(wa);
  free(wb);
  free(wc);
  free(bt);
  cohort_optimizer_destroy(oa);
  cohort_optimizer_destroy(ob);
  cohort_optimizer_destroy(oc);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  cohort_model_destroy(c);
  cohort_config_destroy(c16);
  cohort_config_destroy(c32);
  remove_dir(dir);
}

static void checkpoint_round_trip_and_errors(void** state) {
  (void)state;
  char dir[] = "/tmp/cohort_train_capi_XXXXXX";
  assert_non_null(mkdtemp(dir));
  cohort_config_t* cfg = config();
  assert_int_equal(cohort_config_set(cfg, "optimizer", "momentum"), COHORT_OK);
  cohort_model_t* a = model(cfg);
  cohort_model_t* b = model(cfg);
  cohort_optimizer_t *oa = NULL, *ob = NULL;
  assert_int_equal(cohort_optimizer_create(a, cfg, &oa), COHORT_OK);
  assert_int_equal(cohort_optimizer_create(b, cfg, &ob), COHORT_OK);
  cohort_checkpoint_info_t info = {.struct_size = sizeof info};
  int found = 7;
  assert_int_equal(cohort_optimizer_load_checkpoint(ob, dir, &info, &found), COHORT_OK);
  assert_int_equal(found, 0);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  cohort_train_stats_t st = {.struct_size = sizeof st};
  for (int i = 0; i < 3; ++i) assert_int_equal(cohort_optimizer_train_step(oa, &bt->b, &st), COHORT_OK);
  info.epoch = 1;
  info.pipeline_epoch = 2;
  info.pipeline_step = 5;
  assert_int_equal(cohort_optimizer_save_checkpoint(oa, dir, &info), COHORT_OK);
  cohort_checkpoint_info_t got = {.struct_size = sizeof got};
  assert_int_equal(cohort_optimizer_load_checkpoint(ob, dir, &got, &found), COHORT_OK);
  assert_true(found == 1 && got.step == 3 && got.epoch == 1 && got.pipeline_epoch == 2 && got.pipeline_step == 5);
  assert_int_equal(got.ranks, 1); /* the rank count it was saved at */
  cohort_train_stats_t sa = {.struct_size = sizeof sa}, sb = {.struct_size = sizeof sb};
  assert_int_equal(cohort_optimizer_train_step(oa, &bt->b, &sa), COHORT_OK);
  assert_int_equal(cohort_optimizer_train_step(ob, &bt->b, &sb), COHORT_OK);
  assert_true(sa.loss == sb.loss && sa.step == 4 && sb.step == 4);
  /* An older, smaller info struct: the field it lacks is saved as 0 when saving, and
   * left alone when loading. */
  cohort_checkpoint_info_t older = {.struct_size = offsetof(cohort_checkpoint_info_t, pipeline_step)};
  older.epoch = 4;
  older.pipeline_epoch = 6;
  older.pipeline_step = 77; /* beyond its size: not read */
  assert_int_equal(cohort_optimizer_save_checkpoint(oa, dir, &older), COHORT_OK);
  older.pipeline_step = -5;
  assert_int_equal(cohort_optimizer_load_checkpoint(ob, dir, &older, &found), COHORT_OK);
  assert_true(found == 1 && older.epoch == 4 && older.pipeline_epoch == 6 && older.pipeline_step == -5);
  assert_int_equal(cohort_optimizer_load_checkpoint(ob, dir, &got, &found), COHORT_OK);
  assert_true(got.pipeline_step == 0 && got.epoch == 4);
  /* A directory path through a regular file: the save fails, naming why. */
  char file[600];
  snprintf(file, sizeof file, "%s/plain_file", dir);
  FILE* pf = fopen(file, "w");
  assert_non_null(pf);
  fclose(pf);
  strcat(file, "/ck");
  assert_error(cohort_optimizer_save_checkpoint(oa, file, &info), COHORT_ERR_IO, "cohort_optimizer_save_checkpoint",
               "rank 0 could not save a checkpoint in");
  assert_non_null(strstr(cohort_last_error(), "Not a directory"));
  /* Errors: NULL arguments, a corrupt file, another optimizer kind. */
  assert_error(cohort_optimizer_save_checkpoint(oa, NULL, &info), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_save_checkpoint", "dir");
  assert_error(cohort_optimizer_load_checkpoint(ob, dir, &got, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_load_checkpoint", "found");
  cohort_config_t* adam = config();
  assert_int_equal(cohort_config_set(adam, "optimizer", "adam"), COHORT_OK);
  cohort_model_t* c = model(adam);
  cohort_optimizer_t* oc = NULL;
  assert_int_equal(cohort_optimizer_create(c, adam, &oc), COHORT_OK);
  assert_error(cohort_optimizer_load_checkpoint(oc, dir, &got, &found), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_optimizer_load_checkpoint", "momentum");
  char path[512], name[256] = {0};
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE* f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(name, sizeof name, f));
  fclose(f);
  name[strcspn(name, "\n")] = '\0';
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, 60, SEEK_SET);
  fputc(0x5a, f);
  fputc(0xa5, f);
  fclose(f);
  assert_error(cohort_optimizer_load_checkpoint(ob, dir, &got, &found), COHORT_ERR_CORRUPT_DATA,
               "cohort_optimizer_load_checkpoint", name);
  cohort_optimizer_destroy(oc);
  cohort_model_destroy(c);
  cohort_config_destroy(adam);
  free(bt);
  cohort_optimizer_destroy(oa);
  cohort_optimizer_destroy(ob);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  cohort_config_destroy(cfg);
  remove_dir(dir);
}

static void metrics_and_summary(void** state) {
  (void)state;
  cohort_metrics_t* m = NULL;
  assert_error(cohort_metrics_create(-1, &m), COHORT_ERR_INVALID_ARGUMENT, "cohort_metrics_create", "warmup_steps");
  assert_int_equal(cohort_metrics_create(1, &m), COHORT_OK);
  assert_int_equal(cohort_metrics_record(m, 10.0, 0, 0, 100), COHORT_OK); /* warm-up: not measured */
  assert_int_equal(cohort_metrics_record(m, 1.0, 0.25, 0.25, 100), COHORT_OK);
  assert_int_equal(cohort_metrics_record(m, 1.0, 0.25, 0.25, 100), COHORT_OK);
  assert_error(cohort_metrics_record(m, -1.0, 0, 0, 1), COHORT_ERR_INVALID_ARGUMENT, "cohort_metrics_record",
               "seconds");
  cohort_rate_summary_t r = {.struct_size = sizeof r};
  assert_int_equal(cohort_metrics_summary(m, &r), COHORT_OK);
  assert_true(r.count == 2 && fabs(r.mean - 100) < 1e-9 && r.std_error == 0 && r.jitter == 0);
  assert_true(fabs(r.data_wait - 0.25) < 1e-9 && fabs(r.comm_exposed - 0.25) < 1e-9 && fabs(r.compute - 0.5) < 1e-9);
  cohort_rate_summary_t small = {.struct_size = 0};
  assert_error(cohort_metrics_summary(m, &small), COHORT_ERR_INVALID_ARGUMENT, "cohort_metrics_summary", "struct_size");
  cohort_rate_summary_t older = {.struct_size = offsetof(cohort_rate_summary_t, compute), .compute = -3};
  assert_int_equal(cohort_metrics_summary(m, &older), COHORT_OK);
  assert_true(older.count == 2 && older.compute == -3);
  cohort_metrics_destroy(m);
  cohort_metrics_destroy(NULL);

  cohort_run_summary_t s = {.struct_size = sizeof s};
  s.model = "resnet50";
  s.ranks = 4;
  s.local_ranks = 4;
  s.batch_per_rank = 64;
  s.global_batch = 256;
  s.steps = 100;
  s.warmup_steps = 10;
  s.images_per_sec = r;
  s.loss = NAN;
  s.extra_json = "\"note\": 1";
  char buf[2048];
  size_t needed = 0;
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, &needed), COHORT_OK);
  assert_int_equal(needed, strlen(buf) + 1);
  const char* want =
      "{\"schema\": \"cohort.run/1\", \"model\": \"resnet50\", \"ranks\": 4, \"local_ranks\": 4, \"device\": "
      "\"cpu\", \"precision\": \"f32\", \"data\": \"synthetic\", \"batch_per_rank\": 64, \"global_batch\": 256, "
      "\"steps\": 100, \"warmup_steps\": 10, \"images_per_sec\": {";
  if (strncmp(buf, want, strlen(want)) != 0) fail_msg("summary: %s", buf);
  assert_non_null(strstr(buf, "\"loss\": null, \"top1\": null, \"top5\": null, \"wall_s\": 0, \"note\": 1}"));
  assert_error(cohort_run_summary_json(&s, buf, 10, &needed), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_summary_json",
               "too small");
  /* extra_json must be JSON members, and none may repeat a key written before it. */
  s.extra_json = "\"note\": 1,";
  assert_error(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_run_summary_json", "summary->extra_json: expected a string at byte 10");
  s.extra_json = "\"loss\": 1";
  assert_error(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_run_summary_json", "extra field 'loss' would repeat a field of the summary");
  s.extra_json = "\"note\": 1";
  s.struct_size = 8;
  assert_error(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_run_summary_json", "struct_size");
  /* One field smaller (an older header): accepted, and extra_json, beyond it, unread. */
  s.struct_size = offsetof(cohort_run_summary_t, extra_json);
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_OK);
  assert_null(strstr(buf, "note"));
  assert_non_null(strstr(buf, "\"wall_s\": 0}"));
  /* The variable_update mode, and the staleness of an asynchronous parameter server. */
  s.struct_size = sizeof s;
  s.extra_json = NULL;
  s.variable_update = "async_parameter_server";
  s.workers = 3;
  s.servers = 1;
  s.has_staleness = 1;
  s.staleness_mean = 1.5;
  s.staleness_max = 4;
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_OK);
  assert_non_null(strstr(buf,
                         "\"wall_s\": 0, \"variable_update\": \"async_parameter_server\", \"workers\": 3, "
                         "\"servers\": 1, \"staleness\": {\"mean\": 1.5, \"max\": 4}}"));
  /* Where the ranks' time went: the threads' CPU per step, and the spread of compute. */
  s.variable_update = NULL;
  cohort_thread_cpu_t threads = {.struct_size = sizeof threads,
                                 .compute = {0.1, 0.125},
                                 .engine = {0.25, 0.5},
                                 .other = {0, 0.5},
                                 .has_input = 1,
                                 .readers = {1, 2},
                                 .decoders = {3, 4},
                                 .compute_spread_median = 0.25,
                                 .compute_spread_p90 = 0.5};
  s.threads = &threads;
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_OK);
  const char* accounting =
      "\"wall_s\": 0, \"threads\": {\"compute\": {\"median\": 0.1, \"max\": 0.125}, \"engine\": {\"median\": "
      "0.25, \"max\": 0.5}, \"other\": {\"median\": 0, \"max\": 0.5}, \"readers\": {\"median\": 1, \"max\": 2}, "
      "\"decoders\": {\"median\": 3, \"max\": 4}}, \"compute_spread_s\": {\"median\": 0.25, \"p90\": 0.5}}";
  if (!strstr(buf, accounting)) fail_msg("summary: %s", buf);
  threads.has_input = 0; /* synthetic data: no pipeline threads */
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_OK);
  assert_null(strstr(buf, "readers"));
  assert_non_null(strstr(buf, "\"other\": {\"median\": 0, \"max\": 0.5}}, \"compute_spread_s\""));
  threads.struct_size = 4;
  assert_error(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_run_summary_json", "summary->threads->struct_size");
  /* An older summary struct, without the field, writes none of it. */
  s.struct_size = offsetof(cohort_run_summary_t, threads);
  assert_int_equal(cohort_run_summary_json(&s, buf, sizeof buf, NULL), COHORT_OK);
  assert_null(strstr(buf, "threads"));
}

/* The run log: files where the options say, none otherwise, and every error path. */
static void run_log(void** state) {
  (void)state;
  cohort_run_log_t* log = (cohort_run_log_t*)1;
  assert_error(cohort_run_log_create(NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_create", "out");
  assert_int_equal(cohort_run_log_create(NULL, NULL, &log), COHORT_OK); /* no file named: records nothing */
  cohort_step_record_t rec = {.struct_size = sizeof rec, .step = 1, .loss = 2.5, .lr = 0.1, .step_s = 0.5, .images = 8};
  assert_int_equal(cohort_run_log_step(log, &rec), COHORT_OK);
  cohort_run_log_destroy(log);
  cohort_run_log_destroy(NULL);

  char dir[] = "/tmp/cohort_run_log_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char tb[600], csv[600];
  snprintf(tb, sizeof tb, "%s/tb", dir);
  snprintf(csv, sizeof csv, "%s/steps.csv", dir);
  cohort_config_t* cfg = config();
  assert_int_equal(cohort_config_set(cfg, "tensorboard_dir", tb), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "log_csv", csv), COHORT_OK);
  assert_int_equal(cohort_run_log_create(g_rt, cfg, &log), COHORT_OK);
  assert_int_equal(cohort_run_log_step(log, &rec), COHORT_OK);
  cohort_eval_result_t ev = {.struct_size = sizeof ev, .samples = 10, .top1 = 0.5, .top5 = 0.9, .loss = 1.0};
  assert_int_equal(cohort_run_log_eval(log, 1, &ev), COHORT_OK);
  assert_error(cohort_run_log_step(NULL, &rec), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_step", "log");
  assert_error(cohort_run_log_step(log, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_step", "record");
  cohort_step_record_t bad = {.struct_size = 3};
  assert_error(cohort_run_log_step(log, &bad), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_step", "struct_size");
  assert_error(cohort_run_log_eval(log, 1, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_eval", "result");
  assert_error(cohort_run_log_eval(NULL, 1, &ev), COHORT_ERR_INVALID_ARGUMENT, "cohort_run_log_eval", "log");
  cohort_run_log_destroy(log);
  FILE* f = fopen(csv, "r");
  assert_non_null(f);
  char line[200];
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "step,epoch,loss,lr,step_time_s,data_wait_s,comm_exposed_s,images_per_sec\n");
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "1,0,2.5,0.1,0.5,0,0,16\n");
  fclose(f);

  /* A directory that cannot be made, and a CSV in a directory that does not exist. */
  assert_int_equal(cohort_config_set(cfg, "tensorboard_dir", "/proc/cohort/tb"), COHORT_OK);
  assert_error(cohort_run_log_create(g_rt, cfg, &log), COHORT_ERR_IO, "cohort_run_log_create", "/proc/cohort/tb");
  assert_null(log);
  assert_int_equal(cohort_config_set(cfg, "tensorboard_dir", ""), COHORT_OK);
  snprintf(csv, sizeof csv, "%s/none/steps.csv", dir);
  assert_int_equal(cohort_config_set(cfg, "log_csv", csv), COHORT_OK);
  assert_error(cohort_run_log_create(g_rt, cfg, &log), COHORT_ERR_IO, "cohort_run_log_create", csv);
  cohort_config_destroy(cfg);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void io_shape(void** state) {
  (void)state;
  cohort_config_t* cfg = config();
  assert_int_equal(cohort_config_unset(cfg, "model"), COHORT_OK);
  cohort_model_t* m = NULL;
  assert_int_equal(cohort_model_create(g_rt, "mnist_cnn", cfg, &m), COHORT_OK);
  int64_t c = 0, h = 0, w = 0, k = 0;
  assert_int_equal(cohort_model_io_shape(m, &c, &h, &w, &k), COHORT_OK);
  assert_true(c == 1 && h == 28 && w == 28 && k == 10);
  assert_error(cohort_model_io_shape(NULL, &c, NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_model_io_shape",
               "model");
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

static void write_be32(FILE* f, uint32_t v) {
  unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
  assert_int_equal(fwrite(b, 1, 4, f), 4);
}

/* An MNIST-format (IDX) dataset of 10 one-channel 4x4 images labelled i % 3. */
static void write_idx_dataset(const char* dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  write_be32(f, 0x803);
  write_be32(f, 10);
  write_be32(f, 4);
  write_be32(f, 4);
  for (int i = 0; i < 160; ++i) fputc(i % 251, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  write_be32(f, 0x801);
  write_be32(f, 10);
  for (int i = 0; i < 10; ++i) fputc(i % 3, f);
  fclose(f);
}

static cohort_model_t* image_model(const cohort_config_t* cfg, int64_t channels) {
  const int64_t in[3] = {channels, 4, 4};
  cohort_model_t* m = NULL;
  assert_int_equal(cohort_model_create_custom(g_rt, cfg, in, 3, &m), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "flatten", "flat", NULL, 0, "", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "dense", "fc", NULL, 0, "out=3", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL), COHORT_OK);
  return m;
}

/* A pipeline made for a model takes the model's image size, channels and classes; an
 * option or a dataset that disagrees is an error naming both. */
static void pipeline_for_model_and_evaluation(void** state) {
  (void)state;
  char dir[] = "/tmp/cohort_for_model_XXXXXX";
  assert_non_null(mkdtemp(dir));
  write_idx_dataset(dir);
  cohort_config_t* cfg = config();
  assert_int_equal(cohort_config_set(cfg, "data_dir", dir), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "batch_size", "4"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "augment", "none"), COHORT_OK);
  cohort_model_t* m = image_model(cfg, 1);
  cohort_pipeline_t* p = NULL;
  assert_int_equal(cohort_pipeline_create_for_model(m, cfg, &p), COHORT_OK);
  cohort_pipeline_info_t info = {.struct_size = sizeof info};
  assert_int_equal(cohort_pipeline_info(p, &info), COHORT_OK);
  assert_true(info.channels == 1 && info.height == 4 && info.width == 4 && info.num_classes <= 3);
  /* Evaluation over it; an older result struct (one field smaller) keeps its last field. */
  cohort_eval_result_t ev = {.struct_size = offsetof(cohort_eval_result_t, loss), .loss = -1};
  assert_int_equal(cohort_model_evaluate(m, p, 2, &ev), COHORT_OK);
  assert_true(ev.samples == 8 && ev.top1 >= 0 && ev.top1 <= 1 && ev.top5 == 1 && ev.loss == -1);
  cohort_eval_result_t full = {.struct_size = sizeof full};
  assert_int_equal(cohort_model_evaluate(m, p, 0, &full), COHORT_OK);
  assert_true(full.samples == 10 && full.loss > 0);
  cohort_pipeline_destroy(p);
  /* An explicit image size that is not the model's. */
  assert_int_equal(cohort_config_set(cfg, "image_size", "8"), COHORT_OK);
  assert_error(cohort_pipeline_create_for_model(m, cfg, &p), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_pipeline_create_for_model", "image_size=8 disagrees with model 'tiny'");
  assert_null(p);
  assert_int_equal(cohort_config_unset(cfg, "image_size"), COHORT_OK);
  /* A model that takes three channels: the one-channel dataset does not fit. */
  cohort_model_t* rgb = image_model(cfg, 3);
  assert_error(cohort_pipeline_create_for_model(rgb, cfg, &p), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_pipeline_create_for_model", "has 1-channel images, but model 'tiny' takes 3 channels");
  assert_error(cohort_pipeline_create_for_model(NULL, cfg, &p), COHORT_ERR_INVALID_ARGUMENT,
               "cohort_pipeline_create_for_model", "model is NULL");
  /* A zoo model and a `model` option that names another one. */
  cohort_model_t* z = NULL;
  assert_error(cohort_model_create(g_rt, "mnist_cnn", cfg, &z), COHORT_ERR_INVALID_ARGUMENT, "cohort_model_create",
               "the model name 'mnist_cnn' disagrees with the option model=tiny");
  assert_null(z);
  cohort_model_destroy(rgb);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Two optimizers on one runtime name their collectives apart (the timeline shows them). */
static void two_optimizers_on_one_runtime(void** state) {
  (void)state;
  char path[] = "/tmp/cohort_two_optimizers_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  cohort_config_t* cfg = config();
  assert_int_equal(cohort_config_set(cfg, "timeline_file", path), COHORT_OK);
  /* One rank alone exchanges a gradient only where scaling changes it: a predivide factor does. */
  assert_int_equal(cohort_config_set_float(cfg, "gradient_predivide_factor", 2), COHORT_OK);
  cohort_runtime_t* saved = g_rt;
  assert_int_equal(cohort_runtime_create(cfg, &g_rt), COHORT_OK);
  cohort_model_t* a = model(cfg);
  cohort_model_t* b = model(cfg);
  cohort_optimizer_t *oa = NULL, *ob = NULL;
  assert_int_equal(cohort_optimizer_create(a, cfg, &oa), COHORT_OK);
  assert_int_equal(cohort_optimizer_create(b, cfg, &ob), COHORT_OK);
  batch_t* bt = malloc(sizeof *bt);
  make_batch(bt, 6, 6);
  assert_int_equal(cohort_optimizer_train_step(oa, &bt->b, NULL), COHORT_OK);
  assert_int_equal(cohort_optimizer_train_step(ob, &bt->b, NULL), COHORT_OK);
  free(bt);
  cohort_optimizer_destroy(oa);
  cohort_optimizer_destroy(ob);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  cohort_runtime_destroy(g_rt); /* writes the timeline */
  g_rt = saved;
  cohort_config_destroy(cfg);
  FILE* f = fopen(path, "r");
  assert_non_null(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  if (!strstr(text, "\"grad/fc.weight\"") || !strstr(text, "\"grad1/fc.weight\""))
    fail_msg("expected grad/fc.weight and grad1/fc.weight in the timeline");
}

int main(void) {
  if (cohort_runtime_create(NULL, &g_rt) != COHORT_OK) {
    fprintf(stderr, "runtime: %s\n", cohort_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(optimizer_errors),
      cmocka_unit_test(variable_update_modes),
      cmocka_unit_test(train_step_learns_and_checks),
      cmocka_unit_test(deprecated_model_train_step),
      cmocka_unit_test(optimizer_keeps_its_model_alive),
      cmocka_unit_test(checkpoint_round_trip_and_errors),
      cmocka_unit_test(checkpoint_resumes_at_another_precision),
      cmocka_unit_test(metrics_and_summary),
      cmocka_unit_test(run_log),
      cmocka_unit_test(io_shape),
      cmocka_unit_test(pipeline_for_model_and_evaluation),
      cmocka_unit_test(two_optimizers_on_one_runtime),
  };
  const int rc = cmocka_run_group_tests_name("capi_train", tests, NULL, NULL);
  cohort_runtime_destroy(g_rt);
  cohort_finalize();
  return rc;
}
