// Runs one mpirun command: forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to it, relays its
// output while it runs, stops it when it reported a lost host but does not end, or when
// cohortrun's own watch (link_watch.h) stops hearing from a host, and makes sure that
// nothing it started outlives it (cohortrun is a child subreaper, and kills whatever is
// left when mpirun is gone).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "failure.h"
#include "link_watch.h"

namespace cohortrun {

struct JobOptions {
  // Called with each complete line of the job's stdout (which is then piped through
  // cohortrun instead of going straight to cohortrun's stdout).
  std::function<void(const std::string&)> on_stdout_line;
  double grace_s = 5;  // after a forwarded signal, how long mpirun has before SIGKILL
  // After mpirun reports that it lost a host (a link down, the host gone), how long it has
  // to end the job before cohortrun kills it (0: no limit). Tearing a job down can wait
  // on the host that is gone.
  double lost_host_end_s = 0;
  // cohortrun's own watch over the links to the ranks' hosts: the ranks' monitors learn
  // where it listens from kLinkWatchVariable in mpirun's environment (mpirun's command
  // passes it on with -x). A host silent for silence_s() ends the job: mpirun gets
  // SIGTERM, and SIGKILL once the timeout has passed since the host was last heard.
  std::optional<LinkWatch> link_watch;
};

// mpirun's exit status for a job that lost a host (Open MPI's ORTE_ERR_COMM_FAILURE, -51);
// cohortrun exits with it too when it has to stop such a job itself.
inline constexpr int kLostHostStatus = 205;

struct JobResult {
  int exit_status = 0;                 // what cohortrun exits with: the job's status, 128+N for signal N
  int interrupted_by = 0;              // the signal cohortrun received and forwarded, or 0
  std::optional<RankFailure> failure;  // which rank failed, when mpirun said so
  std::string mpirun_stderr;           // what mpirun wrote to stderr (the tail)
  double stopped_lost_host_s = 0;      // > 0: mpirun had reported a lost host, had not ended this
                                       // many seconds later, and cohortrun killed it
};

// Throws std::runtime_error when mpirun cannot be started at all.
JobResult run_job(const std::vector<std::string>& argv, const JobOptions& options = {});

// Tells the user on stderr how a failed or interrupted job ended (nothing when it succeeded).
void report_job(const JobResult& result, int np);

}  // namespace cohortrun
