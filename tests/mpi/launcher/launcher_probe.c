/* A stand-in rank for cohortrun's tests. It reads its rank and size from Open MPI's
 * environment (no MPI calls, so it starts fast) and does what its options say:
 *   --fail-rank R --exit-code C   rank R exits with status C (others wait to be killed)
 *   --signal-rank R --signal S    rank R raises signal S
 *   --sleep S                     every rank sleeps S seconds, then exits 0
 *   --summary RATE                rank 0 prints a cohort.run/1 summary line whose global
 *                                 images/sec is RATE × size × (1 − 0.05 × (size − 1)),
 *                                 × min(B, 128) / 64 with B = $COHORT_BATCH_SIZE (64 unset)
 *   --fail-when NAME=VALUE        every rank exits with status 3 when $NAME is VALUE
 *   --print-env NAME              every rank prints "rank R NAME=value" (or "unset")
 *   --pid-file DIR                every rank writes its pid to DIR/rank.R.pid
 *   --fail-once DIR               --fail-rank and --signal-rank act only while DIR/failed
 *                                 does not exist; the failing rank creates it (a job that
 *                                 fails once, then succeeds when started again)
 *   --args                        every rank prints each following argument as
 *                                 "rank R arg I=<argument>|" (the rest of the line is the argument)
 * Ranks print "rank R of N ready" first. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v ? atoi(v) : fallback;
}

int main(int argc, char** argv) {
  const int rank = env_int("OMPI_COMM_WORLD_RANK", 0);
  const int size = env_int("OMPI_COMM_WORLD_SIZE", 1);
  int fail_rank = -1, exit_code = 1, signal_rank = -1, sig = SIGSEGV;
  double sleep_s = 0, summary = -1;
  const char* fail_once = NULL;
  printf("rank %d of %d ready\n", rank, size);
  fflush(stdout);
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* key = argv[i];
    const char* value = argv[i + 1];
    if (strcmp(key, "--fail-rank") == 0)
      fail_rank = atoi(value);
    else if (strcmp(key, "--exit-code") == 0)
      exit_code = atoi(value);
    else if (strcmp(key, "--signal-rank") == 0)
      signal_rank = atoi(value);
    else if (strcmp(key, "--signal") == 0)
      sig = atoi(value);
    else if (strcmp(key, "--sleep") == 0)
      sleep_s = atof(value);
    else if (strcmp(key, "--summary") == 0)
      summary = atof(value);
    else if (strcmp(key, "--print-env") == 0) {
      const char* v = getenv(value);
      printf("rank %d %s=%s\n", rank, value, v ? v : "unset");
    } else if (strcmp(key, "--fail-once") == 0) {
      fail_once = value;
    } else if (strcmp(key, "--args") == 0) {
      for (int a = i + 1; a < argc; ++a) printf("rank %d arg %d=%s|\n", rank, a - i - 1, argv[a]);
      break;
    } else if (strcmp(key, "--fail-when") == 0) {
      const char* eq = strchr(value, '=');
      char name[256];
      snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - value) : 0, value);
      const char* v = getenv(name);
      if (eq && v && strcmp(v, eq + 1) == 0) {
        fprintf(stderr, "launcher_probe: rank %d fails: %s\n", rank, value);
        return 3;
      }
    } else if (strcmp(key, "--pid-file") == 0) {
      char path[4096];
      snprintf(path, sizeof path, "%s/rank.%d.pid", value, rank);
      FILE* f = fopen(path, "w");
      if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
    } else {
      fprintf(stderr, "launcher_probe: unknown option %s\n", key);
      return 64;
    }
  }
  fflush(stdout);
  if (fail_once) {
    char marker[4096];
    snprintf(marker, sizeof marker, "%s/failed", fail_once);
    if (access(marker, F_OK) == 0) {
      fail_rank = signal_rank = -1;
    } else if (rank == fail_rank || rank == signal_rank) {
      FILE* f = fopen(marker, "w");
      if (f) fclose(f);
    }
  }
  if (rank == fail_rank) {
    fprintf(stderr, "launcher_probe: rank %d exits with status %d\n", rank, exit_code);
    return exit_code;
  }
  if (rank == signal_rank) raise(sig);
  if (fail_rank >= 0 || signal_rank >= 0) sleep(30); /* killed by mpirun when the other rank fails */
  if (sleep_s > 0) usleep((useconds_t)(sleep_s * 1e6));
  if (summary >= 0 && rank == 0) {
    const int batch = env_int("COHORT_BATCH_SIZE", 64);
    const double rate = summary * size * (1 - 0.05 * (size - 1)) * (batch < 128 ? batch : 128) / 64.0;
    printf("step 10 images/sec: %.1f\n", rate);
    printf(
        "{\"schema\": \"cohort.run/1\", \"model\": \"trivial\", \"ranks\": %d, \"local_ranks\": %d, "
        "\"device\": \"cpu\", \"precision\": \"f32\", \"data\": \"synthetic\", \"batch_per_rank\": %d, "
        "\"global_batch\": %d, \"steps\": 20, \"warmup_steps\": 10, \"images_per_sec\": {\"median\": %.3f, "
        "\"mean\": %.3f, \"stderr\": 0.5, \"jitter\": 1.0}, \"time_fraction\": {\"data_wait\": 0.1, "
        "\"comm_exposed\": 0.05, \"compute\": 0.85}, \"epochs\": 0, \"loss\": 2.3, \"top1\": null, \"top5\": null, "
        "\"wall_s\": 0.2}\n",
        size, size, batch, batch * size, rate, rate);
  }
  return 0;
}
