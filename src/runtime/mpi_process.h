// The process-wide MPI state: initialised once (unless the caller already did),
// finalised once (at exit or by cohort_finalize), poisoned when a peer is lost so
// that every later call fails fast and finalize is skipped.
#pragma once

#include <string>

namespace cohort::mpi_process {

// Initialises MPI with MPI_THREAD_MULTIPLE unless it is already initialised. Throws
// kInvalidState after finalize or poisoning, kMpi below MPI_THREAD_SERIALIZED.
void ensure_initialized();

// MPI_Finalize if cohort initialised MPI and it is not finalised or poisoned yet.
// Throws kInvalidState while a runtime is alive (its engine thread still uses MPI).
void finalize();

// A runtime that is alive: at process exit, before MPI is finalized, `shut_down` runs
// for each one still registered (a program that returned on an error path without
// destroying its runtime), with a warning. The first registration installs that exit
// handler, after whatever the runtime's construction made, so it runs first.
int add_live_runtime(void (*shut_down)(void*), void* runtime);
// The last step of the runtime's own shutdown: nothing is left to do at exit. (A
// program that exits while another of its threads destroys a runtime races with
// itself; the exit handler waits up to 5 s for such a shutdown to end.)
void remove_live_runtime(int id);

// The thread level MPI provides (valid after ensure_initialized).
int thread_level();
bool initialized_by_cohort();

// Marks the process as having lost a peer; later runtime calls fail with kPeerLost.
void poison(const std::string& reason);
bool poisoned();
// Throws kPeerLost naming the reason when poisoned.
void check_not_poisoned();

}  // namespace cohort::mpi_process
