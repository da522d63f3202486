// Restarts of a failed job (--max-restarts): which host a failure points at, where the
// next attempt runs (--exclude-failed-hosts, --min-np), and the request each attempt
// runs. Pure functions of their arguments; main.cc runs the attempts.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "command_line.h"
#include "failure.h"
#include "hosts.h"

namespace cohortrun {

// Where one attempt runs.
struct Attempt {
  int np = 0;
  std::vector<Host> hosts;  // empty: no host list was given (this machine only)
};

// The first attempt: -np and the hosts of -H or --hostfile (read here).
Attempt first_attempt(const Request& request);

// The index in `hosts` of the host a failure points at, or -1 when it cannot be told.
// A host is found by the name mpirun, the rank monitor or cohortrun's watch reported
// (or the address the watch heard it from);
// else, for a failed rank or a host the watch lost, by the rank when ranks fill each
// host's slots in order (`by_slot`: -map-by slot and np within the slots); else, for a lost daemon, as the daemon's
// position among the hosts that are not this machine (`is_local`), in host-list order, which is the order in which
// mpirun numbers its remote daemons.
int failed_host(const std::vector<Host>& hosts, int np, bool by_slot, const RankFailure& failure,
                const std::function<bool(const std::string&)>& is_local);

// "rank 2" or "ranks 2-3": the ranks on hosts[index] when ranks fill each host's slots
// in order ("" for an index out of range or a host without ranks).
std::string ranks_on_host(const std::vector<Host>& hosts, int np, int index);

// Whether a host-list entry names this machine: its host name, localhost, or an address
// of one of its interfaces (no name is looked up).
bool is_this_machine(const std::string& host);

struct RestartPlan {
  Attempt next;
  std::string dropped;  // the host left out of the next attempt, or ""
  std::string kept;     // why the failed host stays in, or "" (nothing to decide)
};

// Where the attempt after a failure runs. With `exclude`, the failed host (index into
// current.hosts, -1 = unknown) is left out when the other hosts still give at least
// `min_np` slots (0 means current.np); the next attempt then runs min(np, their slots)
// ranks. Otherwise it runs where the failed one did.
RestartPlan plan_restart(const Attempt& current, bool exclude, int min_np, int failed_index);

// The request of restart number `restart` (0 = the first run) on `attempt`: its hosts as
// -H, its rank count, COHORT_RESUME=true on restarts (unless the command line set it),
// and a restart's own --output-dir sub-folder, restart.N.
Request attempt_request(const Request& request, const Attempt& attempt, int restart);

// "h1:2,h2:2".
std::string host_list_text(const std::vector<Host>& hosts);

}  // namespace cohortrun
