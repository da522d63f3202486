// The reduction math: f16/bf16 conversions and combine/scale for every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reduce.h"

namespace cohort::kernels {
namespace {

TEST(ReduceKernels, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t exp = (h >> 10) & 0x1f;
    if (exp == 0x1f) continue;
    EXPECT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(ReduceKernels, HalfKnownValuesAndRounding) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);                          // overflow to infinity
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}

TEST(ReduceKernels, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x4040), 3.0f);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(ReduceKernels, CombineEveryOpOnF16) {
  std::vector<uint16_t> a = {float_to_half(1.5f), float_to_half(-2.0f)};
  std::vector<uint16_t> b = {float_to_half(2.0f), float_to_half(3.0f)};
  auto run = [&](Reduce op) {
    auto x = a;
    combine(x.data(), b.data(), 2, DType::kF16, op);
    return std::vector<float>{half_to_float(x[0]), half_to_float(x[1])};
  };
  EXPECT_EQ(run(Reduce::kSum), (std::vector<float>{3.5f, 1.0f}));
  EXPECT_EQ(run(Reduce::kMin), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(run(Reduce::kMax), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(run(Reduce::kProd), (std::vector<float>{3.0f, -6.0f}));
}

TEST(ReduceKernels, CombineToWritesAThirdBufferAndLeavesItsInputs) {
  std::vector<float> a = {1.0f, -2.0f, 4.0f}, b = {0.5f, 3.0f, -8.0f}, out(4, 99.0f);
  combine_to(out.data(), a.data(), b.data(), 3, DType::kF32, Reduce::kSum);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 1.0f, -4.0f, 99.0f}));  // the element past n untouched
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f, 4.0f}));
  combine_to(out.data(), a.data(), b.data(), 3, DType::kF32, Reduce::kMax);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 3.0f, 4.0f, 99.0f}));
  std::vector<uint16_t> ha = {float_to_bf16(1.5f)}, hb = {float_to_bf16(2.0f)}, hout = {0};
  combine_to(hout.data(), ha.data(), hb.data(), 1, DType::kBF16, Reduce::kProd);
  EXPECT_EQ(bf16_to_float(hout[0]), 3.0f);
  combine_to(a.data(), a.data(), b.data(), 3, DType::kF32, Reduce::kMin);  // out == a: in place
  EXPECT_EQ(a, (std::vector<float>{0.5f, -2.0f, -8.0f}));
}

TEST(ReduceKernels, ScaleTruncatesIntegers) {
  std::vector<int32_t> v = {7, -7, 8};
  scale(v.data(), v.size(), DType::kI32, 0.5);
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 4}));
  std::vector<uint16_t> h = {float_to_bf16(3.0f)};
  scale(h.data(), 1, DType::kBF16, 0.5);
  EXPECT_EQ(bf16_to_float(h[0]), 1.5f);
}

}  // namespace
}  // namespace cohort::kernels
