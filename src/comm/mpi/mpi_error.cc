#include "comm/mpi/mpi_error.h"

namespace cohort {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len)) + " (code " + std::to_string(code) + ")";
}

}  // namespace cohort
