// f32 ↔ IEEE half or bfloat16 for gradient compression on the wire (compression=f16
// or bf16); the conversions are kernels/half.h's, shared with the engine's f16/bf16
// reductions.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/hd.h"

namespace cohort::kernels {

COHORT_HD uint16_t compress_f16(float value) { return float_to_half(value); }
COHORT_HD float decompress_f16(uint16_t h) { return half_to_float(h); }

// out[i] = f16(in[i] × scale) and out[i] = f32(in[i]) × scale, for the wire.
struct CompressF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, uint16_t* out, const float* in) const { out[i] = compress_f16(in[i] * scale); }
};

struct DecompressF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, float* out, const uint16_t* in) const { out[i] = decompress_f16(in[i]) * scale; }
};

// The same with bfloat16 (f32's exponent range: no overflow where f16 would have one).
struct CompressBF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, uint16_t* out, const float* in) const { out[i] = float_to_bf16(in[i] * scale); }
};

struct DecompressBF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, float* out, const uint16_t* in) const { out[i] = bf16_to_float(in[i]) * scale; }
};

}  // namespace cohort::kernels
