/* Every error path of collectives.h on one rank (no mpirun), plus the single-rank
 * results the paths are compared with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <cohort/cohort.h>

static cohort_runtime_t* g_rt;
static float g_data[6] = {1, 2, 3, 4, 5, 6};
static int64_t g_shape[2] = {3, 2};

static DLTensor f32_tensor(void) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = g_data;
  t.device.device_type = kDLCPU;
  t.ndim = 2;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = g_shape;
  return t;
}

static int setup(void** state) {
  (void)state;
  /* device=cpu: the same device-tensor error on machines with and without a GPU. */
  cohort_config_t* cfg = NULL;
  if (cohort_config_create(&cfg) != COHORT_OK || cohort_config_set(cfg, "device", "cpu") != COHORT_OK) return -1;
  cohort_status_t s = cohort_runtime_create(cfg, &g_rt);
  cohort_config_destroy(cfg);
  return s == COHORT_OK ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  cohort_runtime_destroy(g_rt);
  return 0;
}

static void expect_error(cohort_status_t got, cohort_status_t want, const char* fragment) {
  assert_int_equal(got, want);
  assert_non_null(strstr(cohort_last_error(), fragment));
}

static void test_null_arguments(void** state) {
  (void)state;
  DLTensor t = f32_tensor();
  cohort_request_t* r = NULL;
  DLManagedTensor* m = NULL;
  expect_error(cohort_allreduce_async(NULL, "x", &t, NULL, NULL, &r), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_allreduce_async(g_rt, NULL, &t, NULL, NULL, &r), COHORT_ERR_INVALID_ARGUMENT, "name is NULL");
  expect_error(cohort_allreduce_async(g_rt, "x", NULL, NULL, NULL, &r), COHORT_ERR_INVALID_ARGUMENT, "input is NULL");
  expect_error(cohort_allreduce_async(g_rt, "x", &t, NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "out is NULL");
  expect_error(cohort_allreduce(NULL, "x", &t, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "cohort_allreduce");
  expect_error(cohort_broadcast(NULL, "x", &t, NULL, 0), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_broadcast_async(g_rt, "x", &t, NULL, 0, NULL), COHORT_ERR_INVALID_ARGUMENT, "out is NULL");
  expect_error(cohort_allgather(g_rt, "x", &t, NULL), COHORT_ERR_INVALID_ARGUMENT, "result is NULL");
  expect_error(cohort_allgather_async(g_rt, "x", NULL, &r), COHORT_ERR_INVALID_ARGUMENT, "input is NULL");
  expect_error(cohort_alltoallv(g_rt, "x", &t, NULL, 0, NULL, NULL, 0), COHORT_ERR_INVALID_ARGUMENT, "result is NULL");
  expect_error(cohort_alltoallv_async(NULL, "x", &t, NULL, 0, &r), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_reducescatter(g_rt, "x", &t, COHORT_REDUCE_SUM, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "result is NULL");
  expect_error(cohort_reducescatter_async(g_rt, NULL, &t, COHORT_REDUCE_SUM, &r), COHORT_ERR_INVALID_ARGUMENT,
               "name is NULL");
  expect_error(cohort_barrier(NULL), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_barrier_async(g_rt, NULL), COHORT_ERR_INVALID_ARGUMENT, "out is NULL");
  expect_error(cohort_join_async(NULL, &r), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_join(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_request_test(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "request is NULL");
  expect_error(cohort_request_wait(NULL), COHORT_ERR_INVALID_ARGUMENT, "request is NULL");
  expect_error(cohort_request_output(NULL, &m), COHORT_ERR_INVALID_ARGUMENT, "request is NULL");
  expect_error(cohort_request_output(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "result is NULL");
  expect_error(cohort_request_recv_splits(NULL, NULL, 0), COHORT_ERR_INVALID_ARGUMENT, "splits is NULL");
  expect_error(cohort_request_last_joined(NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "last_rank is NULL");
  expect_error(cohort_runtime_mark_step(NULL), COHORT_ERR_INVALID_ARGUMENT, "runtime is NULL");
  expect_error(cohort_allreduce_options_default(NULL), COHORT_ERR_INVALID_ARGUMENT, "options is NULL");
  cohort_request_destroy(NULL);
}

static void test_bad_tensors(void** state) {
  (void)state;
  DLTensor t = f32_tensor();
  t.dtype.code = kDLComplex;
  t.dtype.bits = 64;
  expect_error(cohort_allreduce(g_rt, "complex", &t, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "input");
  t = f32_tensor();
  int64_t strides[2] = {1, 3};
  t.strides = strides;
  expect_error(cohort_allreduce(g_rt, "strided", &t, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "not contiguous");
  t = f32_tensor();
  t.device.device_type = kDLCUDA;
  expect_error(cohort_allreduce(g_rt, "device", &t, NULL, NULL), COHORT_ERR_UNSUPPORTED,
               "'device': the tensor is in CUDA memory (cuda:0)");
  /* What would work: a GPU runtime (CUDA builds) or a CUDA build; host memory always. */
  assert_true(strstr(cohort_last_error(), "device=cpu") != NULL ||
              strstr(cohort_last_error(), "built without CUDA") != NULL);
  assert_non_null(strstr(cohort_last_error(), "host memory"));
  DLManagedTensor* gathered = NULL;
  expect_error(cohort_allgather(g_rt, "device.rows", &t, &gathered), COHORT_ERR_UNSUPPORTED, "'device.rows'");
  assert_null(gathered);
  t = f32_tensor();
  DLTensor out = f32_tensor();
  int64_t other[2] = {2, 3};
  out.shape = other;
  expect_error(cohort_allreduce(g_rt, "shape", &t, &out, NULL), COHORT_ERR_INVALID_ARGUMENT, "does not match input");
  expect_error(cohort_allreduce(g_rt, "", &t, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "name is empty");
  expect_error(cohort_allreduce(g_rt, "__reserved", &t, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "reserved");
  DLTensor scalar = f32_tensor();
  scalar.ndim = 0;
  DLManagedTensor* m = NULL;
  expect_error(cohort_allgather(g_rt, "scalar", &scalar, &m), COHORT_ERR_INVALID_ARGUMENT, "at least one dimension");
  expect_error(cohort_reducescatter(g_rt, "scalar", &scalar, COHORT_REDUCE_SUM, &m), COHORT_ERR_INVALID_ARGUMENT,
               "at least one dimension");
}

static void test_bad_options(void** state) {
  (void)state;
  DLTensor t = f32_tensor();
  cohort_allreduce_options_t o;
  assert_int_equal(cohort_allreduce_options_default(&o), COHORT_OK);
  o.op = (cohort_reduce_op_t)99;
  expect_error(cohort_allreduce(g_rt, "op", &t, NULL, &o), COHORT_ERR_INVALID_ARGUMENT, "reduce op 99");
  assert_int_equal(cohort_allreduce_options_default(&o), COHORT_OK);
  o.struct_size = sizeof o + 64;
  assert_int_equal(cohort_allreduce(g_rt, "size", &t, NULL, &o), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_allreduce_options_default(&o), COHORT_OK);
  o.prescale = 1.0 / 0.0;
  expect_error(cohort_allreduce(g_rt, "inf", &t, NULL, &o), COHORT_ERR_INVALID_ARGUMENT, "finite");
  expect_error(cohort_broadcast(g_rt, "root", &t, NULL, 5), COHORT_ERR_INVALID_ARGUMENT, "root 5");
  expect_error(cohort_reducescatter(g_rt, "rsop", &t, (cohort_reduce_op_t)-1, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "result is NULL");
  o.op = COHORT_REDUCE_MAX_ENUM;
  expect_error(cohort_allreduce(g_rt, "max_enum", &t, NULL, &o), COHORT_ERR_INVALID_ARGUMENT, "reduce op 2147483647");
  DLManagedTensor* m = NULL;
  int64_t splits[2] = {2, 1};
  expect_error(cohort_alltoallv(g_rt, "splits", &t, splits, 1, &m, NULL, 0), COHORT_ERR_INVALID_ARGUMENT,
               "add up to 2");
  /* The lengths of the split arrays are checked against the number of ranks. */
  expect_error(cohort_alltoallv(g_rt, "splits", &t, splits, 2, &m, NULL, 0), COHORT_ERR_INVALID_ARGUMENT,
               "num_send_splits is 2 but the runtime has 1 ranks");
  expect_error(cohort_alltoallv(g_rt, "splits", &t, NULL, 1, &m, NULL, 0), COHORT_ERR_INVALID_ARGUMENT,
               "send_splits is NULL but num_send_splits is 1");
  int64_t recv[1];
  expect_error(cohort_alltoallv(g_rt, "splits", &t, NULL, 0, &m, recv, 0), COHORT_ERR_INVALID_ARGUMENT,
               "num_recv_splits is 0");
  cohort_request_t* r = NULL;
  expect_error(cohort_alltoallv_async(g_rt, "splits", &t, splits, 2, &r), COHORT_ERR_INVALID_ARGUMENT,
               "num_send_splits is 2");
  assert_null(r);
}

/* An options struct one field smaller than today's (an older header): accepted, and the
 * field it lacks keeps its default instead of being read. */
static void test_older_options_struct(void** state) {
  (void)state;
  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  DLTensor t = {.data = x, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
  cohort_allreduce_options_t o;
  assert_int_equal(cohort_allreduce_options_default(&o), COHORT_OK);
  assert_int_equal(o.struct_size, sizeof o);
  o.prescale = 3;
  o.postscale = 100; /* beyond the struct's size: must not be read */
  o.struct_size = offsetof(cohort_allreduce_options_t, postscale);
  assert_int_equal(cohort_allreduce(g_rt, "older_options", &t, NULL, &o), COHORT_OK);
  assert_float_equal(x[0], 3.0f, 0.0f);
  assert_float_equal(x[1], 6.0f, 0.0f);
  /* A size that cuts a field in two is refused. */
  o.struct_size = offsetof(cohort_allreduce_options_t, postscale) + 4;
  expect_error(cohort_allreduce(g_rt, "cut_options", &t, NULL, &o), COHORT_ERR_INVALID_ARGUMENT,
               "not the size of any version of cohort_allreduce_options_t");
}

/* The deprecated names stay for one minor version and do what their replacements do. */
#if defined(__GNUC__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
static void test_deprecated_alltoall(void** state) {
  (void)state;
  DLTensor t = f32_tensor();
  DLManagedTensor* m = NULL;
  int64_t splits[1] = {3}, recv[1] = {0};
  assert_int_equal(cohort_alltoall(g_rt, "old_a2a", &t, splits, &m, recv), COHORT_OK);
  assert_int_equal(recv[0], 3);
  assert_int_equal(m->dl_tensor.shape[0], 3);
  m->deleter(m);
  cohort_request_t* r = NULL;
  assert_int_equal(cohort_alltoall_async(g_rt, "old_a2a", &t, NULL, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  cohort_request_destroy(r);
}
#if defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif

static void test_groups(void** state) {
  (void)state;
  DLTensor a = f32_tensor(), b = f32_tensor();
  DLTensor* inputs[2] = {&a, &b};
  const char* names[2] = {"g.a", "g.a"};
  expect_error(cohort_grouped_allreduce(g_rt, 0, names, inputs, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT, "count is 0");
  expect_error(cohort_grouped_allreduce(g_rt, 2, NULL, inputs, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "names is NULL");
  expect_error(cohort_grouped_allreduce(g_rt, 2, names, inputs, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "appears twice");
  const char* bad[2] = {"g.a", NULL};
  expect_error(cohort_grouped_allreduce(g_rt, 2, bad, inputs, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "names[1] is NULL");
  cohort_request_t* r = NULL;
  expect_error(cohort_grouped_allreduce_async(g_rt, 2, names, inputs, NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT,
               "out is NULL");
  const char* good[2] = {"g.a", "g.b"};
  assert_int_equal(cohort_grouped_allreduce_async(g_rt, 2, good, inputs, NULL, NULL, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  cohort_request_destroy(r);
}

static void test_requests_and_results(void** state) {
  (void)state;
  DLTensor t = f32_tensor();
  cohort_request_t* r = NULL;
  assert_int_equal(cohort_allreduce_async(g_rt, "one", &t, NULL, NULL, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  int done = 0;
  assert_int_equal(cohort_request_test(r, &done), COHORT_OK);
  assert_int_equal(done, 1);
  assert_float_equal(g_data[5], 6.0f, 0.0f);
  DLManagedTensor* m = NULL;
  expect_error(cohort_request_output(r, &m), COHORT_ERR_INVALID_STATE, "no result tensor");
  int64_t splits[1];
  expect_error(cohort_request_recv_splits(r, splits, 1), COHORT_ERR_INVALID_STATE, "not an alltoall");
  int last = -1;
  expect_error(cohort_request_last_joined(r, &last), COHORT_ERR_INVALID_STATE, "not a join");
  cohort_request_destroy(r);

  assert_int_equal(cohort_allgather_async(g_rt, "gather", &t, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  assert_int_equal(cohort_request_output(r, &m), COHORT_OK);
  assert_int_equal(m->dl_tensor.shape[0], 3);
  m->deleter(m);
  cohort_request_destroy(r);

  assert_int_equal(cohort_alltoallv_async(g_rt, "a2a", &t, NULL, 0, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  assert_int_equal(cohort_request_recv_splits(r, splits, 1), COHORT_OK);
  assert_int_equal(splits[0], 3);
  expect_error(cohort_request_recv_splits(r, splits, 0), COHORT_ERR_INVALID_ARGUMENT, "count 0");
  cohort_request_destroy(r);

  assert_int_equal(cohort_join_async(g_rt, &r), COHORT_OK);
  assert_int_equal(cohort_request_wait(r), COHORT_OK);
  assert_int_equal(cohort_request_last_joined(r, &last), COHORT_OK);
  assert_int_equal(last, 0);
  cohort_request_destroy(r);
  assert_int_equal(cohort_barrier(g_rt), COHORT_OK);
  assert_int_equal(cohort_runtime_mark_step(g_rt), COHORT_OK);
}

static void test_mismatch_between_submission_and_cache(void** state) {
  (void)state;
  /* One rank: a name submitted again with another signature than the cached one is
   * negotiated afresh (not an error), and runs with the new signature. */
  DLTensor t = f32_tensor();
  DLManagedTensor* m = NULL;
  assert_int_equal(cohort_allgather(g_rt, "reshaped", &t, &m), COHORT_OK);
  assert_int_equal(m->dl_tensor.ndim, 2);
  m->deleter(m);
  t.ndim = 1; /* now [3] */
  assert_int_equal(cohort_allgather(g_rt, "reshaped", &t, &m), COHORT_OK);
  assert_int_equal(m->dl_tensor.ndim, 1);
  assert_int_equal(m->dl_tensor.shape[0], 3);
  assert_float_equal(((const float*)m->dl_tensor.data)[2], g_data[2], 0.0f);
  m->deleter(m);
  /* The same name with another prescale: the new scale applies. */
  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  DLTensor v = {.data = x, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
  cohort_allreduce_options_t o;
  assert_int_equal(cohort_allreduce_options_default(&o), COHORT_OK);
  assert_int_equal(cohort_allreduce(g_rt, "rescaled", &v, NULL, &o), COHORT_OK);
  assert_float_equal(x[1], 2.0f, 0.0f);
  o.prescale = 10;
  assert_int_equal(cohort_allreduce(g_rt, "rescaled", &v, NULL, &o), COHORT_OK);
  assert_float_equal(x[1], 20.0f, 0.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_arguments),       cmocka_unit_test(test_bad_tensors),
      cmocka_unit_test(test_bad_options),          cmocka_unit_test(test_groups),
      cmocka_unit_test(test_requests_and_results), cmocka_unit_test(test_mismatch_between_submission_and_cache),
      cmocka_unit_test(test_older_options_struct), cmocka_unit_test(test_deprecated_alltoall),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
