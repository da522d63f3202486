// Dropout masks from the counter-based RNG: element i of (seed, stream) is kept with
// probability 1 - p and scaled by 1 / (1 - p). The mask is the same on any thread
// count or device (the CPU backend draws it with backend/cpu/dropout_mask.h).
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "kernels/philox.h"

namespace cohort::kernels {

// The factor element i is multiplied by: 0 or 1 / (1 - p).
COHORT_HD float dropout_factor(uint64_t i, uint64_t stream, uint64_t seed, float p) {
  const Philox4 r = philox4x32(i >> 2, stream, seed);
  // The word picked by selects: indexing r.v by i & 3 would put r in a GPU's local memory.
  const uint32_t word = (i & 2) ? ((i & 1) ? r.v[3] : r.v[2]) : ((i & 1) ? r.v[1] : r.v[0]);
  const float u = uniform01(word);
  return u < p ? 0.f : 1.f / (1.f - p);
}

}  // namespace cohort::kernels
