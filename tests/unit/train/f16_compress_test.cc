// f32 ↔ f16 conversion for gradient compression, against the compiler's _Float16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/f16_compress.h"

namespace cohort::kernels {
namespace {

TEST(F16Compress, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = decompress_f16(static_cast<uint16_t>(h));
    const bool nan = ((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(decompress_f16(compress_f16(f))));
    } else {
      EXPECT_EQ(compress_f16(f), h) << "half bits " << h;
    }
  }
}

TEST(F16Compress, EdgeCases) {
  EXPECT_EQ(compress_f16(1.0f), 0x3C00);
  EXPECT_EQ(compress_f16(-2.0f), 0xC000);
  EXPECT_EQ(compress_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(compress_f16(65519.99f), 0x7BFF);  // still rounds down to the largest half
  EXPECT_EQ(compress_f16(65520.0f), 0x7C00);   // ties to even: overflow to inf
  EXPECT_EQ(compress_f16(1e10f), 0x7C00);
  EXPECT_EQ(compress_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(compress_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(compress_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie, to even (zero)
  EXPECT_EQ(compress_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(compress_f16(-0.0f), 0x8000);
  EXPECT_EQ(compress_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, to even
  EXPECT_EQ(compress_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_TRUE(std::isnan(decompress_f16(compress_f16(std::nanf("")))));
}

#if defined(__FLT16_MAX__)
TEST(F16Compress, MatchesCompilerConversionOnRandomFloats) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, sizeof ref_bits);
    ASSERT_EQ(compress_f16(f), ref_bits) << "float bits " << bits;
  }
}
#endif

TEST(F16Compress, ScaledFunctors) {
  float in[3] = {1.0f, -0.5f, 3.0f};
  uint16_t wire[3];
  float out[3];
  CompressF16 c{0.5f};
  DecompressF16 d{4.0f};
  for (int64_t i = 0; i < 3; ++i) c(i, wire, in);
  for (int64_t i = 0; i < 3; ++i) d(i, out, wire);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[2], 6.0f);
}

}  // namespace
}  // namespace cohort::kernels
