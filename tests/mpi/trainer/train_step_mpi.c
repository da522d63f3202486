/* The training step through the public C API and the real collective engine, run
 * under mpirun at 2 and 3 ranks:
 *  - N ranks, each on its slice of a global batch, end with the parameters of one
 *    rank training on the combined batch (a model without batch norm or dropout;
 *    batch-norm statistics would be per rank and differ),
 *  - parameters are identical on every rank (consistency check),
 *  - backward_passes_per_step=2 over half batches equals one pass over whole ones,
 *  - a checkpoint saved mid-run and loaded into a fresh model continues the same
 *    curve (bit-exact at np <= 2, 1e-6 relative above),
 *  - evaluation counts each sample of the set once, padding excluded. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

enum { F = 6, H = 8, C = 3, B = 4, STEPS = 4 };

static int g_rank = 0, g_size = 1;

/* The global dataset: sample i of step s. */
static float feature(int64_t s, int64_t i, int f) { return (float)sin(0.37 * (double)(s * 1000 + i * 17 + f)); }
static int32_t label(int64_t s, int64_t i) { return (int32_t)((s * 7 + i * 3) % C); }

static cohort_model_t* make_model(cohort_runtime_t* rt, cohort_config_t* cfg) {
  const int64_t in[1] = {F};
  cohort_model_t* m = NULL;
  MUST(cohort_model_create_custom(rt, cfg, in, 1, &m));
  MUST(cohort_model_add_layer(m, "dense", "fc1", NULL, 0, "out=8", NULL));
  MUST(cohort_model_add_layer(m, "tanh", "act1", NULL, 0, "", NULL));
  MUST(cohort_model_add_layer(m, "dense", "fc2", NULL, 0, "out=3", NULL));
  MUST(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL));
  MUST(cohort_model_materialize(m));
  return m;
}

/* A batch of `rows` samples: rows [first, first + rows) of global step s. */
typedef struct {
  float x[64 * F];
  int32_t y[64];
  int64_t xs[2], ys[1];
  cohort_batch_t b;
} batch_t;

static void fill_batch(batch_t* bt, int64_t s, int64_t first, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int f = 0; f < F; ++f) bt->x[r * F + f] = feature(s, first + r, f);
    bt->y[r] = label(s, first + r);
  }
  memset(&bt->b, 0, sizeof bt->b);
  bt->b.struct_size = sizeof bt->b;
  bt->xs[0] = rows;
  bt->xs[1] = F;
  bt->ys[0] = rows;
  bt->b.images =
      (DLTensor){.data = bt->x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = bt->xs};
  bt->b.labels = (DLTensor){.data = bt->y, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1}, .shape = bt->ys};
  bt->b.valid = rows;
}

static size_t param_count(cohort_model_t* m) {
  size_t n = 0;
  MUST(cohort_model_num_tensors(m, &n));
  return n;
}

/* Largest |a - b| / max(1, |b|) over all parameters. */
static double max_rel_diff(cohort_model_t* a, cohort_model_t* b) {
  double worst = 0;
  for (size_t i = 0; i < param_count(a); ++i) {
    DLTensor va, vb;
    MUST(cohort_model_param(a, i, NULL, &va, NULL));
    MUST(cohort_model_param(b, i, NULL, &vb, NULL));
    int64_t n = 1;
    for (int d = 0; d < va.ndim; ++d) n *= va.shape[d];
    const float* pa = va.data;
    const float* pb = vb.data;
    for (int64_t k = 0; k < n; ++k) {
      const double d = fabs((double)pa[k] - pb[k]) / fmax(1.0, fabs((double)pb[k]));
      if (d > worst) worst = d;
    }
  }
  return worst;
}

static cohort_config_t* config(const char* optimizer, int passes) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  MUST(cohort_config_set(cfg, "optimizer", optimizer));
  MUST(cohort_config_set_float(cfg, "lr", 0.2));
  MUST(cohort_config_set_float(cfg, "weight_decay", 0));
  MUST(cohort_config_set_int(cfg, "backward_passes_per_step", passes));
  MUST(cohort_config_set_int(cfg, "batch_size", B));
  MUST(cohort_config_set_int(cfg, "compute_threads", 1));
  MUST(cohort_config_set_int(cfg, "seed", 42));
  MUST(cohort_config_set(cfg, "model", "tiny_mlp"));
  return cfg;
}

/* Plain SGD on one rank over the combined batch (g_size × B rows per step). */
static void train_reference(cohort_model_t* ref, int steps) {
  batch_t* bt = malloc(sizeof *bt);
  for (int s = 0; s < steps; ++s) {
    fill_batch(bt, s, 0, (int64_t)g_size * B);
    float loss = 0;
    MUST(cohort_model_forward_backward(ref, &bt->b.images, &bt->b.labels, &loss));
    for (size_t i = 0; i < param_count(ref); ++i) {
      DLTensor v, g;
      MUST(cohort_model_param(ref, i, NULL, &v, &g));
      int64_t n = 1;
      for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
      float* pv = v.data;
      const float* pg = g.data;
      for (int64_t k = 0; k < n; ++k) pv[k] -= 0.2f * pg[k];
    }
  }
  free(bt);
}

/* Each rank trains on its B rows of each global step, in `passes` passes. */
static void train_distributed(cohort_model_t* m, cohort_optimizer_t* opt, int first_step, int steps, int passes) {
  batch_t* bt = malloc(sizeof *bt);
  for (int s = first_step; s < first_step + steps; ++s) {
    for (int p = 0; p < passes; ++p) {
      const int64_t rows = B / passes;
      fill_batch(bt, s, (int64_t)g_rank * B + p * rows, rows);
      cohort_train_stats_t st = {.struct_size = sizeof st};
      MUST(cohort_optimizer_train_step(opt, &bt->b, &st));
      CHECK(st.updated == (p == passes - 1), "updated %d on pass %d of %d", st.updated, p, passes);
      CHECK(st.valid == rows && isfinite(st.loss), "valid %lld loss %f", (long long)st.valid, st.loss);
    }
  }
  free(bt);
}

static void test_equals_combined_batch(cohort_runtime_t* rt) {
  cohort_config_t* cfg = config("sgd", 1);
  cohort_model_t* m = make_model(rt, cfg);
  cohort_model_t* ref = make_model(rt, cfg);
  cohort_optimizer_t* opt = NULL;
  MUST(cohort_optimizer_create(m, cfg, &opt));
  MUST(cohort_optimizer_broadcast(opt, 0));
  train_distributed(m, opt, 0, STEPS, 1);
  train_reference(ref, STEPS);
  const double d = max_rel_diff(m, ref);
  CHECK(d < 1e-5, "distributed vs combined-batch parameters differ by %g", d);
  if (g_rank == 0) printf("np=%d: distributed vs combined batch, max relative difference %g\n", g_size, d);
  CHECK(cohort_optimizer_check_consistency(opt) == COHORT_OK, "%s", cohort_last_error());
  int64_t steps = 0;
  MUST(cohort_optimizer_state(opt, NULL, &steps));
  CHECK(steps == STEPS, "steps %lld", (long long)steps);
  cohort_optimizer_destroy(opt);
  cohort_model_destroy(ref);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

static void test_backward_passes(cohort_runtime_t* rt) {
  cohort_config_t* one = config("momentum", 1);
  cohort_config_t* two = config("momentum", 2);
  cohort_model_t* a = make_model(rt, one);
  cohort_model_t* b = make_model(rt, two);
  cohort_optimizer_t *oa = NULL, *ob = NULL;
  MUST(cohort_optimizer_create(a, one, &oa));
  MUST(cohort_optimizer_create(b, two, &ob));
  train_distributed(a, oa, 0, STEPS, 1);
  train_distributed(b, ob, 0, STEPS, 2);
  const double d = max_rel_diff(a, b);
  CHECK(d < 1e-5, "backward_passes_per_step=2 differs from one pass over the whole batch by %g", d);
  if (g_rank == 0) printf("np=%d: backward_passes_per_step=2 vs 1, max relative difference %g\n", g_size, d);
  cohort_optimizer_destroy(oa);
  cohort_optimizer_destroy(ob);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  cohort_config_destroy(one);
  cohort_config_destroy(two);
}

static void test_resume(cohort_runtime_t* rt, const char* dir) {
  cohort_config_t* cfg = config("momentum", 1);
  cohort_model_t* full = make_model(rt, cfg);
  cohort_model_t* first = make_model(rt, cfg);
  cohort_model_t* second = make_model(rt, cfg);
  cohort_optimizer_t *of = NULL, *o1 = NULL, *o2 = NULL;
  MUST(cohort_optimizer_create(full, cfg, &of));
  MUST(cohort_optimizer_create(first, cfg, &o1));
  MUST(cohort_optimizer_create(second, cfg, &o2));
  train_distributed(full, of, 0, STEPS, 1);
  train_distributed(first, o1, 0, STEPS / 2, 1);
  cohort_checkpoint_info_t ck = {.struct_size = sizeof ck, .epoch = 0, .pipeline_epoch = 0, .pipeline_step = STEPS / 2};
  MUST(cohort_optimizer_save_checkpoint(o1, dir, &ck)); /* agreed: the file exists on return */
  cohort_checkpoint_info_t got = {.struct_size = sizeof got};
  int found = 0;
  MUST(cohort_optimizer_load_checkpoint(o2, dir, &got, &found));
  CHECK(found == 1 && got.step == STEPS / 2 && got.pipeline_step == STEPS / 2, "found %d step %lld", found,
        (long long)got.step);
  train_distributed(second, o2, STEPS / 2, STEPS - STEPS / 2, 1);
  const double d = max_rel_diff(second, full);
  if (g_rank == 0) printf("np=%d: resumed vs uninterrupted, max relative difference %g\n", g_size, d);
  if (g_size <= 2)
    CHECK(d == 0, "resumed run differs from the uninterrupted one by %g (expected bit-exact)", d);
  else
    CHECK(d < 1e-6, "resumed run differs from the uninterrupted one by %g", d);
  /* A checkpoint of another model is refused on every rank. */
  cohort_config_t* other = config("momentum", 1);
  MUST(cohort_config_set(other, "model", "other_model"));
  cohort_model_t* m3 = make_model(rt, other);
  cohort_optimizer_t* o3 = NULL;
  MUST(cohort_optimizer_create(m3, other, &o3));
  cohort_status_t s = cohort_optimizer_load_checkpoint(o3, dir, &got, &found);
  CHECK(s != COHORT_OK, "loading another model's checkpoint succeeded");
  CHECK(strstr(cohort_last_error(), "rank 0 could not load the checkpoint") != NULL &&
            strstr(cohort_last_error(), "tiny_mlp") != NULL,
        "message: %s", cohort_last_error());
  cohort_optimizer_destroy(o3);
  cohort_model_destroy(m3);
  cohort_config_destroy(other);
  cohort_optimizer_destroy(of);
  cohort_optimizer_destroy(o1);
  cohort_optimizer_destroy(o2);
  cohort_model_destroy(full);
  cohort_model_destroy(first);
  cohort_model_destroy(second);
  cohort_config_destroy(cfg);
}

static void test_evaluate(cohort_runtime_t* rt) {
  enum { N = 10, S = 4 }; /* not a multiple of the global batch: the last batch is padded */
  uint8_t x[N * S * S];
  int32_t y[N];
  for (int i = 0; i < N * S * S; ++i) x[i] = (uint8_t)(i * 37 % 251);
  for (int i = 0; i < N; ++i) y[i] = label(99, i);
  int64_t xs[3] = {N, S, S}, ys[1] = {N};
  DLTensor xt = {.data = x, .device = {kDLCPU, 0}, .ndim = 3, .dtype = {kDLUInt, 8, 1}, .shape = xs};
  DLTensor yt = {.data = y, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1}, .shape = ys};
  cohort_config_t* cfg = config("sgd", 1);
  MUST(cohort_config_set_int(cfg, "batch_size", 3));
  MUST(cohort_config_set(cfg, "shuffle", "false"));
  MUST(cohort_config_set(cfg, "augment", "none"));
  const int64_t in[3] = {1, S, S};
  cohort_model_t* m = NULL;
  MUST(cohort_model_create_custom(rt, cfg, in, 3, &m));
  MUST(cohort_model_add_layer(m, "flatten", "flat", NULL, 0, "", NULL));
  MUST(cohort_model_add_layer(m, "dense", "fc", NULL, 0, "out=3", NULL));
  MUST(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL));
  cohort_pipeline_t* p = NULL;
  MUST(cohort_pipeline_create_from_memory(rt, cfg, &xt, &yt, &p));
  cohort_eval_result_t r = {.struct_size = sizeof r};
  MUST(cohort_model_evaluate(m, p, 0, &r));
  CHECK(r.samples == N, "evaluated %lld samples, the set has %d", (long long)r.samples, N);
  CHECK(r.top1 >= 0 && r.top1 <= 1 && r.top5 == 1.0 && r.loss > 0, "top1 %f top5 %f loss %f", r.top1, r.top5, r.loss);
  cohort_pipeline_destroy(p);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : "train_step_mpi_ckpt";
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(NULL, &rt));
  MUST(cohort_runtime_rank(rt, &g_rank));
  rank_check_rank = g_rank;
  MUST(cohort_runtime_size(rt, &g_size));
  char path[512];
  snprintf(path, sizeof path, "%s_np%d", dir, g_size);
  test_equals_combined_batch(rt);
  test_backward_passes(rt);
  test_resume(rt, path);
  test_evaluate(rt);
  int failures = rank_check_failures;
  {
    int64_t one = 1;
    double f = failures;
    DLTensor t = {.data = &f, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 64, 1}, .shape = &one};
    MUST(cohort_allreduce(rt, "failures", &t, &t, NULL));
    failures = (int)f;
  }
  if (g_rank == 0) printf("train_step_mpi: %d ranks, %d failure(s)\n", g_size, failures);
  cohort_runtime_destroy(rt);
  cohort_finalize();
  return failures ? 1 : 0;
}
