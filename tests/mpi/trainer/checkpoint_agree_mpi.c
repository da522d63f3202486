/* Checkpoint saves agree across ranks, under mpirun: when rank 0 cannot write (its
 * directory is a path through a regular file, or a read-only directory), every rank
 * returns the same error with the same message, and none is left waiting (the ctest
 * timeout catches a hang). A save into a good directory afterwards works everywhere.
 * Only rank 0's directory matters: the other ranks pass a path that does not exist.
 *
 * Run as root, rank 0 writes the read-only directory with the file-system identity of
 * "nobody" (setfsuid affects only the calling thread), since root ignores permissions.
 *
 * With an argument, a directory on a small file system of its own (a tmpfs the caller
 * mounted): a save there works, then rank 0 fills the file system, and the next save
 * fails on every rank alike with "No space left on device", leaving no temporary file
 * and the previous checkpoint loadable. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cohort/cohort.h>

#include "support/rank_check.h"

static int g_rank = 0;

/* Every rank's text equals rank 0's. */
static int same_on_every_rank(const char* text) {
  char mine[1024] = {0}, root[1024] = {0};
  strncpy(mine, text, sizeof mine - 1);
  memcpy(root, mine, sizeof root);
  MPI_Bcast(root, (int)sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = strcmp(mine, root) == 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

/* Saves into `dir` (rank 0's; the others pass a path that does not exist) and checks
 * that every rank fails alike with a message containing `why`. */
static void expect_agreed_failure(cohort_optimizer_t* opt, const char* dir, const char* why, int as_nobody) {
  cohort_checkpoint_info_t info = {.struct_size = sizeof info};
  const char* mine = g_rank == 0 ? dir : "/nonexistent/not/rank0s";
  if (as_nobody) {
    setfsuid(65534);
    CHECK(setfsuid(65534) == 65534, "%s", "rank 0 writes as nobody");
  }
  const cohort_status_t s = cohort_optimizer_save_checkpoint(opt, mine, &info);
  if (as_nobody) setfsuid(0);
  const char* text = cohort_last_error();
  CHECK(s == COHORT_ERR_IO, "saving into '%s' returned %d, expected COHORT_ERR_IO", dir, (int)s);
  CHECK(strstr(text, "rank 0 could not save a checkpoint in") != NULL && strstr(text, why) != NULL,
        "the message names rank 0 and '%s': %s", why, text);
  CHECK(same_on_every_rank(text), "every rank has rank 0's message; this one has: %s", text);
}

/* Rank 0 fills the file system of `dir` with the file `dir`/filler (its path: `filler`). */
static void fill_up(const char* dir, char* filler, size_t size) {
  snprintf(filler, size, "%s/filler", dir);
  if (g_rank != 0) return;
  const int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!CHECK(fd >= 0, "creating %s", filler)) exit(1);
  static char block[65536];
  while (write(fd, block, sizeof block) > 0) {
  }
  CHECK(errno == ENOSPC, "%s fills its file system (errno %d)", filler, errno);
  while (write(fd, block, 1) > 0) {
  }
  close(fd);
}

/* No temporary file of an interrupted write is left in `dir` (rank 0 looks). */
static void expect_no_temporary(const char* dir) {
  if (g_rank != 0) return;
  DIR* d = opendir(dir);
  if (!CHECK(d != NULL, "listing %s", dir)) return;
  for (struct dirent* e = readdir(d); e; e = readdir(d))
    CHECK(strncmp(e->d_name, ".tmp-", 5) != 0, "a temporary file is left in %s: %s", dir, e->d_name);
  closedir(d);
}

/* A full disk: the save before it stays loadable, the failed one leaves nothing. */
static void full_disk(cohort_optimizer_t* opt, const char* dir) {
  cohort_checkpoint_info_t info = {.struct_size = sizeof info, .epoch = 7};
  OK(cohort_optimizer_save_checkpoint(opt, g_rank == 0 ? dir : "/nonexistent/not/rank0s", &info));
  char filler[600];
  fill_up(dir, filler, sizeof filler);
  expect_agreed_failure(opt, dir, "No space left on device", 0);
  expect_no_temporary(dir);
  cohort_checkpoint_info_t got = {.struct_size = sizeof got};
  int found = 0;
  OK(cohort_optimizer_load_checkpoint(opt, dir, &got, &found));
  CHECK(found == 1 && got.epoch == 7, "the checkpoint before the full disk loads: found %d epoch %lld", found,
        (long long)got.epoch);
  if (g_rank == 0) unlink(filler);
}

int main(int argc, char** argv) {
  cohort_config_t* cfg = NULL;
  MUST(cohort_config_create(&cfg));
  MUST(cohort_config_set(cfg, "device", "cpu"));
  MUST(cohort_config_set(cfg, "optimizer", "sgd"));
  MUST(cohort_config_set(cfg, "compute_threads", "1"));
  cohort_runtime_t* rt = NULL;
  MUST(cohort_runtime_create(cfg, &rt));
  MUST(cohort_runtime_rank(rt, &g_rank));
  rank_check_rank = g_rank;
  const int64_t in[1] = {3};
  cohort_model_t* m = NULL;
  MUST(cohort_model_create_custom(rt, cfg, in, 1, &m));
  MUST(cohort_model_add_layer(m, "dense", "fc", NULL, 0, "out=2", NULL));
  MUST(cohort_model_add_layer(m, "softmax_xent", "loss", NULL, 0, "", NULL));
  cohort_optimizer_t* opt = NULL;
  MUST(cohort_optimizer_create(m, cfg, &opt));

  /* Rank 0 prepares the places: a regular file, a read-only directory, a good one. */
  char work[512] = "/tmp/cohort_agree_XXXXXX", file[600], through_file[700], readonly[600], good[600];
  if (g_rank == 0 && !CHECK(mkdtemp(work) != NULL, "mkdtemp %s", work)) exit(1);
  MPI_Bcast(work, (int)sizeof work, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(file, sizeof file, "%s/F", work);
  snprintf(through_file, sizeof through_file, "%s/ck", file);
  snprintf(readonly, sizeof readonly, "%s/readonly", work);
  snprintf(good, sizeof good, "%s/good", work);
  if (g_rank == 0) {
    FILE* f = fopen(file, "w");
    if (!CHECK(f != NULL, "creating %s", file)) exit(1);
    fclose(f);
    if (!CHECK(mkdir(readonly, 0555) == 0 && chmod(work, 0755) == 0, "making %s", readonly)) exit(1);
  }

  expect_agreed_failure(opt, through_file, "Not a directory", 0);
  expect_agreed_failure(opt, readonly, "Permission denied", geteuid() == 0);

  /* The ranks are still in step: a good save and a load work on every rank. */
  cohort_checkpoint_info_t info = {.struct_size = sizeof info, .epoch = 3};
  OK(cohort_optimizer_save_checkpoint(opt, g_rank == 0 ? good : "/nonexistent/not/rank0s", &info));
  cohort_checkpoint_info_t got = {.struct_size = sizeof got};
  int found = 0;
  OK(cohort_optimizer_load_checkpoint(opt, good, &got, &found));
  CHECK(found == 1 && got.epoch == 3, "found %d epoch %lld", found, (long long)got.epoch);
  if (argc > 1) full_disk(opt, argv[1]);

  cohort_optimizer_destroy(opt);
  cohort_model_destroy(m);
  cohort_runtime_destroy(rt);
  cohort_config_destroy(cfg);
  if (g_rank == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    CHECK(system(cmd) == 0, "removing %s", work);
  }
  int all = 0;
  MPI_Allreduce(&rank_check_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) printf("checkpoint_agree_mpi: %d failure(s) on all ranks\n", all);
  cohort_finalize();
  return all ? 1 : 0;
}
