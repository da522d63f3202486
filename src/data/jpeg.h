// JPEG decoding with libjpeg-turbo's libjpeg API: header probe, and decoding of only
// the window a crop needs, at the smallest DCT scale (1/8, 1/4, 1/2, 1) that still covers
// the output size. Handles grayscale (replicated to RGB), RGB/YCbCr, CMYK/YCCK (libjpeg
// turns YCCK into CMYK; with an Adobe marker the values are inverted and R = C*K/255,
// else R = (255-C)(255-K)/255; no ICC profile) and progressive files. libjpeg errors, and its warnings
// about corrupt or truncated data, longjmp back here and become kJpeg Errors; warnings
// about metadata only (an unknown JFIF revision or Adobe transform code) are kept for
// warnings(). With verify, a decode reads the whole entropy-coded data to the EOI
// marker, so its verdict on a file does not depend on the crop window; and every image
// is read with fresh tables, so it does not depend on the files decoded before either.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/example.h"

namespace cohort::data {

enum class JpegDct { kFast, kAccurate };

struct JpegHeader {
  // As displayed: with exif_orientation=apply and an EXIF orientation of 5 to 8, the
  // stored width and height are swapped.
  int width = 0, height = 0, components = 0;
  bool progressive = false;
  bool cmyk = false;
  int orientation = 1;  // EXIF orientation applied (1 = none; always 1 unless apply)
};

// A decoded window: 3-channel RGB rows, and where the requested crop lies in them
// (fractional, in decoded pixels).
struct DecodedWindow {
  const uint8_t* pixels = nullptr;
  int width = 0, height = 0;  // of the decoded buffer
  size_t stride = 0;          // bytes per row
  float crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  int scale_num = 8;  // decoded at scale_num / 8

  // What a Renderer takes: the decoded rows, and the crop within them.
  SourceImage image() const { return {pixels, width, height, stride, 3}; }
  CropWindow crop() const { return {crop_x, crop_y, crop_w, crop_h}; }
};

// One decoder per thread; reuses its libjpeg object and buffers between images.
class JpegDecoder {
 public:
  // apply_exif: present images as their EXIF orientation says they are displayed.
  explicit JpegDecoder(JpegDct dct = JpegDct::kFast, uint64_t max_pixels = 100000000, bool apply_exif = false);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Throws kJpeg ("not a JPEG file", ...) or kCorruptData (bigger than max_pixels).
  JpegHeader read_header(std::span<const uint8_t> jpeg);

  // Decodes the crop (x, y, w, h) of the full-size image (as displayed) so that it can be
  // resampled to out_w x out_h. The result views this decoder's buffer until the next
  // call. verify: read the rest of the entropy-coded data too (see the top of this file).
  DecodedWindow decode_window(std::span<const uint8_t> jpeg, int x, int y, int w, int h, int out_w, int out_h,
                              bool verify = false);

  // The whole image at full scale, verified to the EOI marker (reference decodes, tools).
  DecodedWindow decode_full(std::span<const uint8_t> jpeg);

  // libjpeg's warnings about metadata during the last read_header() or decode, which
  // leave the pixels intact (e.g. "Warning: unknown JFIF revision number 3.01").
  const std::vector<std::string>& warnings() const;

 private:
  // Reads the header and leaves libjpeg ready to decompress.
  JpegHeader header_in_progress(std::span<const uint8_t> jpeg);
  DecodedWindow decode_stored(const JpegHeader& hdr, int x, int y, int w, int h, int out_w, int out_h, bool verify);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The EXIF orientation (1 to 8) in an APP1 segment's data ("Exif\0\0" and a TIFF
// block); 1 when there is none or it is malformed.
int exif_orientation(std::span<const uint8_t> app1);

// A box of the stored image (fractions of its size) as it is displayed under an EXIF
// orientation.
BBox orient_box(const BBox& box, int orientation);

// Smallest scale_num in {1, 2, 4, 8} such that ceil(size * n / 8) covers out for both axes.
int choose_scale(int crop_w, int crop_h, int out_w, int out_h);

}  // namespace cohort::data
