#include "runtime/mpi_process.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "comm/mpi/mpi_error.h"
#include "core/logging.h"
#include "core/status.h"

namespace cohort::mpi_process {
namespace {

// The only process-wide mutable state in cohort besides logging (docs/design.md,
// "Threads and who owns what").
struct State {
  std::mutex mu;
  bool we_initialized = false;
  bool finalized = false;
  bool poisoned = false;
  std::string poison_reason;
  int thread_level = MPI_THREAD_SINGLE;
  // Runtimes not shut down yet, by id: what shuts each down.
  std::map<int, std::pair<void (*)(void*), void*>> live;
  int next_live = 0;
  bool exit_handler = false;
};

State& state() {
  static State* s = new State();  // never destroyed: used from the atexit handler
  return *s;
}

// Shuts down the runtimes a program left alive, then finalizes MPI. Each shutdown is
// the collective one cohort_runtime_destroy() runs: the other ranks' collectives that
// this rank never submitted fail with kPeerShutdown, so they stop and shut down too.
void finalize_at_exit() {
  std::map<int, std::pair<void (*)(void*), void*>> live;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    live = s.live;
  }
  if (!live.empty())
    COHORT_LOG_WARN(live.size(), " runtime", live.size() == 1 ? " was" : "s were",
                    " not destroyed before the process exited: shutting ", live.size() == 1 ? "it" : "them",
                    " down now (collective: cohort_runtime_destroy() belongs on every path out of the program, "
                    "error paths included)");
  for (const auto& [id, entry] : live) entry.first(entry.second);
  // A shutdown another thread began leaves the list when it ends (removal is its last
  // step): wait a little for it rather than finalize under its MPI calls.
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard lock(state().mu);
      if (state().live.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  try {
    finalize();
  } catch (const Error&) {
    // A runtime is still shutting down: MPI stays up, and the process exits without
    // finalizing it rather than under a running engine.
  }
}

}  // namespace

void ensure_initialized() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.poisoned) fail(Code::kPeerLost, "a peer was lost earlier (", s.poison_reason, "); restart the job");
  if (s.finalized) fail(Code::kInvalidState, "MPI was already finalized (cohort_finalize); create runtimes before it");
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) fail(Code::kInvalidState, "MPI was already finalized by the program; cohort needs it running");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&s.thread_level);
  } else {
    int provided = MPI_THREAD_SINGLE;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    s.we_initialized = true;
    s.thread_level = provided;
    std::atexit(finalize_at_exit);
  }
  if (s.thread_level < MPI_THREAD_SERIALIZED)
    fail(Code::kMpi, "MPI provides thread level ", s.thread_level, " but cohort needs at least MPI_THREAD_SERIALIZED (",
         MPI_THREAD_SERIALIZED,
         "): initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let cohort initialize it");
}

void finalize() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.live.empty())
    fail(Code::kInvalidState, s.live.size(), " runtime", s.live.size() == 1 ? " is" : "s are", " still alive, and ",
         s.live.size() == 1 ? "its" : "their",
         " collective engine uses MPI: destroy every runtime (cohort_runtime_destroy) before finalizing");
  if (!s.we_initialized || s.finalized) return;
  s.finalized = true;
  if (s.poisoned) return;  // a lost peer would make MPI_Finalize hang
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int add_live_runtime(void (*shut_down)(void*), void* runtime) {
  State& s = state();
  std::lock_guard lock(s.mu);
  const int id = s.next_live++;
  s.live[id] = {shut_down, runtime};
  if (!s.exit_handler) {
    s.exit_handler = true;
    std::atexit(finalize_at_exit);
  }
  return id;
}

void remove_live_runtime(int id) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.live.erase(id);
}

int thread_level() {
  std::lock_guard lock(state().mu);
  return state().thread_level;
}

bool initialized_by_cohort() {
  std::lock_guard lock(state().mu);
  return state().we_initialized;
}

void poison(const std::string& reason) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.poisoned) COHORT_LOG_ERROR("peer lost: ", reason);
  s.poisoned = true;
  if (s.poison_reason.empty()) s.poison_reason = reason;
}

bool poisoned() {
  std::lock_guard lock(state().mu);
  return state().poisoned;
}

void check_not_poisoned() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.poisoned) fail(Code::kPeerLost, "a peer was lost (", s.poison_reason, "); restart the job");
}

}  // namespace cohort::mpi_process
