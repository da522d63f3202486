/* Collective teardown under mpirun: a runtime, a model, its optimizer, a pipeline and a
 * request that never completes (only rank 1 submits it) are destroyed in every one of
 * the 120 orders, the same order on every rank. cohort_runtime_destroy() is the one
 * collective call among them: the others only free memory, so no order may hang (the
 * ctest timeout catches that) or touch freed memory (the ASan build catches that).
 * After the runtime is gone, the model and the optimizer refuse work with
 * COHORT_ERR_INVALID_STATE and the pipeline keeps working. The unfinished request ends
 * cancelled (or failed by rank 0's shutdown), and its destroy returns after
 * request_destroy_wait_s even while its runtime lives. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

enum { kObjects = 5, kOrders = 120 };
enum { kRuntime, kModel, kOptimizer, kPipeline, kRequest };
static const char* const kNames[kObjects] = {"runtime", "model", "optimizer", "pipeline", "request"};

typedef struct {
  cohort_runtime_t* runtime;
  cohort_model_t* model;
  cohort_optimizer_t* optimizer;
  cohort_pipeline_t* pipeline;
  cohort_request_t* request;
} objects_t;

/* One batch of the tiny model: 4 samples of 3 features, labels 0..1. */
static float g_x[12] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 1.1f, -1.2f};
static int32_t g_y[4] = {0, 1, 1, 0};
static int64_t g_xs[2] = {4, 3}, g_ys[1] = {4};
/* The unfinished request's tensor: it stays borrowed until the runtime is destroyed. */
static float g_lonely[2] = {1, 2};
static int64_t g_lonely_shape[1] = {2};

static cohort_batch_t batch(void) {
  cohort_batch_t b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.images = (DLTensor){.data = g_x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = g_xs};
  b.labels = (DLTensor){.data = g_y, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1}, .shape = g_ys};
  b.valid = 4;
  return b;
}

static int create(const cohort_config_t* cfg, int rank, objects_t* o) {
  memset(o, 0, sizeof *o);
  if (!OK(cohort_runtime_create(cfg, &o->runtime))) return 0;
  const int64_t in[1] = {3};
  if (!OK(cohort_model_create_custom(o->runtime, cfg, in, 1, &o->model))) return 0;
  OK(cohort_model_add_layer(o->model, "dense", "fc", NULL, 0, "out=2", NULL));
  OK(cohort_model_add_layer(o->model, "softmax_xent", "loss", NULL, 0, "", NULL));
  if (!OK(cohort_optimizer_create(o->model, cfg, &o->optimizer))) return 0;
  cohort_batch_t b = batch();
  OK(cohort_optimizer_train_step(o->optimizer, &b, NULL)); /* the engine has run collectives */
  if (!OK(cohort_pipeline_create(o->runtime, cfg, &o->pipeline))) return 0;
  if (rank == 1) {
    DLTensor t = {
        .data = g_lonely, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = g_lonely_shape};
    OK(cohort_allreduce_async(o->runtime, "only_rank_1", &t, NULL, NULL, &o->request));
  }
  return 1;
}

/* What the survivors of a destroyed runtime still do. */
static void check_after_runtime(const objects_t* o, const char* order) {
  if (o->optimizer) {
    cohort_batch_t b = batch();
    CHECK(cohort_optimizer_train_step(o->optimizer, &b, NULL) == COHORT_ERR_INVALID_STATE,
          "order %s: a training step after cohort_runtime_destroy", order);
  }
  if (o->model) {
    cohort_batch_t b = batch();
    CHECK(cohort_model_forward_backward(o->model, &b.images, &b.labels, NULL) == COHORT_ERR_INVALID_STATE,
          "order %s: forward/backward after cohort_runtime_destroy", order);
  }
  if (o->pipeline) {
    cohort_batch_t b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    CHECK(cohort_pipeline_next(o->pipeline, &b) == COHORT_OK, "order %s: the pipeline after cohort_runtime_destroy",
          order);
  }
  if (o->request) {
    int done = 0;
    CHECK(cohort_request_test(o->request, &done) == COHORT_OK && done == 1,
          "order %s: the pending request is complete once the runtime is destroyed", order);
    /* Cancelled by rank 1's own shutdown, or failed before it once rank 0 had shut down
     * without ever submitting it: which comes first depends on timing. */
    const cohort_status_t s = cohort_request_wait(o->request);
    CHECK(s == COHORT_ERR_CANCELLED || s == COHORT_ERR_PEER_SHUTDOWN,
          "order %s: the pending request is cancelled or failed by rank 0's shutdown, got %d", order, (int)s);
  }
}

static void destroy(objects_t* o, int which) {
  switch (which) {
    case kRuntime:
      cohort_runtime_destroy(o->runtime);
      o->runtime = NULL;
      break;
    case kModel:
      cohort_model_destroy(o->model);
      o->model = NULL;
      break;
    case kOptimizer:
      cohort_optimizer_destroy(o->optimizer);
      o->optimizer = NULL;
      break;
    case kPipeline:
      cohort_pipeline_destroy(o->pipeline);
      o->pipeline = NULL;
      break;
    default:
      cohort_request_destroy(o->request);
      o->request = NULL;
      break;
  }
}

/* The k-th permutation of 0..4 (Lehmer code). */
static void permutation(int k, int out[kObjects]) {
  int left[kObjects] = {0, 1, 2, 3, 4};
  int n = kObjects;
  for (int i = 0; i < kObjects; ++i) {
    int f = 1;
    for (int j = 2; j < n; ++j) f *= j;
    const int pick = k / f;
    k %= f;
    out[i] = left[pick];
    for (int j = pick; j < n - 1; ++j) left[j] = left[j + 1];
    --n;
  }
}

int main(void) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  const char* settings[][2] = {
      {"device", "cpu"},   {"optimizer", "sgd"},       {"compute_threads", "1"}, {"batch_size", "2"},
      {"image_size", "4"}, {"synthetic_samples", "8"}, {"log_level", "error"},   {"request_destroy_wait_s", "0.05"}};
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; ++i)
    MUST(cohort_config_set(cfg, settings[i][0], settings[i][1]));
  int rank = 0;
  {
    cohort_runtime_t* rt = NULL;
    MUST(cohort_runtime_create(cfg, &rt));
    MUST(cohort_runtime_rank(rt, &rank));
    cohort_runtime_destroy(rt);
  }
  rank_check_rank = rank;
  for (int k = 0; k < kOrders; ++k) {
    int order[kObjects];
    permutation(k, order);
    char text[64] = "";
    for (int i = 0; i < kObjects; ++i) {
      strcat(text, kNames[order[i]]);
      if (i + 1 < kObjects) strcat(text, ",");
    }
    objects_t o;
    if (!create(cfg, rank, &o)) break;
    for (int i = 0; i < kObjects; ++i) {
      destroy(&o, order[i]);
      if (order[i] == kRuntime) check_after_runtime(&o, text);
    }
  }
  cohort_config_destroy(cfg);
  const int failures = rank_check_job_failures();
  if (rank == 0) printf("teardown_mpi: %d orders, %d failure(s) on all ranks\n", kOrders, failures);
  return failures > 0 ? 1 : 0;
}
