/* cohort-data: pack an image folder into TFRecord shards, inspect any dataset cohort
 * reads, verify every record and image. Built only on the public C API.
 *
 *   cohort-data pack IMAGE_DIR OUT_DIR [--shards N]
 *   cohort-data inspect PATH [--limit N]
 *   cohort-data verify PATH
 *   cohort-data bench PATH [--max-threads N] [--batches N]
 *
 * Any registry option may be given as --key=value (e.g. --data_split=validation,
 * --label_offset=1, --max_image_pixels=...). Exit status: 0 success, 1 broken data
 * found (verify), 2 usage or other errors. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/cohort.h"

static void print_line(const char* line, void* user) {
  (void)user;
  puts(line);
}

static int usage(const char* why) {
  if (why) fprintf(stderr, "cohort-data: %s\n\n", why);
  fprintf(
      stderr,
      "usage: cohort-data pack IMAGE_DIR OUT_DIR [--shards N]   pack class sub-folders into TFRecord shards + .idx\n"
      "       cohort-data inspect PATH [--limit N]              records, classes and image sizes of a dataset\n"
      "       cohort-data verify PATH                           check every CRC and index, decode every image fully\n"
      "       cohort-data bench PATH [--max-threads N] [--batches N]\n"
      "                                                         run the input pipeline alone at 1..N decode threads\n"
      "                                                         (default: the cores): images/sec and CPU per image\n"
      "                                                         of each stage\n"
      "Options of the data group (cohort-options data) are accepted as --key=value.\n");
  return 2;
}

static int fail(const char* what) {
  fprintf(stderr, "cohort-data %s: %s\n", what, cohort_last_error());
  return 2;
}

/* Takes "--name N" or "--name=N" out of args; returns 1 when found. */
static int take_int(int* argc, char** argv, const char* name, long* value, int* bad) {
  size_t n = strlen(name);
  for (int i = 1; i < *argc; ++i) {
    const char* v = NULL;
    int used = 1;
    if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') {
      v = argv[i] + n + 1;
    } else if (strcmp(argv[i], name) == 0 && i + 1 < *argc) {
      v = argv[i + 1];
      used = 2;
    } else {
      continue;
    }
    char* end = NULL;
    *value = strtol(v, &end, 10);
    if (!*v || *end) *bad = 1;
    for (int j = i; j + used < *argc; ++j) argv[j] = argv[j + used];
    *argc -= used;
    return 1;
  }
  return 0;
}

/* The pipeline alone at 1..max_threads decode threads: each run takes one batch to
 * start, then `batches` batches are measured (the pipeline's own statistics). */
static int bench(const cohort_config_t* base, const char* path, long max_threads, long batches) {
  printf("%-8s %11s %8s %8s %8s %8s %8s %9s  %s\n", "threads", "images/sec", "read", "decode", "augment", "assemble",
         "total", "MB/s", "limiting stage");
  printf("%-8s %11s %44s\n", "", "", "(ms of CPU per image)");
  for (long t = 1; t <= max_threads; ++t) {
    cohort_config_t* cfg = NULL;
    cohort_pipeline_t* p = NULL;
    char threads[32];
    snprintf(threads, sizeof threads, "%ld", t);
    int ok = cohort_config_clone(base, &cfg) == COHORT_OK && cohort_config_set(cfg, "data_dir", path) == COHORT_OK &&
             cohort_config_set(cfg, "decode_threads", threads) == COHORT_OK &&
             cohort_pipeline_create(NULL, cfg, &p) == COHORT_OK;
    cohort_batch_t b = {.struct_size = sizeof b};
    for (long i = 0; ok && i <= batches; ++i) ok = cohort_pipeline_next(p, &b) == COHORT_OK;
    cohort_pipeline_stats_t s = {.struct_size = sizeof s};
    ok = ok && cohort_pipeline_stats(p, &s) == COHORT_OK;
    if (ok) {
      const double per = 1e3 / (double)(s.decoded > 0 ? s.decoded : 1);
      const double total = s.read_cpu_s + s.decode_cpu_s + s.augment_cpu_s + s.assemble_cpu_s;
      printf("%-8ld %11.1f %8.3f %8.3f %8.3f %8.3f %8.3f %9.1f  %s\n", t, s.images_per_sec, s.read_cpu_s * per,
             s.decode_cpu_s * per, s.augment_cpu_s * per, s.assemble_cpu_s * per, total * per,
             s.elapsed_s > 0 ? (double)s.bytes_read / s.elapsed_s / 1e6 : 0, s.limiting_stage);
      fflush(stdout);
    }
    cohort_pipeline_destroy(p);
    cohort_config_destroy(cfg);
    if (!ok) return fail("bench");
  }
  return 0;
}

int main(int argc, char** argv) {
  cohort_config_t* cfg = NULL;
  if (cohort_config_create(&cfg) != COHORT_OK) return fail("config");
  char** rest = malloc(sizeof(char*) * (size_t)(argc + 1));
  int nrest = 0;
  if (!rest) {
    cohort_config_destroy(cfg);
    return 2;
  }
  long shards = 1, limit = 10, max_threads = sysconf(_SC_NPROCESSORS_ONLN), batches = 20;
  int bad = 0;
  take_int(&argc, argv, "--shards", &shards, &bad);
  take_int(&argc, argv, "--limit", &limit, &bad);
  take_int(&argc, argv, "--max-threads", &max_threads, &bad);
  take_int(&argc, argv, "--batches", &batches, &bad);
  int status = 0;
  if (bad) {
    status = usage("--shards, --limit, --max-threads and --batches take a whole number");
  } else if (max_threads < 1 || batches < 1) {
    status = usage("--max-threads and --batches must be at least 1");
  } else if (cohort_config_parse_args(cfg, argc, argv, COHORT_PARSE_STRICT, &nrest, rest) != COHORT_OK) {
    status = fail("options");
  } else if (nrest >= 2 && (strcmp(rest[1], "-h") == 0 || strcmp(rest[1], "--help") == 0)) {
    status = usage(NULL) - 2;
  } else if (nrest == 4 && strcmp(rest[1], "pack") == 0) {
    int64_t written = 0;
    if (cohort_data_pack(cfg, rest[2], rest[3], (int)shards, print_line, NULL, &written) != COHORT_OK)
      status = fail("pack");
  } else if (nrest == 3 && strcmp(rest[1], "inspect") == 0) {
    if (cohort_data_inspect(cfg, rest[2], limit, print_line, NULL) != COHORT_OK) status = fail("inspect");
  } else if (nrest == 3 && strcmp(rest[1], "bench") == 0) {
    status = bench(cfg, rest[2], max_threads, batches);
  } else if (nrest == 3 && strcmp(rest[1], "verify") == 0) {
    int64_t broken = 0;
    if (cohort_data_verify(cfg, rest[2], print_line, NULL, &broken) != COHORT_OK) {
      status = fail("verify");
    } else if (broken > 0) {
      status = 1;
    }
  } else {
    status = usage(nrest < 2 ? "missing command" : "unknown command or wrong number of arguments");
  }
  free(rest);
  cohort_config_destroy(cfg);
  return status;
}
