// Augmentation: crop sampling constraints, the resampler, flips, layouts and dtypes,
// and the colour functors against their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "data/augment.h"
#include "kernels/colour.h"

namespace cohort::data {
namespace {

TEST(Colour, HsvRoundTripsAndMatchesKnownValues) {
  float h, s, v;
  kernels::rgb_to_hsv(1, 0, 0, &h, &s, &v);
  EXPECT_FLOAT_EQ(h, 0);
  EXPECT_FLOAT_EQ(s, 1);
  kernels::rgb_to_hsv(0, 1, 0, &h, &s, &v);
  EXPECT_NEAR(h, 1.0f / 3, 1e-6);
  kernels::rgb_to_hsv(0.2f, 0.2f, 0.6f, &h, &s, &v);
  EXPECT_NEAR(h, 2.0f / 3, 1e-6);
  EXPECT_NEAR(s, 2.0f / 3, 1e-6);
  EXPECT_NEAR(v, 0.6f, 1e-6);
  for (float r = 0; r <= 1; r += 0.125f)
    for (float g = 0; g <= 1; g += 0.25f)
      for (float b = 0; b <= 1; b += 0.5f) {
        float rr, gg, bb;
        kernels::rgb_to_hsv(r, g, b, &h, &s, &v);
        kernels::hsv_to_rgb(h, s, v, &rr, &gg, &bb);
        EXPECT_NEAR(rr, r, 1e-5);
        EXPECT_NEAR(gg, g, 1e-5);
        EXPECT_NEAR(bb, b, 1e-5);
      }
}

TEST(Colour, AdjustmentsFollowTheTensorFlowFormulas) {
  EXPECT_FLOAT_EQ(kernels::Brightness{0.1f}(0.5f), 0.6f);
  EXPECT_FLOAT_EQ((kernels::Contrast{1.5f, 0.4f}(0.6f)), 0.7f);  // (0.6 - 0.4) * 1.5 + 0.4
  float r = 0.2f, g = 0.4f, b = 0.8f;
  kernels::SaturationHue{0.5f, 0.0f}(&r, &g, &b);  // s 0.75 → 0.375, v 0.8 unchanged
  float h, s, v;
  kernels::rgb_to_hsv(r, g, b, &h, &s, &v);
  EXPECT_NEAR(s, 0.375f, 1e-5);
  EXPECT_NEAR(v, 0.8f, 1e-5);
  r = 1, g = 0, b = 0;
  kernels::SaturationHue{1.0f, 1.0f / 3}(&r, &g, &b);  // red rotated a third → green
  EXPECT_NEAR(r, 0, 1e-5);
  EXPECT_NEAR(g, 1, 1e-5);
  r = 1, g = 0, b = 0;
  kernels::SaturationHue{1.0f, -1.0f / 3}(&r, &g, &b);  // → blue
  EXPECT_NEAR(b, 1, 1e-5);
  auto n = kernels::Normalize::from_mean_std(0.485f, 0.229f, 255.0f);
  EXPECT_NEAR(n(255.0f), (1 - 0.485f) / 0.229f, 1e-5);
}

TEST(Colour, HalfConversionRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.1f, 6.1035156e-05f, 5.9604645e-08f, 1e-3f, -0.333f}) {
    float back = kernels::half_bits_to_float(kernels::float_to_half_bits(f));
    EXPECT_NEAR(back, f, std::abs(f) * 1e-3 + 1e-7) << f;
  }
  EXPECT_EQ(kernels::float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(kernels::float_to_half_bits(1e6f), 0x7c00);
  EXPECT_EQ(kernels::float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(kernels::float_to_half_bits(5.9604645e-08f), 0x0001);
}

TEST(Crop, DistortedCropsRespectAreaAspectAndBoxCoverage) {
  AugmentOptions o;
  std::vector<BBox> boxes = {{0.6f, 0.6f, 0.9f, 0.9f}};
  int fallbacks = 0;
  for (uint64_t i = 0; i < 500; ++i) {
    Crop c = distorted_crop(500, 375, boxes, o, 1, i);
    ASSERT_GE(c.x, 0);
    ASSERT_GE(c.y, 0);
    ASSERT_LE(c.x + c.w, 500);
    ASSERT_LE(c.y + c.h, 375);
    if (c.w == 500 && c.h == 375) {
      ++fallbacks;
      continue;
    }
    double area = double(c.w) * c.h / (500.0 * 375);
    EXPECT_GE(area, 0.05 - 1e-3);
    double ar = double(c.w) / c.h;
    EXPECT_GT(ar, 0.70);
    EXPECT_LT(ar, 1.40);
    double bx0 = 300, by0 = 225, bx1 = 450, by1 = 337.5;
    double ix = std::max(0.0, std::min<double>(bx1, c.x + c.w) - std::max<double>(bx0, c.x));
    double iy = std::max(0.0, std::min<double>(by1, c.y + c.h) - std::max<double>(by0, c.y));
    EXPECT_GE(ix * iy / ((bx1 - bx0) * (by1 - by0)), 0.1 - 1e-6);
  }
  EXPECT_LT(fallbacks, 50);
  // Same (seed, stream), same crop.
  Crop a = distorted_crop(500, 375, {}, o, 9, 4), b = distorted_crop(500, 375, {}, o, 9, 4);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.w, b.w);
}

TEST(Crop, EvalResizesTheShorterSideThenCentreCrops) {
  AugmentOptions o;
  o.random_crop = false;
  Crop c = eval_crop(512, 256, o);  // shorter 256 → 256: crop 224 x 224 centred
  EXPECT_EQ(c.w, 224);
  EXPECT_EQ(c.h, 224);
  EXPECT_EQ(c.x, (512 - 224) / 2);
  EXPECT_EQ(c.y, 16);
  Crop d = eval_crop(1024, 512, o);  // scale 0.5: 448 source pixels
  EXPECT_EQ(d.w, 448);
}

// A u8 ramp image where pixel (x, y, c) = x + 10 y + 100 c (mod 256).
std::vector<uint8_t> ramp(int w, int h, int c) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        px[(static_cast<size_t>(y) * w + x) * c + k] = static_cast<uint8_t>(x + 10 * y + 100 * k);
  return px;
}

TEST(Render, IdentityCropIsACopyInEveryLayoutAndDtype) {
  const int W = 12, H = 9;
  auto src = ramp(W, H, 3);
  AugmentOptions o;
  o.out_w = W;
  o.out_h = H;
  Draws d;
  d.crop = {0, 0, W, H};
  Renderer r;
  for (bool nhwc : {false, true}) {
    o.nhwc = nhwc;
    o.dtype = DType::kU8;
    std::vector<uint8_t> u8(static_cast<size_t>(W) * H * 3);
    r.render({src.data(), W, H, static_cast<size_t>(W * 3), 3}, {0, 0, W, H}, d, o, u8.data());
    o.dtype = DType::kF32;
    std::vector<float> f32(u8.size());
    r.render({src.data(), W, H, static_cast<size_t>(W * 3), 3}, {0, 0, W, H}, d, o, f32.data());
    o.dtype = DType::kF16;
    std::vector<uint16_t> f16(u8.size());
    r.render({src.data(), W, H, static_cast<size_t>(W * 3), 3}, {0, 0, W, H}, d, o, f16.data());
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c) {
          size_t at = nhwc ? (static_cast<size_t>(y) * W + x) * 3 + c : static_cast<size_t>(c) * W * H + y * W + x;
          uint8_t want = src[(static_cast<size_t>(y) * W + x) * 3 + c];
          ASSERT_EQ(u8[at], want);
          float norm = (want / 255.0f - o.mean[c]) / o.stddev[c];
          ASSERT_NEAR(f32[at], norm, 1e-5);
          ASSERT_NEAR(kernels::half_bits_to_float(f16[at]), norm, 2e-3);
        }
  }
}

TEST(Render, FlipsMirrorTheOutput) {
  const int W = 8, H = 6;
  auto src = ramp(W, H, 1);
  AugmentOptions o;
  o.out_w = W;
  o.out_h = H;
  o.dtype = DType::kU8;
  Renderer r;
  Draws d;
  std::vector<uint8_t> plain(W * H), lr(W * H), ud(W * H);
  r.render({src.data(), W, H, static_cast<size_t>(W), 1}, {0, 0, W, H}, d, o, plain.data());
  d.flip_lr = true;
  r.render({src.data(), W, H, static_cast<size_t>(W), 1}, {0, 0, W, H}, d, o, lr.data());
  d.flip_lr = false;
  d.flip_ud = true;
  r.render({src.data(), W, H, static_cast<size_t>(W), 1}, {0, 0, W, H}, d, o, ud.data());
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      EXPECT_EQ(lr[y * W + x], plain[y * W + (W - 1 - x)]);
      EXPECT_EQ(ud[y * W + x], plain[(H - 1 - y) * W + x]);
    }
}

TEST(Render, CropResamplesItsWindow) {
  const int W = 40, H = 30;
  auto src = ramp(W, H, 1);
  AugmentOptions o;
  o.out_w = 5;
  o.out_h = 5;
  o.dtype = DType::kU8;
  Renderer r;
  Draws d;
  std::vector<uint8_t> out(25);
  // 2x downscale of the window at (10, 4) size 10x10: centres at 10.5 + 2i, 4.5 + 2j.
  r.render({src.data(), W, H, static_cast<size_t>(W), 1}, {10, 4, 10, 10}, d, o, out.data());
  for (int j = 0; j < 5; ++j)
    for (int i = 0; i < 5; ++i) {
      double want = (10.5 + 2 * i) + 10 * (4.5 + 2 * j);
      EXPECT_NEAR(out[j * 5 + i], want, 0.51) << i << "," << j;
    }
}

TEST(Render, ColourJitterMatchesTheFormulasPerPixel) {
  const int W = 4, H = 4;
  std::vector<uint8_t> src(W * H * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(40 + 11 * i);
  AugmentOptions o;
  o.out_w = W;
  o.out_h = H;
  o.nhwc = true;
  o.mean[0] = o.mean[1] = o.mean[2] = 0;
  o.stddev[0] = o.stddev[1] = o.stddev[2] = 1;
  Draws d;
  d.color = true;
  d.brightness = 0.05f;
  d.contrast = 1.3f;
  d.saturation = 0.7f;
  d.hue = 0.1f;
  Renderer r;
  for (int order : {0, 1}) {
    d.order = order;
    std::vector<float> out(W * H * 3);
    r.render({src.data(), W, H, static_cast<size_t>(W * 3), 3}, {0, 0, W, H}, d, o, out.data());
    // Reference: the distort_color sequence on the whole image.
    std::vector<float> img(src.size());
    for (size_t i = 0; i < src.size(); ++i) img[i] = src[i] / 255.0f + d.brightness;
    auto sat_hue = [&] {
      for (int p = 0; p < W * H; ++p)
        kernels::SaturationHue{d.saturation, d.hue}(&img[3 * p], &img[3 * p + 1], &img[3 * p + 2]);
    };
    auto contrast = [&] {
      for (int c = 0; c < 3; ++c) {
        double m = 0;
        for (int p = 0; p < W * H; ++p) m += img[3 * p + c];
        m /= W * H;
        for (int p = 0; p < W * H; ++p) img[3 * p + c] = static_cast<float>((img[3 * p + c] - m) * d.contrast + m);
      }
    };
    if (order == 0) {
      sat_hue();
      contrast();
    } else {
      contrast();
      sat_hue();
    }
    for (size_t i = 0; i < img.size(); ++i) EXPECT_NEAR(out[i], std::clamp(img[i], 0.0f, 1.0f), 1e-4) << i;
  }
}

TEST(Draws, AreDeterministicPerSeedEpochAndIndex) {
  AugmentOptions o;
  o.seed = 5;
  Draws a = draw_sample(300, 200, {}, o, 1, 17, 0), b = draw_sample(300, 200, {}, o, 1, 17, 0);
  EXPECT_EQ(a.crop.x, b.crop.x);
  EXPECT_EQ(a.brightness, b.brightness);
  Draws c = draw_sample(300, 200, {}, o, 2, 17, 0);
  EXPECT_TRUE(a.crop.x != c.crop.x || a.crop.w != c.crop.w || a.brightness != c.brightness);
  int flips = 0;
  for (int i = 0; i < 1000; ++i) flips += draw_sample(300, 200, {}, o, 0, i, 0).flip_lr;
  EXPECT_NEAR(flips, 500, 80);
}

}  // namespace
}  // namespace cohort::data
