// The per-layer profile of training steps: forward, backward and reorder time of every
// layer (from the backend's plan), the optimizer, and the measured step time beside
// their sum, as a table for people (`cohort-train --profile`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace cohort {

struct Profile {
  std::vector<std::string> names, kinds;  // per layer, as in the net
  backend::PlanProfile plan;              // seconds per layer, summed over the passes
  int64_t steps = 0;                      // training steps recorded
  double step_s = 0;                      // their measured time, summed
  double optimizer_s = 0;                 // their optimizer time, summed
};

// Milliseconds per step: one row per layer (forward, backward, reorders, total), the
// optimizer, the profiled total, and the measured step time with the share the
// profile accounts for. For a device plan (layers timed by events on its stream) also
// the time of the step outside the layers' kernels.
std::string format_profile(const Profile& p);

}  // namespace cohort
