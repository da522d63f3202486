// cohortrun-monitor: what mpirun starts on each rank for cohortrun (rank_monitor.h).
// A separate program that links nothing but the C++ runtime, so that every rank
// starts without loading libcohort and its libraries.
#include <string>
#include <vector>

#include "rank_monitor.h"

int main(int argc, char** argv) {
  const int skip = argc > 1 && std::string(argv[1]) == "--" ? 2 : 1;
  return cohortrun::run_rank_monitor(std::vector<std::string>(argv + skip, argv + argc));
}
