// JPEG decoding with libjpeg-turbo's libjpeg API: header probe, and decoding of only
// the window a crop needs, at the smallest DCT scale (1/8, 1/4, 1/2, 1) that still covers
// the output size. Handles grayscale, RGB/YCbCr, CMYK/YCCK (Adobe inverted) and
// progressive files. libjpeg errors longjmp back here and become kJpeg Errors.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace cohort::data {

enum class JpegDct { kFast, kAccurate };

struct JpegHeader {
  int width = 0, height = 0, components = 0;
  bool progressive = false;
  bool cmyk = false;
};

// A decoded window: 3-channel RGB rows, and where the requested crop lies in them
// (fractional, in decoded pixels).
struct DecodedWindow {
  const uint8_t* pixels = nullptr;
  int width = 0, height = 0;  // of the decoded buffer
  size_t stride = 0;          // bytes per row
  float crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  int scale_num = 8;  // decoded at scale_num / 8
};

// One decoder per thread; reuses its libjpeg object and buffers between images.
class JpegDecoder {
 public:
  explicit JpegDecoder(JpegDct dct = JpegDct::kFast, uint64_t max_pixels = 100000000);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Throws kJpeg ("not a JPEG file", ...) or kCorruptData (bigger than max_pixels).
  JpegHeader read_header(std::span<const uint8_t> jpeg);

  // Decodes the crop (x, y, w, h) of the full-size image so that it can be resampled
  // to out_w x out_h. The result views this decoder's buffer until the next call.
  DecodedWindow decode_window(std::span<const uint8_t> jpeg, int x, int y, int w, int h, int out_w, int out_h);

  // The whole image at full scale (reference decodes, tools).
  DecodedWindow decode_full(std::span<const uint8_t> jpeg);

 private:
  // Reads the header and leaves libjpeg ready to decompress.
  JpegHeader header_in_progress(std::span<const uint8_t> jpeg);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Smallest scale_num in {1, 2, 4, 8} such that ceil(size * n / 8) covers out for both axes.
int choose_scale(int crop_w, int crop_h, int out_w, int out_h);

}  // namespace cohort::data
