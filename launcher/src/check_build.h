// cohortrun --check-build: what this build of cohort can do, from the public C API.
#pragma once

#include <string>

namespace cohortrun {

// The report printed by --check-build (mpirun: the mpirun found, or "").
std::string check_build_report(const std::string& mpirun);

}  // namespace cohortrun
