// Which rank failed and why, read from what mpirun prints when a job fails.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cohortrun {

struct RankFailure {
  int rank = -1;
  int exit_code = 0;    // when it exited
  int signal = 0;       // when a signal killed it
  int abort_code = -1;  // when it called MPI_Abort
  int daemon = -1;      // when mpirun lost a host: Open MPI's number of its daemon (rank is -1)
  int lost_rank = -1;   // when cohortrun's watch lost a host: a rank that ran there (rank is -1,
                        // and the reason already names the host's ranks)
  std::string address;  // and the address a connection from there came from
  std::string node;     // "" when mpirun did not say
  std::string reason;   // one line for the user: "rank 1 exited with status 3"
};

// Reads mpirun's stderr text (its help blocks, with the ranks' output in between).
// Recognises MPI_Abort, the rank monitor's line (rank_monitor.h), mpirun's "exited on
// signal", non-zero exit code and exit-without-MPI_Finalize reports, and a host whose
// daemon mpirun lost (a link down, a host gone); nullopt when none is there.
std::optional<RankFailure> find_rank_failure(std::string_view mpirun_stderr);

// "SIGSEGV" for 11, "signal 77" for unknown numbers; signal_number is the inverse (0 if unknown).
std::string signal_name(int signal);
int signal_number(const std::string& name);

}  // namespace cohortrun
