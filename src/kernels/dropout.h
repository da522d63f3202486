// Dropout masks from the counter-based RNG: element i of (seed, stream) is kept with
// probability 1 - p and scaled by 1 / (1 - p). The mask is recomputed in backward
// instead of being stored, and is the same on any thread count or device.
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "kernels/philox.h"
#include "kernels/reduce.h"

namespace cohort::kernels {

// The factor element i is multiplied by: 0 or 1 / (1 - p).
COHORT_HD float dropout_factor(uint64_t i, uint64_t stream, uint64_t seed, float p) {
  Philox4 r = philox4x32(i >> 2, stream, seed);
  float u = uniform01(r.v[i & 3]);
  return u < p ? 0.f : 1.f / (1.f - p);
}

// dst[i] = src[i] * dropout_factor(offset + i); a block of four shares one Philox call.
// S is the storage type, C its codec (kernels/reduce.h): f32 as is, bf16 through f32.
template <typename S, typename C = PlainCodec<S>>
inline void dropout_apply(const S* src, S* dst, int64_t n, uint64_t offset, uint64_t stream, uint64_t seed, float p) {
  const float scale = 1.f / (1.f - p);
  auto one = [&](int64_t i) {
    dst[i] = C::store(C::load(src[i]) * dropout_factor(offset + static_cast<uint64_t>(i), stream, seed, p));
  };
  int64_t i = 0;
  for (; i < n && ((offset + static_cast<uint64_t>(i)) & 3) != 0; ++i) one(i);
  for (; i + 4 <= n; i += 4) {
    Philox4 r = philox4x32((offset + static_cast<uint64_t>(i)) >> 2, stream, seed);
    for (int j = 0; j < 4; ++j)
      dst[i + j] = uniform01(r.v[j]) < p ? C::store(0.f) : C::store(C::load(src[i + j]) * scale);
  }
  for (; i < n; ++i) one(i);
}

}  // namespace cohort::kernels
