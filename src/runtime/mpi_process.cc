#include "runtime/mpi_process.h"

#include <mpi.h>

#include <cstdlib>
#include <mutex>

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
};

State& state() {
  static State* s = new State();  // never destroyed: used from the atexit handler
  return *s;
}

void finalize_at_exit() { finalize(); }

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
  if (!s.we_initialized || s.finalized) return;
  s.finalized = true;
  if (s.poisoned) return;  // a lost peer would make MPI_Finalize hang
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
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
