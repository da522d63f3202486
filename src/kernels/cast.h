// Casts between f32 and the reduced types at a layer boundary of mixed-precision
// training (backend/precision.h says where they go), written once for host loops and
// CUDA kernels. Rounding is to nearest even, as kernels/half.h does it.
#pragma once

#include <cstdint>

#include "kernels/half.h"
#include "kernels/hd.h"

namespace cohort::kernels {

struct CastF32ToBF16 {
  COHORT_HD void operator()(int64_t i, uint16_t* out, const float* in) const { out[i] = float_to_bf16(in[i]); }
};
struct CastBF16ToF32 {
  COHORT_HD void operator()(int64_t i, float* out, const uint16_t* in) const { out[i] = bf16_to_float(in[i]); }
};
struct CastF32ToF16 {
  COHORT_HD void operator()(int64_t i, uint16_t* out, const float* in) const { out[i] = float_to_half(in[i]); }
};
struct CastF16ToF32 {
  COHORT_HD void operator()(int64_t i, float* out, const uint16_t* in) const { out[i] = half_to_float(in[i]); }
};

// The value an f32 takes after a round trip through bf16 (what a bf16 layer sees of it).
COHORT_HD float round_to_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

}  // namespace cohort::kernels
