// cohortrun's command line: launcher options, library settings (registry keys, which
// reach the ranks as COHORT_<KEY>), and the program with its arguments. Parsing only
// validates what needs no file system; plan.h checks files, programs and hosts.
#pragma once

#include <string>
#include <vector>

namespace cohortrun {

// One variable the ranks receive as `-x NAME=VALUE`, and which option asked for it.
struct Export {
  std::string name;
  std::string value;
  std::string origin;  // "--batch_size=32", "--env K=V", "--nccl-debug INFO"
};

enum class Mode { kRun, kSweep, kCheckBuild, kHelp, kVersion };

// --link-timeout's default: a job whose host stops answering ends within this many seconds.
inline constexpr int kDefaultLinkTimeoutS = 30;
// The least --link-timeout other than 0: below it keepalive probes would be sent every second
// and a link that drops a few packets could end a healthy job.
inline constexpr int kMinLinkTimeoutS = 10;

// sweep --over KEY=V1,V2,…: a library setting and the values it takes in turn.
struct SweepOption {
  std::string key;                  // registry key
  std::vector<std::string> values;  // canonical
};

struct Request {
  Mode mode = Mode::kRun;
  int np = 0;                    // kRun: ranks (0 = not given)
  std::vector<int> sweep_sizes;  // kSweep: -np 1,2,4
  std::string host_list;         // -H
  std::string hostfile;          // --hostfile
  bool dry_run = false;
  std::vector<std::string> mpi_args;  // each --mpi-args text, unsplit
  std::vector<Export> exports;        // library settings, --env, --nccl-debug, in command-line order
  std::string output_dir;             // --output-dir
  bool tag_output = false;
  bool bind_cores = false;                    // --bind-cores: each rank on cores of its own (this host)
  bool rank_monitor = true;                   // run each rank under cohortrun-monitor
  std::string mpirun;                         // --mpirun PATH ("" = mpirun on PATH)
  int max_restarts = 0;                       // --max-restarts N: start the job again after a failure
  bool exclude_failed_hosts = false;          // --exclude-failed-hosts: restart without the failed rank's host
  int min_np = 0;                             // --min-np M: fewest ranks a restart may use (0 = np)
  int link_timeout_s = kDefaultLinkTimeoutS;  // --link-timeout S (0: Open MPI's own keepalive settings)
  std::string sweep_prefix;                   // sweep: --sweep-out PREFIX (PREFIX.csv, PREFIX.json)
  std::vector<SweepOption> sweep_over;        // sweep: --over, in command-line order
  std::vector<std::string> program;           // PROGRAM ARGS...
};

// Parses everything after argv[0]. Throws UsageError for unknown options (with the
// nearest valid name), bad values (naming the key, value and what is allowed),
// N < 1, and options that conflict with each other (--exclude-failed-hosts without
// --max-restarts or a host list, --min-np above -np or without --exclude-failed-hosts).
Request parse_command_line(const std::vector<std::string>& args);

// The --help text.
std::string usage_text();

}  // namespace cohortrun
