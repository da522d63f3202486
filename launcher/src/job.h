// Runs one mpirun command: forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to it, relays its
// output while it runs, and makes sure that nothing it started outlives it (cohortrun
// is a child subreaper, and kills whatever is left when mpirun is gone).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "failure.h"

namespace cohortrun {

struct JobOptions {
  // Called with each complete line of the job's stdout (which is then piped through
  // cohortrun instead of going straight to cohortrun's stdout).
  std::function<void(const std::string&)> on_stdout_line;
  double grace_s = 5;  // after a forwarded signal, how long mpirun has before SIGKILL
};

struct JobResult {
  int exit_status = 0;                 // what cohortrun exits with: the job's status, 128+N for signal N
  int interrupted_by = 0;              // the signal cohortrun received and forwarded, or 0
  std::optional<RankFailure> failure;  // which rank failed, when mpirun said so
  std::string mpirun_stderr;           // what mpirun wrote to stderr (the tail)
};

// Throws std::runtime_error when mpirun cannot be started at all.
JobResult run_job(const std::vector<std::string>& argv, const JobOptions& options = {});

// Tells the user on stderr how a failed or interrupted job ended (nothing when it succeeded).
void report_job(const JobResult& result, int np);

}  // namespace cohortrun
