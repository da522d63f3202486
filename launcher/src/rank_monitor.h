// The per-rank side of cohortrun. mpirun starts `cohortrun-monitor -- PROGRAM ARGS`
// (installed next to cohortrun) on every rank; it runs PROGRAM as its child, passes signals on, and exits the
// way PROGRAM did. When PROGRAM fails on its own (not because the job was being torn
// down), it first writes one line naming the rank to stderr, which mpirun relays
// before it acts on the exit. Open MPI 4.1 drops its own "which process failed"
// message in about a quarter of failing jobs, so this line is what cohortrun reads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohortrun {

// The monitor's file name; cohortrun looks for it in its own directory.
inline constexpr std::string_view kRankMonitorName = "cohortrun-monitor";

// Runs the program; returns only when it cannot be started (the status to exit with).
int run_rank_monitor(const std::vector<std::string>& program);

// The report line of a failed rank, and its reading back (from mpirun's stderr, where
// --tag-output may prefix it).
std::string rank_report(int rank, long pid, const std::string& host, int exit_code, int signal);

}  // namespace cohortrun
