// The mpirun command of a cohortrun request: everything checked that can be checked
// before anything starts (mpirun, the program, hosts, settings), then the argument
// vector built. A pure function of the request and a snapshot of this process.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "command_line.h"
#include "job.h"
#include "link_watch.h"

namespace cohortrun {

// What build_plan needs to know about the process that runs cohortrun.
struct Context {
  std::map<std::string, std::string> env;  // the environment
  bool root = false;                       // euid is 0
  bool stdout_tty = false;                 // cohortrun's stdout is a terminal
  int cores = 1;                           // cores of this host (slots when no -H)
  std::string cwd;                         // to make --output-dir absolute
  std::string monitor;                     // cohortrun-monitor next to this cohortrun ("" = none)
};

// The context of the calling process.
Context current_context();

// Whether output goes to a terminal a person watches: stdout is a tty and this is not
// a notebook's `!command` (IPython runs those on a pty; Jupyter kernels set JPY_PARENT_PID).
bool user_sees_terminal(bool stdout_isatty, const std::map<std::string, std::string>& env);

struct Plan {
  std::vector<std::string> argv;  // argv[0] is the mpirun to execute
  int slots = 0;                  // slots known (from -H, --hostfile, or cores)
  bool oversubscribed = false;    // np > slots
  std::string output_dir;         // absolute --output-dir, or ""
  bool monitored = true;          // each rank runs under cohortrun-monitor (or it was not asked for)
  bool ranks_fill_slots = true;   // ranks fill each host's slots in list order (-map-by slot, not oversubscribed)
  int cores_per_rank = 0;         // each rank bound to this many cores of its own (0: not bound)
  // cohortrun watches the links to the hosts itself (link_watch.h): --link-timeout on
  // hosts given by -H or --hostfile, each rank under cohortrun-monitor, not --dry-run.
  bool link_watch = false;
};

// How each job of the request runs: with --link-timeout, mpirun's end_s() after it
// reports a lost host, and cohortrun's own watch where the plan has one.
JobOptions job_options(const Request& request, const Plan& plan);

// Throws UsageError for a program that is not found or not executable, a missing
// mpirun, a malformed host list or hostfile, an invalid COHORT_* variable in the
// environment, and --mpi-args that conflict with cohortrun's own options.
Plan build_plan(const Request& request, int np, const Context& context);

// Where `name` is found on `path` (a PATH value), or "" (names with '/' are checked as given).
std::string find_executable(const std::string& name, const std::string& path);

}  // namespace cohortrun
