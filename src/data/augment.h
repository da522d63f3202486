// Per-sample geometry and colour: the crop window (Inception-style distorted bounding
// box for training, resize-shorter-side + centre crop for evaluation), flips, colour
// jitter, mean/std normalisation, and the resampler that writes one sample straight
// into its place in a batch (NCHW or NHWC; f32, f16 or u8).
#pragma once

#include <cstdint>
#include <vector>

#include "data/example.h"
#include "tensor/dtype.h"

namespace cohort::data {

struct AugmentOptions {
  int out_h = 224, out_w = 224;
  bool random_crop = true;
  float area_min = 0.05f, area_max = 1.0f, aspect_min = 0.75f, aspect_max = 1.33f;
  int attempts = 100;
  float min_object_covered = 0.1f;
  float flip_lr_prob = 0.5f, flip_ud_prob = 0.0f;
  bool color_jitter = true;
  float brightness_delta = 32.0f / 255.0f;
  float contrast_min = 0.5f, contrast_max = 1.5f;
  float saturation_min = 0.5f, saturation_max = 1.5f;
  float hue_delta = 0.2f;
  // !random_crop and > 0: pad-crop, the whole image shifted by up to crop_pad output
  // pixels each way, zeros where it leaves the image (CIFAR's random crop with padding).
  int crop_pad = 0;
  int eval_resize = 256;    // !random_crop: shorter side → this, then centre crop
  bool eval_whole = false;  // !random_crop: resize the whole image instead (raw sources)
  float mean[4] = {0.485f, 0.456f, 0.406f, 0.0f};
  float stddev[4] = {0.229f, 0.224f, 0.225f, 1.0f};
  DType dtype = DType::kF32;
  bool nhwc = false;
  uint64_t seed = 0;
};

struct Crop {
  int x = 0, y = 0, w = 0, h = 0;
};

// Everything random about one sample, drawn from Philox keyed by (seed, epoch, index):
// the same for any thread count.
struct Draws {
  Crop crop;                   // may reach outside the image under pad-crop
  bool zeros_outside = false;  // pad-crop: what lies outside the image is black, not its edge
  bool flip_lr = false, flip_ud = false;
  bool color = false;
  float brightness = 0, contrast = 1, saturation = 1, hue = 0;
  int order = 0;  // tf_cnn_benchmarks' distort_color: fn_0 for even batch positions, fn_1 for odd
};

// sample_distorted_bounding_box: a crop with area and aspect in range that covers at
// least min_object_covered of some box (the whole image when there is none); the
// whole image when no attempt fits.
Crop distorted_crop(int width, int height, const std::vector<BBox>& boxes, const AugmentOptions& o, uint64_t seed,
                    uint64_t stream);
Crop eval_crop(int width, int height, const AugmentOptions& o);
Crop pad_crop(int width, int height, const AugmentOptions& o, uint64_t seed, uint64_t stream);
Draws draw_sample(int width, int height, const std::vector<BBox>& boxes, const AugmentOptions& o, int64_t epoch,
                  int64_t index, int batch_position);

// Bytes of one output sample.
size_t sample_bytes(const AugmentOptions& o, int channels);

// A u8 HWC image a sample is rendered from: a decoded window of a JPEG, or a raw
// sample's pixels. Borrowed.
struct SourceImage {
  const uint8_t* pixels = nullptr;
  int width = 0, height = 0;
  size_t stride = 0;  // bytes from one row to the next
  int channels = 3;   // 1 or 3
};

// The part of a SourceImage that becomes the sample, in source pixels (fractional; under
// pad-crop it may reach outside the image).
struct CropWindow {
  float x = 0, y = 0, w = 0, h = 0;
};

// Writes one sample from the crop window of an image into dst, which points at the
// sample's slot (C*H*W elements in the layout of o): bilinear resampling to out_w x
// out_h, the flips, the colour jitter and the normalisation of `d` and `o`. Holds
// scratch rows; one per thread.
class Renderer {
 public:
  void render(const SourceImage& src, const CropWindow& crop, const Draws& d, const AugmentOptions& o, void* dst);

 private:
  // Its passes, for images of C channels.
  template <int C>
  void render_c(const SourceImage& src, const CropWindow& crop, const Draws& d, const AugmentOptions& o, void* dst);
  template <int C>
  void plan_columns(const SourceImage& src, const CropWindow& crop, const Draws& d, int out_w);
  template <int C>
  void blend_rows(const SourceImage& src, float fy, bool zeros_outside);
  template <int C>
  void taps(int out_w, float k, float* out) const;
  template <int C>
  void taps_to_planes(int out_w, size_t plane, int out_y, const float* scale, const float* bias, void* dst) const;
  template <int C>
  void finish_colour(const Draws& d, const double* sums, const AugmentOptions& o, void* dst);

  std::vector<int> x0_, x1_;  // per output column: the two source taps in row_a_
  std::vector<float> wx_;     // and the weight of the second
  int lo_ = 0, span_ = 0;     // the source columns in use: from lo_, span_ values
  std::vector<float> row_a_, row_;
  std::vector<float> image_;  // the whole sample while colour jitter needs its means
};

// Fills a sample slot with zeros (padding).
void zero_sample(const AugmentOptions& o, int channels, void* dst);

}  // namespace cohort::data
