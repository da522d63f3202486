// f32 ↔ IEEE half conversion for gradient compression on the wire (compression=f16),
// as bit manipulation so host and device share it: round to nearest even, overflow to
// ±inf, gradual underflow to subnormals, NaN kept a (quiet) NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/hd.h"

namespace cohort::kernels {

COHORT_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

COHORT_HD float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

COHORT_HD uint16_t compress_f16(float value) {
  const uint32_t x = f32_bits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u)  // inf or NaN
    return static_cast<uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (abs < 0x38800000u) {                                               // below 2^-14: a half subnormal (or zero)
    if (abs < 0x33000000u) return sign;                                  // below half of the smallest subnormal, 2^-25
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 → 15) and round the 13 dropped mantissa bits.
  uint32_t h = (abs - 0x38000000u) >> 13;
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may step into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

COHORT_HD float decompress_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_f32(sign);
  // Subnormal: normalise the mantissa.
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_f32(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

// out[i] = f16(in[i] × scale) and out[i] = f32(in[i]) × scale, for the wire.
struct CompressF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, uint16_t* out, const float* in) const { out[i] = compress_f16(in[i] * scale); }
};

struct DecompressF16 {
  float scale;
  COHORT_HD void operator()(int64_t i, float* out, const uint16_t* in) const { out[i] = decompress_f16(in[i]) * scale; }
};

}  // namespace cohort::kernels
