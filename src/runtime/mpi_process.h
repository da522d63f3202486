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
void finalize();

// The thread level MPI provides (valid after ensure_initialized).
int thread_level();
bool initialized_by_cohort();

// Marks the process as having lost a peer; later runtime calls fail with kPeerLost.
void poison(const std::string& reason);
bool poisoned();
// Throws kPeerLost naming the reason when poisoned.
void check_not_poisoned();

}  // namespace cohort::mpi_process
