// Turns MPI return codes into cohort errors that name the call and hint at a cause.
#pragma once

#include <mpi.h>

#include <string>

#include "core/status.h"

namespace cohort {

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string mpi_error_text(int code);

// Throws Error(kMpi) naming `call` when rc != MPI_SUCCESS.
inline void mpi_check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) fail(Code::kMpi, call, " failed: ", mpi_error_text(rc));
}

}  // namespace cohort
