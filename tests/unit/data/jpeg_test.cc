// JPEG decoding: full and windowed decodes against a plain libjpeg reference decode,
// every colour space and sampling the decoder must handle, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/status.h"
#include "data/file.h"
#include "data/jpeg.h"
#include "data_test_util.h"

namespace cohort::data {
namespace {

using testing::JpegFlavour;

double mean_abs_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(n);
}

TEST(Jpeg, FullDecodeMatchesTheReferenceForEverySampling) {
  for (auto [hs, vs] : {std::pair{2, 2}, std::pair{2, 1}, std::pair{1, 1}}) {
    for (bool progressive : {false, true}) {
      JpegFlavour f;
      f.h_samp = hs;
      f.v_samp = vs;
      f.progressive = progressive;
      auto jpeg = testing::rgb_jpeg(67, 45, 1, f);
      int w, h;
      auto ref = testing::reference_decode(jpeg, &w, &h);
      JpegDecoder dec(JpegDct::kAccurate);
      auto hdr = dec.read_header(jpeg);
      EXPECT_EQ(hdr.width, 67);
      EXPECT_EQ(hdr.height, 45);
      EXPECT_EQ(hdr.progressive, progressive);
      auto win = dec.decode_full(jpeg);
      ASSERT_EQ(win.width, w);
      ASSERT_EQ(win.height, h);
      EXPECT_EQ(0, std::memcmp(win.pixels, ref.data(), ref.size()))
          << hs << "x" << vs << " progressive " << progressive;
    }
  }
}

TEST(Jpeg, CropWindowHoldsTheSamePixelsAsTheFullDecode) {
  for (int variant = 0; variant < 6; ++variant) {
    bool progressive = variant % 2;
    JpegFlavour f;
    f.progressive = progressive;
    f.h_samp = variant < 2 ? 1 : 2;  // 4:4:4, 4:2:2, 4:2:0
    f.v_samp = variant < 4 ? 1 : 2;
    auto jpeg = testing::rgb_jpeg(200, 150, 3, f);
    int w, h;
    auto ref = testing::reference_decode(jpeg, &w, &h);
    JpegDecoder dec(JpegDct::kAccurate);
    // A crop as big as the output: decoded at full scale.
    auto win = dec.decode_window(jpeg, 37, 53, 90, 60, 90, 60);
    ASSERT_EQ(win.scale_num, 8);
    int cx = static_cast<int>(win.crop_x), cy = static_cast<int>(win.crop_y);
    ASSERT_GE(win.width, cx + 90);
    ASSERT_GE(win.height, cy + 60);
    for (int y = 0; y < 60; ++y)
      ASSERT_EQ(0, std::memcmp(win.pixels + (y + cy) * win.stride + cx * 3, &ref[((53 + y) * w + 37) * 3], 90 * 3))
          << "row " << y;
    // The window is much smaller than the image: the decoder skipped the rest.
    EXPECT_LT(win.width, 200);
    EXPECT_LE(win.height, 60 + 1);
  }
}

TEST(Jpeg, ChoosesTheSmallestDctScaleThatCoversTheOutput) {
  EXPECT_EQ(choose_scale(800, 800, 224, 224), 4);  // 400 >= 224; 200 is not (only SIMD scales)
  EXPECT_EQ(choose_scale(224, 224, 224, 224), 8);
  EXPECT_EQ(choose_scale(100, 100, 224, 224), 8);  // upscaling decodes at full size
  EXPECT_EQ(choose_scale(1800, 900, 224, 224), 2);
  auto jpeg = testing::rgb_jpeg(640, 480, 2);
  int w, h;
  auto ref = testing::reference_decode(jpeg, &w, &h);
  JpegDecoder dec(JpegDct::kAccurate);
  auto win = dec.decode_window(jpeg, 0, 0, 640, 480, 160, 120);
  EXPECT_EQ(win.scale_num, 2);
  EXPECT_EQ(win.width, 160);
  EXPECT_EQ(win.height, 120);
  // The 1/4-scale decode is close to a 4x4 box filter of the full decode.
  std::vector<uint8_t> boxed(160 * 120 * 3);
  for (int y = 0; y < 120; ++y)
    for (int x = 0; x < 160; ++x)
      for (int c = 0; c < 3; ++c) {
        int s = 0;
        for (int dy = 0; dy < 4; ++dy)
          for (int dx = 0; dx < 4; ++dx) s += ref[((y * 4 + dy) * w + x * 4 + dx) * 3 + c];
        boxed[(y * 160 + x) * 3 + c] = static_cast<uint8_t>((s + 8) / 16);
      }
  EXPECT_LT(mean_abs_diff(win.pixels, boxed.data(), boxed.size()), 4.0);
}

TEST(Jpeg, GrayscaleBecomesRgbWithEqualChannels) {
  std::vector<uint8_t> gray(40 * 30);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 7);
  JpegFlavour f;
  f.components = 1;
  auto jpeg = testing::encode_jpeg(gray.data(), 40, 30, f);
  JpegDecoder dec;
  auto win = dec.decode_full(jpeg);
  ASSERT_EQ(win.width, 40);
  for (int i = 0; i < 40 * 30; ++i) {
    EXPECT_EQ(win.pixels[3 * i], win.pixels[3 * i + 1]);
    EXPECT_EQ(win.pixels[3 * i], win.pixels[3 * i + 2]);
  }
}

TEST(Jpeg, AdobeInvertedCmykConvertsToRgb) {
  // Stored (inverted) CMYK c=R, m=G, y=B, k=255 means RGB = (R, G, B).
  auto rgb = testing::procedural_rgb(48, 32);
  std::vector<uint8_t> cmyk(48 * 32 * 4);
  for (int i = 0; i < 48 * 32; ++i) {
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = rgb[3 * i + c];
    cmyk[4 * i + 3] = 255;
  }
  for (bool progressive : {false, true}) {
    JpegFlavour f;
    f.components = 4;
    f.progressive = progressive;
    f.h_samp = f.v_samp = 1;
    auto jpeg = testing::encode_jpeg(cmyk.data(), 48, 32, f);
    JpegDecoder dec(JpegDct::kAccurate);
    EXPECT_TRUE(dec.read_header(jpeg).cmyk);
    auto win = dec.decode_full(jpeg);
    ASSERT_EQ(win.width, 48);
    EXPECT_LT(mean_abs_diff(win.pixels, rgb.data(), rgb.size()), 3.0);
  }
}

TEST(Jpeg, NonJpegTruncatedAndOversizedInputsAreErrors) {
  JpegDecoder dec(JpegDct::kFast, 1000);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 13, 10, 26, 10};
  try {
    dec.read_header(png);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kJpeg);
    EXPECT_NE(std::string(e.what()).find("not a JPEG"), std::string::npos);
  }
  auto big = testing::rgb_jpeg(64, 64);  // 4096 pixels > 1000
  try {
    dec.read_header(big);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_image_pixels"), std::string::npos);
  }
  JpegDecoder ok;
  for (bool progressive : {false, true}) {
    JpegFlavour f;
    f.progressive = progressive;
    auto jpeg = testing::rgb_jpeg(128, 96, 0, f);
    for (size_t keep : {jpeg.size() / 2, size_t{300}, size_t{20}}) {
      std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(keep));
      EXPECT_THROW(ok.decode_full(cut), Error) << "kept " << keep;
    }
    // The decoder is still usable after errors.
    EXPECT_NO_THROW(ok.decode_full(jpeg));
  }
}

TEST(Jpeg, RealBrokenFileFromDebianIsAnError) {
  const char* path = "/usr/lib/python3/dist-packages/skimage/data/truncated.jpg";
  if (!is_regular_file(path)) GTEST_SKIP() << "python3-skimage not installed";
  auto bytes = read_file(path);
  JpegDecoder dec;
  EXPECT_THROW(dec.decode_full(bytes), Error);
}

}  // namespace
}  // namespace cohort::data

namespace cohort::data {
namespace {

// Each EXIF orientation as PIL's ImageOps.exif_transpose turns the stored image (w x h)
// into the displayed one: the stored pixel shown at displayed (x, y).
std::pair<int, int> stored_pixel(int o, int w, int h, int x, int y) {
  switch (o) {
    case 2:
      return {w - 1 - x, y};  // FLIP_LEFT_RIGHT
    case 3:
      return {w - 1 - x, h - 1 - y};  // ROTATE_180
    case 4:
      return {x, h - 1 - y};  // FLIP_TOP_BOTTOM
    case 5:
      return {y, x};  // TRANSPOSE
    case 6:
      return {y, h - 1 - x};  // ROTATE_270
    case 7:
      return {w - 1 - y, h - 1 - x};  // TRANSVERSE
    case 8:
      return {w - 1 - y, x};  // ROTATE_90
    default:
      return {x, y};
  }
}

TEST(Jpeg, ExifOrientationIsIgnoredByDefaultAndAppliedOnRequest) {
  const int w = 40, h = 24;
  for (int o = 1; o <= 8; ++o) {
    SCOPED_TRACE(o);
    JpegFlavour f;
    f.h_samp = f.v_samp = 1;
    f.exif_orientation = o;
    auto jpeg = testing::rgb_jpeg(w, h, 3, f);
    int rw, rh;
    auto stored = testing::reference_decode(jpeg, &rw, &rh);
    JpegDecoder ignore(JpegDct::kAccurate);
    auto hi = ignore.read_header(jpeg);
    EXPECT_EQ(hi.orientation, 1);
    EXPECT_EQ(hi.width, w);
    auto plain = ignore.decode_full(jpeg);
    ASSERT_EQ(0, std::memcmp(plain.pixels, stored.data(), stored.size()));

    JpegDecoder apply(JpegDct::kAccurate, 100000000, true);
    auto ha = apply.read_header(jpeg);
    EXPECT_EQ(ha.orientation, o);
    const int dw = o >= 5 ? h : w, dh = o >= 5 ? w : h;
    EXPECT_EQ(ha.width, dw);
    EXPECT_EQ(ha.height, dh);
    auto full = apply.decode_full(jpeg);
    ASSERT_EQ(full.width, dw);
    ASSERT_EQ(full.height, dh);
    for (int y = 0; y < dh; ++y)
      for (int x = 0; x < dw; ++x) {
        auto [sx, sy] = stored_pixel(o, w, h, x, y);
        ASSERT_EQ(0, std::memcmp(full.pixels + y * full.stride + x * 3, &stored[(sy * w + sx) * 3], 3))
            << x << "," << y;
      }
    // A crop given as displayed holds the displayed pixels.
    auto win = apply.decode_window(jpeg, 5, 3, 12, 10, 12, 10);
    const int cx = static_cast<int>(win.crop_x), cy = static_cast<int>(win.crop_y);
    EXPECT_EQ(win.crop_w, 12);
    EXPECT_EQ(win.crop_h, 10);
    for (int y = 0; y < 10; ++y)
      for (int x = 0; x < 12; ++x) {
        auto [sx, sy] = stored_pixel(o, w, h, 5 + x, 3 + y);
        ASSERT_EQ(0, std::memcmp(win.pixels + (cy + y) * win.stride + (cx + x) * 3, &stored[(sy * w + sx) * 3], 3));
      }
  }
}

TEST(Jpeg, ExifOrientationParsing) {
  for (bool little : {true, false}) EXPECT_EQ(exif_orientation(testing::exif_app1(6, little)), 6);
  EXPECT_EQ(exif_orientation(testing::exif_app1(9)), 1);  // out of range
  auto cut = testing::exif_app1(6);
  cut.resize(cut.size() - 8);
  EXPECT_EQ(exif_orientation(cut), 1);  // the entry runs past the segment
  std::vector<uint8_t> xmp = {'h', 't', 't', 'p', ':', '/', '/', 'n', 's', '.', 'a', 'd', 'o', 'b', 'e'};
  EXPECT_EQ(exif_orientation(xmp), 1);
  // A box of the stored image as displayed: rotated 90 degrees clockwise (6).
  BBox b{0.1f, 0.2f, 0.5f, 0.4f};  // ymin, xmin, ymax, xmax
  BBox r = orient_box(b, 6);
  EXPECT_FLOAT_EQ(r.xmin, 1 - 0.5f);
  EXPECT_FLOAT_EQ(r.xmax, 1 - 0.1f);
  EXPECT_FLOAT_EQ(r.ymin, 0.2f);
  EXPECT_FLOAT_EQ(r.ymax, 0.4f);
}

}  // namespace
}  // namespace cohort::data
