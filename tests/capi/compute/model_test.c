/* The model C API: the zoo, the layer builder, DLPack views of parameters and
 * gradients, inference, loss and backward, and every error path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cohort/cohort.h"

static cohort_runtime_t* rt;

static int setup(void** state) {
  (void)state;
  return cohort_runtime_create(NULL, &rt) == COHORT_OK ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  cohort_runtime_destroy(rt);
  return 0;
}

static void expect_error(cohort_status_t s, cohort_status_t want, const char* text) {
  assert_int_equal(s, want);
  if (text && !strstr(cohort_last_error(), text)) fail_msg("'%s' not in: %s", text, cohort_last_error());
}

static DLTensor f32_tensor(float* data, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static DLTensor i32_tensor(int32_t* data, int64_t* shape) {
  DLTensor t = f32_tensor(NULL, 1, shape);
  t.data = data;
  t.dtype.code = kDLInt;
  return t;
}

static void zoo_counts_and_unknown_names(void** state) {
  (void)state;
  cohort_model_t* m = NULL;
  int64_t n = 0;
  assert_int_equal(cohort_model_create(rt, "resnet50", NULL, &m), COHORT_OK);
  assert_int_equal(cohort_model_num_params(m, &n), COHORT_OK);
  assert_int_equal(n, 25557032);
  cohort_model_destroy(m);
  assert_int_equal(cohort_model_create(rt, "resnet20", NULL, &m), COHORT_OK);
  assert_int_equal(cohort_model_num_params(m, &n), COHORT_OK);
  assert_int_equal(n, 269722);
  cohort_model_destroy(m);

  m = (cohort_model_t*)&n; /* must be reset to NULL on failure */
  expect_error(cohort_model_create(rt, "resnet51", NULL, &m), COHORT_ERR_INVALID_ARGUMENT, "valid models:");
  assert_null(m);
  assert_non_null(strstr(cohort_last_error(), "cohort_model_create"));
  assert_non_null(strstr(cohort_last_error(), "resnet50"));
  expect_error(cohort_model_create(rt, NULL, NULL, &m), COHORT_ERR_INVALID_ARGUMENT, "name is NULL");
  expect_error(cohort_model_create(NULL, "resnet50", NULL, &m), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_model_create(rt, "resnet50", NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "out is NULL");

  cohort_config_t* cfg = NULL;
  assert_int_equal(cohort_config_create(&cfg), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "image_size", "8"), COHORT_OK);
  expect_error(cohort_model_create(rt, "alexnet", cfg, &m), COHORT_ERR_INVALID_ARGUMENT, "image_size=8");
  assert_int_equal(cohort_config_set(cfg, "image_size", "0"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "num_classes", "10"), COHORT_OK);
  assert_int_equal(cohort_model_create(rt, "mnist_cnn", cfg, &m), COHORT_OK);
  assert_int_equal(cohort_model_num_params(m, &n), COHORT_OK);
  assert_int_equal(n, 1199882);
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
  cohort_model_destroy(NULL);
}

static void summary_text(void** state) {
  (void)state;
  cohort_model_t* m = NULL;
  assert_int_equal(cohort_model_create(rt, "mnist_cnn", NULL, &m), COHORT_OK);
  size_t needed = 0;
  char small[8];
  expect_error(cohort_model_summary(m, small, sizeof small, &needed), COHORT_ERR_INVALID_ARGUMENT, "too small");
  assert_true(needed > 100);
  char* text = malloc(needed);
  assert_int_equal(cohort_model_summary(m, text, needed, NULL), COHORT_OK);
  assert_non_null(strstr(text, "conv1"));
  assert_non_null(strstr(text, "[32, 26, 26]"));
  assert_non_null(strstr(text, "1199882"));
  free(text);
  expect_error(cohort_model_summary(NULL, NULL, 0, &needed), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  expect_error(cohort_model_num_params(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  expect_error(cohort_model_num_params(m, NULL), COHORT_ERR_INVALID_ARGUMENT, "count is NULL");
  /* The profile names every layer, before any step too (all zero then). */
  assert_int_equal(cohort_model_set_profiling(m, 1), COHORT_OK);
  expect_error(cohort_model_profile(m, small, sizeof small, &needed), COHORT_ERR_INVALID_ARGUMENT, "too small");
  text = malloc(needed);
  assert_int_equal(cohort_model_profile(m, text, needed, NULL), COHORT_OK);
  assert_non_null(strstr(text, "conv2"));
  assert_non_null(strstr(text, "profiled total"));
  free(text);
  assert_int_equal(cohort_model_set_profiling(m, 0), COHORT_OK);
  expect_error(cohort_model_set_profiling(NULL, 1), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  expect_error(cohort_model_profile(NULL, NULL, 0, &needed), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  cohort_model_destroy(m);
}

static void builder_errors(void** state) {
  (void)state;
  cohort_model_t* m = NULL;
  int64_t shape[3] = {3, 8, 8};
  expect_error(cohort_model_create_custom(rt, NULL, NULL, 3, &m), COHORT_ERR_INVALID_ARGUMENT, "input_shape is NULL");
  expect_error(cohort_model_create_custom(rt, NULL, shape, 2, &m), COHORT_ERR_INVALID_ARGUMENT, "1 ({F}) or 3");
  expect_error(cohort_model_create_custom(NULL, NULL, shape, 3, &m), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_model_create_custom(rt, NULL, shape, 3, NULL), COHORT_ERR_INVALID_ARGUMENT, "out is NULL");
  int64_t bad[3] = {3, 0, 8};
  expect_error(cohort_model_create_custom(rt, NULL, bad, 3, &m), COHORT_ERR_INVALID_ARGUMENT, "positive");
  assert_int_equal(cohort_model_create_custom(rt, NULL, shape, 3, &m), COHORT_OK);

  int id = -1;
  expect_error(cohort_model_add_layer(NULL, "relu", "r", NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "model is NULL");
  expect_error(cohort_model_add_layer(m, NULL, "r", NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT, "kind is NULL");
  expect_error(cohort_model_add_layer(m, "relu", NULL, NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "name is NULL");
  expect_error(cohort_model_add_layer(m, "relu", "r", NULL, 2, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "inputs is NULL");
  expect_error(cohort_model_add_layer(m, "swish", "s", NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "unknown layer kind 'swish'");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "out=8 kernal=3", &id), COHORT_ERR_INVALID_ARGUMENT,
               "unknown parameter 'kernal' for conv");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "out=eight", &id), COHORT_ERR_INVALID_ARGUMENT,
               "out='eight' is not a number");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "out", &id), COHORT_ERR_INVALID_ARGUMENT,
               "is not key=value");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "kernel=3", &id), COHORT_ERR_INVALID_ARGUMENT,
               "parameter 'out' is required");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "out=8 kernel=2.5", &id), COHORT_ERR_INVALID_ARGUMENT,
               "must be an integer");
  expect_error(cohort_model_add_layer(m, "conv", "c", NULL, 0, "out=8 kernel=11", &id), COHORT_ERR_INVALID_ARGUMENT,
               "larger than its padded input");
  expect_error(cohort_model_add_layer(m, "dense", "d", NULL, 0, "out=8", &id), COHORT_ERR_INVALID_ARGUMENT,
               "add a flatten layer");
  int nowhere = 7;
  expect_error(cohort_model_add_layer(m, "relu", "r", &nowhere, 1, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "no layer with index 7");
  int64_t count = -1;
  assert_int_equal(cohort_model_num_params(m, &count), COHORT_OK);
  assert_int_equal(count, 0); /* failed calls left the network unchanged */

  assert_int_equal(cohort_model_add_layer(m, "conv", "c1", NULL, 0, "out=16, kernel=3, pad=1", &id), COHORT_OK);
  assert_int_equal(id, 1);
  expect_error(cohort_model_add_layer(m, "relu", "c1", NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT, "used twice");
  int a = 0, b = 1;
  int pair[2] = {a, b};
  expect_error(cohort_model_add_layer(m, "add", "sum", pair, 2, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "channel/shape mismatch");
  expect_error(cohort_model_add_layer(m, "relu", "r", NULL, 0, "alpha=1", &id), COHORT_ERR_INVALID_ARGUMENT,
               "(it takes none)");
  assert_int_equal(cohort_model_materialize(m), COHORT_OK);
  expect_error(cohort_model_add_layer(m, "relu", "late", NULL, 0, NULL, &id), COHORT_ERR_INVALID_ARGUMENT,
               "after the parameters were allocated");
  expect_error(cohort_model_materialize(NULL), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  cohort_model_destroy(m);

  int64_t flat[1] = {4};
  assert_int_equal(cohort_model_create_custom(rt, NULL, flat, 1, &m), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "smoothing=0.1", NULL), COHORT_OK);
  expect_error(cohort_model_add_layer(m, "relu", "r", NULL, 0, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "nothing can follow");
  cohort_model_destroy(m);
}

static size_t ready_calls;
static size_t last_ready;
static void on_ready(void* user, size_t index) {
  (void)user;
  ready_calls++;
  last_ready = index;
}

/* A network defined through the builder learns to separate two classes of points. */
static void builder_network_learns(void** state) {
  (void)state;
  cohort_model_t* m = NULL;
  int64_t in_shape[1] = {2};
  assert_int_equal(cohort_model_create_custom(rt, NULL, in_shape, 1, &m), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "dense", "fc1", NULL, 0, "out=16", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "tanh", "act", NULL, 0, "", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "dense", "fc2", NULL, 0, "out=2", NULL), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, NULL, NULL), COHORT_OK);
  assert_int_equal(cohort_model_set_grad_ready(m, on_ready, NULL), COHORT_OK);
  expect_error(cohort_model_set_grad_ready(NULL, on_ready, NULL), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");

  size_t tensors = 0;
  assert_int_equal(cohort_model_num_tensors(m, &tensors), COHORT_OK);
  assert_int_equal(tensors, 4);
  expect_error(cohort_model_num_tensors(m, NULL), COHORT_ERR_INVALID_ARGUMENT, "count is NULL");
  const char* name = NULL;
  DLTensor w, g;
  assert_int_equal(cohort_model_param(m, 0, &name, &w, &g), COHORT_OK);
  assert_string_equal(name, "fc1.weight");
  assert_int_equal(w.ndim, 2);
  assert_int_equal(w.shape[0], 16);
  assert_int_equal(w.shape[1], 2);
  assert_int_equal(w.dtype.code, kDLFloat);
  assert_int_equal(g.shape[0], 16);
  expect_error(cohort_model_param(m, 4, &name, &w, &g), COHORT_ERR_INVALID_ARGUMENT, "out of range");

  enum { N = 64 };
  float x[N * 2];
  int32_t y[N];
  int64_t xs[2] = {N, 2}, ys[1] = {N};
  DLTensor images = f32_tensor(x, 2, xs), labels = i32_tensor(y, ys);
  float first = 0, loss = 0;
  unsigned seed = 1;
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < N; ++i) {
      seed = seed * 1103515245u + 12345u;
      x[2 * i] = (float)((seed >> 8) % 2001) / 1000.f - 1.f;
      seed = seed * 1103515245u + 12345u;
      x[2 * i + 1] = (float)((seed >> 8) % 2001) / 1000.f - 1.f;
      y[i] = x[2 * i] - x[2 * i + 1] > 0;
    }
    ready_calls = 0;
    assert_int_equal(cohort_model_forward_backward(m, &images, &labels, &loss), COHORT_OK);
    assert_int_equal(ready_calls, 4);
    assert_int_equal(last_ready, 1); /* fc1.bias: the first layer finishes last */
    if (step == 0) first = loss;
    for (size_t t = 0; t < tensors; ++t) {
      assert_int_equal(cohort_model_param(m, t, NULL, &w, &g), COHORT_OK);
      float* wd = (float*)w.data;
      const float* gd = (const float*)g.data;
      int64_t n = 1;
      for (int d = 0; d < w.ndim; ++d) n *= w.shape[d];
      for (int64_t i = 0; i < n; ++i) wd[i] -= 0.5f * gd[i];
    }
  }
  assert_true(first > 0.4f);
  assert_true(loss < 0.2f);
  float eval = 0;
  assert_int_equal(cohort_model_loss(m, &images, &labels, &eval), COHORT_OK);
  assert_true(eval < 0.2f);
  float out[N * 2];
  int64_t os[2] = {N, 2};
  DLTensor logits = f32_tensor(out, 2, os);
  assert_int_equal(cohort_model_forward(m, &images, &logits), COHORT_OK);
  int correct = 0;
  for (int i = 0; i < N; ++i) correct += (out[2 * i + 1] > out[2 * i]) == (y[i] == 1);
  assert_true(correct >= N - 4);
  cohort_model_destroy(m);
}

static void tensor_errors(void** state) {
  (void)state;
  cohort_config_t* cfg = NULL;
  assert_int_equal(cohort_config_create(&cfg), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "image_size", "16"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "num_classes", "3"), COHORT_OK);
  assert_int_equal(cohort_config_set(cfg, "compute_threads", "1"), COHORT_OK);
  cohort_model_t* m = NULL;
  assert_int_equal(cohort_model_create(rt, "trivial", cfg, &m), COHORT_OK);

  float x[2 * 3 * 16 * 16];
  memset(x, 0, sizeof x);
  float out[6];
  int32_t y[2] = {0, 2};
  int64_t xs[4] = {2, 3, 16, 16}, os[2] = {2, 3}, ys[1] = {2};
  DLTensor images = f32_tensor(x, 4, xs), logits = f32_tensor(out, 2, os), labels = i32_tensor(y, ys);
  float loss = 0;
  assert_int_equal(cohort_model_forward(m, &images, &logits), COHORT_OK);
  assert_int_equal(cohort_model_loss(m, &images, &labels, &loss), COHORT_OK);
  assert_true(loss > 1.09f && loss < 1.11f); /* zero input: uniform over 3 classes */
  assert_int_equal(cohort_model_forward_backward(m, &images, &labels, NULL), COHORT_OK);

  expect_error(cohort_model_forward(NULL, &images, &logits), COHORT_ERR_INVALID_ARGUMENT, "model is NULL");
  expect_error(cohort_model_forward(m, NULL, &logits), COHORT_ERR_INVALID_ARGUMENT, "images is NULL");
  expect_error(cohort_model_forward(m, &images, NULL), COHORT_ERR_INVALID_ARGUMENT, "output is NULL");
  DLTensor bad = images;
  bad.dtype.bits = 64;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT, "images must be float32");
  bad = images;
  bad.device.device_type = kDLCUDA;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT, "host memory");
  bad = images;
  bad.ndim = 2;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT,
               "images have shape [2, 3] but the model takes");
  int64_t wrong[4] = {2, 16, 16, 3};
  bad = images;
  bad.shape = wrong;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT,
               "but the model takes [2, 3, 16, 16] (data_format=NCHW)");
  int64_t strides[4] = {1, 1, 1, 1};
  bad = images;
  bad.strides = strides;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT, "compact");
  bad = images;
  bad.data = NULL;
  expect_error(cohort_model_forward(m, &bad, &logits), COHORT_ERR_INVALID_ARGUMENT,
               "images: tensor of shape [2, 3, 16, 16] has a NULL data pointer");
  int64_t os_wrong[2] = {2, 4};
  DLTensor bad_out = f32_tensor(out, 2, os_wrong);
  expect_error(cohort_model_forward(m, &images, &bad_out), COHORT_ERR_INVALID_ARGUMENT,
               "output has shape [2, 4] but the model gives [2, 3]");

  expect_error(cohort_model_loss(m, &images, &labels, NULL), COHORT_ERR_INVALID_ARGUMENT, "loss is NULL");
  expect_error(cohort_model_loss(m, &images, NULL, &loss), COHORT_ERR_INVALID_ARGUMENT, "labels is NULL");
  DLTensor bad_labels = labels;
  bad_labels.dtype.code = kDLFloat;
  expect_error(cohort_model_loss(m, &images, &bad_labels, &loss), COHORT_ERR_INVALID_ARGUMENT, "labels must be int32");
  int64_t ys_wrong[1] = {3};
  bad_labels = labels;
  bad_labels.shape = ys_wrong;
  expect_error(cohort_model_forward_backward(m, &images, &bad_labels, &loss), COHORT_ERR_INVALID_ARGUMENT,
               "labels must have shape [2]");
  y[1] = 3;
  expect_error(cohort_model_forward_backward(m, &images, &labels, &loss), COHORT_ERR_INVALID_ARGUMENT,
               "label 3 of sample 1 is outside [0, 3)");
  cohort_model_destroy(m);

  /* NHWC images and a model without a loss */
  assert_int_equal(cohort_config_set(cfg, "data_format", "NHWC"), COHORT_OK);
  int64_t in_shape[3] = {3, 16, 16};
  assert_int_equal(cohort_model_create_custom(rt, cfg, in_shape, 3, &m), COHORT_OK);
  assert_int_equal(cohort_model_add_layer(m, "global_avg_pool", "gap", NULL, 0, NULL, NULL), COHORT_OK);
  expect_error(cohort_model_forward(m, &images, &logits), COHORT_ERR_INVALID_ARGUMENT, "(data_format=NHWC)");
  DLTensor nhwc = images;
  nhwc.shape = wrong;
  for (int i = 0; i < 2 * 16 * 16 * 3; ++i) x[i] = (float)(i % 3);
  assert_int_equal(cohort_model_forward(m, &nhwc, &logits), COHORT_OK);
  assert_true(out[0] == 0.f && out[1] == 1.f && out[2] == 2.f);
  expect_error(cohort_model_loss(m, &nhwc, &labels, &loss), COHORT_ERR_INVALID_ARGUMENT, "no loss layer");
  expect_error(cohort_model_forward_backward(m, &nhwc, &labels, &loss), COHORT_ERR_INVALID_ARGUMENT, "no loss layer");
  cohort_model_destroy(m);
  cohort_config_destroy(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zoo_counts_and_unknown_names), cmocka_unit_test(summary_text),  cmocka_unit_test(builder_errors),
      cmocka_unit_test(builder_network_learns),       cmocka_unit_test(tensor_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
