// Philox-4x32-10, a counter-based RNG (Salmon et al., SC'11): the random numbers of
// element i depend only on (seed, stream, i), so dropout masks and augmentation draws
// are the same on any thread count or device, and need no state between calls.
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

struct Philox4 {
  uint32_t v[4];
};

COHORT_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Four 32-bit random words for counter (ctr_lo, ctr_hi) under key `seed`.
COHORT_HD Philox4 philox4x32(uint64_t counter, uint64_t stream, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// A float uniformly distributed in [0, 1) from a random word (24 bits of mantissa).
COHORT_HD float uniform01(uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

}  // namespace cohort::kernels
