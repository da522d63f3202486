/* The pipeline's C API: every error path, batches from caller memory and synthetic
 * data, resume, statistics and the dataset tools. Public API only. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cohort/cohort.h"

static cohort_config_t* config_of(const char* const* kv) {
  cohort_config_t* c = NULL;
  assert_int_equal(cohort_config_create(&c), COHORT_OK);
  for (; kv && kv[0]; kv += 2) assert_int_equal(cohort_config_set(c, kv[0], kv[1]), COHORT_OK);
  return c;
}

#define INIT(v)               \
  memset(&(v), 0, sizeof(v)); \
  (v).struct_size = sizeof(v)

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

/* 30 raw 4x4 images whose pixels equal their index, labelled by index % 10. */
static uint8_t g_pixels[30 * 16];
static int32_t g_labels[30];
static int64_t g_img_shape[3] = {30, 4, 4};
static int64_t g_lab_shape[1] = {30};

static void memory_tensors(DLTensor* images, DLTensor* labels) {
  for (int i = 0; i < 30; ++i) {
    memset(g_pixels + 16 * i, i, 16);
    g_labels[i] = i % 10;
  }
  memset(images, 0, sizeof *images);
  images->data = g_pixels;
  images->device.device_type = kDLCPU;
  images->ndim = 3;
  images->dtype.code = kDLUInt;
  images->dtype.bits = 8;
  images->dtype.lanes = 1;
  images->shape = g_img_shape;
  *labels = *images;
  labels->data = g_labels;
  labels->ndim = 1;
  labels->dtype.code = kDLInt;
  labels->dtype.bits = 32;
  labels->shape = g_lab_shape;
}

static void null_arguments_are_rejected(void** state) {
  (void)state;
  cohort_pipeline_t* p = NULL;
  assert_int_equal(cohort_pipeline_create(NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "cohort_pipeline_create"));
  assert_true(contains(cohort_last_error(), "out"));
  cohort_batch_t batch;
  INIT(batch);
  assert_int_equal(cohort_pipeline_next(NULL, &batch), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "pipeline is NULL"));
  int64_t steps = 0;
  assert_int_equal(cohort_pipeline_steps_per_epoch(NULL, &steps), COHORT_ERR_INVALID_ARGUMENT);
  cohort_pipeline_info_t info;
  INIT(info);
  assert_int_equal(cohort_pipeline_info(NULL, &info), COHORT_ERR_INVALID_ARGUMENT);
  cohort_pipeline_stats_t stats;
  INIT(stats);
  assert_int_equal(cohort_pipeline_stats(NULL, &stats), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_pipeline_seek(NULL, 0, 0), COHORT_ERR_INVALID_ARGUMENT);
  int64_t at_epoch = 0, at_step = 0;
  assert_int_equal(cohort_pipeline_position(NULL, &at_epoch, &at_step), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_pipeline_verdict(NULL, NULL, 0, NULL), COHORT_ERR_INVALID_ARGUMENT);
  DLTensor images, labels;
  memory_tensors(&images, &labels);
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, NULL, NULL, &labels, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, NULL, &images, NULL, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_null(p);
  assert_int_equal(cohort_data_inspect(NULL, NULL, 1, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_data_verify(NULL, NULL, NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_data_pack(NULL, NULL, "x", 1, NULL, NULL, NULL), COHORT_ERR_INVALID_ARGUMENT);
  cohort_pipeline_destroy(NULL);
}

static void missing_path_and_bad_options_fail_at_create(void** state) {
  (void)state;
  cohort_pipeline_t* p = NULL;
  const char* missing[] = {"data_dir", "/nonexistent/cohort/data", NULL};
  cohort_config_t* c = config_of(missing);
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_ERR_IO);
  assert_true(contains(cohort_last_error(), "/nonexistent/cohort/data"));
  assert_null(p);
  cohort_config_destroy(c);
  const char* bad_mean[] = {"mean", "0.5,abc", NULL};
  c = config_of(bad_mean);
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "mean"));
  cohort_config_destroy(c);
  /* An empty folder is an empty dataset. */
  char dir[] = "/tmp/cohort-capi-XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char* empty[] = {"data_dir", dir, NULL};
  c = config_of(empty);
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_ERR_INVALID_ARGUMENT);
  cohort_config_destroy(c);
  rmdir(dir);
}

static void memory_errors_name_what_is_wrong(void** state) {
  (void)state;
  cohort_pipeline_t* p = NULL;
  DLTensor images, labels;
  memory_tensors(&images, &labels);
  images.dtype.code = kDLFloat;
  images.dtype.bits = 32;
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, NULL, &images, &labels, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "uint8"));
  memory_tensors(&images, &labels);
  g_lab_shape[0] = 29;
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, NULL, &images, &labels, &p), COHORT_ERR_INVALID_ARGUMENT);
  g_lab_shape[0] = 30;
  const char* classes[] = {"num_classes", "5", NULL};
  cohort_config_t* c = config_of(classes);
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, c, &images, &labels, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "label"));
  cohort_config_destroy(c);
  const char* drop[] = {"batch_size", "64", "remainder", "drop", NULL};
  c = config_of(drop);
  assert_int_equal(cohort_pipeline_create_from_memory(NULL, c, &images, &labels, &p), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "remainder"));
  cohort_config_destroy(c);
}

static void memory_batches_cover_the_epoch_and_resume(void** state) {
  (void)state;
  cohort_runtime_t* rt = NULL;
  assert_int_equal(cohort_runtime_create(NULL, &rt), COHORT_OK);
  const char* kv[] = {"batch_size", "8", "augment", "none", "image_dtype", "u8", "data_format", "NHWC", NULL};
  cohort_config_t* c = config_of(kv);
  DLTensor images, labels;
  memory_tensors(&images, &labels);
  cohort_pipeline_t* p = NULL;
  assert_int_equal(cohort_pipeline_create_from_memory(rt, c, &images, &labels, &p), COHORT_OK);
  cohort_runtime_destroy(rt); /* the pipeline keeps it alive */
  cohort_pipeline_info_t info;
  INIT(info);
  assert_int_equal(cohort_pipeline_info(p, &info), COHORT_OK);
  assert_int_equal(info.steps_per_epoch, 4);
  assert_int_equal(info.dataset_size, 30);
  assert_int_equal(info.height, 4);
  assert_int_equal(info.channels, 1);
  int seen[30] = {0};
  int64_t third_step_first_pixel = -1;
  for (int step = 0; step < 4; ++step) {
    cohort_batch_t b;
    INIT(b);
    assert_int_equal(cohort_pipeline_next(p, &b), COHORT_OK);
    assert_int_equal(b.step, step);
    assert_int_equal(b.images.ndim, 4);
    assert_int_equal(b.images.shape[0], 8);
    assert_int_equal(b.images.shape[3], 1);
    assert_int_equal(b.labels.dtype.bits, 32);
    assert_int_equal(b.valid, step == 3 ? 6 : 8);
    for (int64_t i = 0; i < b.valid; ++i) {
      uint8_t v = ((uint8_t*)b.images.data)[i * 16];
      assert_int_equal(((int32_t*)b.labels.data)[i], v % 10);
      seen[v]++;
    }
    if (step == 2) third_step_first_pixel = ((uint8_t*)b.images.data)[0];
  }
  for (int i = 0; i < 30; ++i) assert_int_equal(seen[i], 1);
  /* After the last batch of epoch 0, the next one is step 0 of epoch 1. */
  int64_t at_epoch = -1, at_step = -1;
  assert_int_equal(cohort_pipeline_position(p, &at_epoch, &at_step), COHORT_OK);
  assert_true(at_epoch == 1 && at_step == 0);
  assert_int_equal(cohort_pipeline_seek(p, 0, 2), COHORT_OK);
  assert_int_equal(cohort_pipeline_position(p, &at_epoch, NULL), COHORT_OK);
  assert_int_equal(cohort_pipeline_position(p, NULL, &at_step), COHORT_OK);
  assert_true(at_epoch == 0 && at_step == 2);
  cohort_batch_t b;
  INIT(b);
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_OK);
  assert_int_equal(b.step, 2);
  assert_int_equal(((uint8_t*)b.images.data)[0], third_step_first_pixel);
  assert_int_equal(cohort_pipeline_seek(p, 0, 4), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_pipeline_seek(p, -1, 0), COHORT_ERR_INVALID_ARGUMENT);
  cohort_pipeline_stats_t stats;
  INIT(stats);
  assert_int_equal(cohort_pipeline_stats(p, &stats), COHORT_OK);
  assert_int_equal(stats.batches, 1);
  size_t needed = 0;
  assert_int_equal(cohort_pipeline_verdict(p, NULL, 0, &needed), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(needed > 1);
  char* text = malloc(needed);
  assert_int_equal(cohort_pipeline_verdict(p, text, needed, NULL), COHORT_OK);
  free(text);
  cohort_pipeline_destroy(p);
  cohort_config_destroy(c);
}

static void struct_size_is_checked(void** state) {
  (void)state;
  const char* kv[] = {"batch_size", "2", "image_size", "8", NULL};
  cohort_config_t* c = config_of(kv);
  cohort_pipeline_t* p = NULL;
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_OK); /* synthetic */
  cohort_batch_t b = {0};
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "struct_size"));
  b.struct_size = sizeof b + 8;
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_INVALID_ARGUMENT);
  /* No field at all, or a DLTensor cut in two: refused, and no batch is used up. */
  b.struct_size = 8;
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "batch->struct_size is 8, which is not the size of any version"));
  b.struct_size = offsetof(cohort_batch_t, images) + sizeof(DLTensor) / 2;
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_INVALID_ARGUMENT);
  /* An older, shorter struct is filled up to its size. */
  b.struct_size = offsetof(cohort_batch_t, valid_mask);
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_OK);
  assert_int_equal(b.images.shape[2], 8);
  /* One field smaller than today's: `step` is not written... */
  cohort_batch_t older;
  INIT(older);
  older.struct_size = offsetof(cohort_batch_t, step);
  older.step = -3;
  assert_int_equal(cohort_pipeline_next(p, &older), COHORT_OK);
  assert_int_equal(older.step, -3);
  /* ...and the refused calls used up nothing: this is the third batch (step 2). */
  cohort_batch_t full;
  INIT(full);
  assert_int_equal(cohort_pipeline_next(p, &full), COHORT_OK);
  assert_int_equal(full.step, 2);
  cohort_pipeline_info_t info;
  INIT(info);
  info.struct_size = 1;
  assert_int_equal(cohort_pipeline_info(p, &info), COHORT_ERR_INVALID_ARGUMENT);
  INIT(info);
  info.struct_size = offsetof(cohort_pipeline_info_t, prefetch_depth);
  info.prefetch_depth = -1;
  assert_int_equal(cohort_pipeline_info(p, &info), COHORT_OK);
  assert_true(info.height == 8 && info.prefetch_depth == -1);
  cohort_pipeline_stats_t stats;
  INIT(stats);
  stats.struct_size = offsetof(cohort_pipeline_stats_t, mean_decode_queue);
  stats.mean_decode_queue = -1;
  assert_int_equal(cohort_pipeline_stats(p, &stats), COHORT_OK);
  assert_true(stats.batches == 3 && stats.mean_decode_queue == -1);
  cohort_pipeline_destroy(p);
  cohort_config_destroy(c);
}

static void write_bytes(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void lines(const char* line, void* user) {
  int* n = user;
  (*n)++;
  (void)line;
}

static void bad_images_skip_or_fail_and_tools_report_them(void** state) {
  (void)state;
  char dir[] = "/tmp/cohort-capi-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/cat", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/cat/not_a.jpg", dir);
  write_bytes(path, "GIF89a....", 10);
  const char* fail_kv[] = {"data_dir", dir, "batch_size", "1", "on_error", "fail", NULL};
  cohort_config_t* c = config_of(fail_kv);
  cohort_pipeline_t* p = NULL;
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_OK);
  cohort_batch_t b;
  INIT(b);
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_JPEG);
  assert_true(contains(cohort_last_error(), "not_a.jpg"));
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_JPEG);
  cohort_pipeline_destroy(p);
  cohort_config_destroy(c);
  /* Under on_error=skip, an epoch of nothing but bad samples is an error too, whatever
   * max_skipped_fraction allows; the skipped count reaches the stats. */
  const char* skip_kv[] = {"data_dir", dir, "batch_size", "1", "error_log_limit", "0", "max_skipped_fraction",
                           "1",        NULL};
  c = config_of(skip_kv);
  assert_int_equal(cohort_pipeline_create(NULL, c, &p), COHORT_OK);
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_CORRUPT_DATA);
  assert_true(contains(cohort_last_error(), "every one of the 1 samples"));
  assert_true(contains(cohort_last_error(), "not_a.jpg"));
  assert_int_equal(cohort_pipeline_next(p, &b), COHORT_ERR_CORRUPT_DATA);
  cohort_pipeline_stats_t st;
  INIT(st);
  assert_int_equal(cohort_pipeline_stats(p, &st), COHORT_OK);
  assert_int_equal(st.skipped, 1);
  assert_int_equal(st.images, 0);
  /* The bad JPEG was read from storage and failed while decoding: both stages count. */
  assert_true(st.bytes_read > 0 && st.read_cpu_s > 0 && st.decode_cpu_s > 0);
  assert_non_null(st.limiting_stage);
  /* A struct from before `skipped` was appended is filled up to its size only. */
  cohort_pipeline_stats_t old;
  memset(&old, 0x5a, sizeof old);
  old.struct_size = offsetof(cohort_pipeline_stats_t, skipped);
  assert_int_equal(cohort_pipeline_stats(p, &old), COHORT_OK);
  assert_int_equal(old.batches, 1);
  assert_int_equal(old.skipped, 0x5a5a5a5a5a5a5a5a);
  cohort_pipeline_destroy(p);
  cohort_config_destroy(c);
  int64_t broken = 0;
  int count = 0;
  assert_int_equal(cohort_data_verify(NULL, dir, lines, &count, &broken), COHORT_OK);
  assert_int_equal(broken, 1);
  assert_true(count >= 2);
  count = 0;
  assert_int_equal(cohort_data_inspect(NULL, dir, 5, lines, &count), COHORT_OK);
  assert_true(count >= 3);
  /* Packed into the folder itself, the output is a sub-folder without images: the
   * folder is then no longer an unambiguous image folder. */
  char out[300];
  snprintf(out, sizeof out, "%s/packed", dir);
  int64_t written = -1;
  assert_int_equal(cohort_data_pack(NULL, dir, out, 1, NULL, NULL, &written), COHORT_OK);
  assert_int_equal(written, 0);
  assert_int_equal(cohort_data_pack(NULL, dir, out, 0, NULL, NULL, &written), COHORT_ERR_INVALID_ARGUMENT);
  assert_int_equal(cohort_data_inspect(NULL, dir, 5, lines, &count), COHORT_ERR_INVALID_ARGUMENT);
  assert_true(contains(cohort_last_error(), "'packed/'"));
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(null_arguments_are_rejected),
      cmocka_unit_test(missing_path_and_bad_options_fail_at_create),
      cmocka_unit_test(memory_errors_name_what_is_wrong),
      cmocka_unit_test(memory_batches_cover_the_epoch_and_resume),
      cmocka_unit_test(struct_size_is_checked),
      cmocka_unit_test(bad_images_skip_or_fail_and_tools_report_them),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
