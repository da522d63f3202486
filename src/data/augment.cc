#include "data/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "kernels/colour.h"
#include "kernels/philox.h"

namespace cohort::data {
namespace {

// A stream of uniform floats from Philox for one (seed, stream).
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t word() {
    if (used_ == 4) {
      block_ = kernels::philox4x32(counter_++, stream_, seed_);
      used_ = 0;
    }
    return block_.v[used_++];
  }
  float uniform() { return kernels::uniform01(word()); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  int64_t below(int64_t n) { return n <= 1 ? 0 : static_cast<int64_t>(word() % static_cast<uint64_t>(n)); }

 private:
  uint64_t seed_, stream_, counter_ = 0;
  kernels::Philox4 block_{};
  int used_ = 4;
};

uint64_t sample_stream(int64_t epoch, int64_t index, uint64_t tag) {
  return (static_cast<uint64_t>(epoch) << 40) ^ static_cast<uint64_t>(index) ^ (tag << 60);
}

}  // namespace

Crop distorted_crop(int width, int height, const std::vector<BBox>& boxes, const AugmentOptions& o, uint64_t seed,
                    uint64_t stream) {
  Rng rng(seed, stream);
  const double img_area = static_cast<double>(width) * height;
  const double min_area = o.area_min * img_area, max_area = o.area_max * img_area;
  for (int attempt = 0; attempt < o.attempts; ++attempt) {
    double ar = rng.uniform(o.aspect_min, o.aspect_max);
    long h = std::lrint(std::sqrt(min_area / ar));
    long max_h = std::lrint(std::sqrt(max_area / ar));
    if (std::lrint(max_h * ar) > width) max_h = static_cast<long>((width + 0.5 - 1e-7) / ar);
    if (max_h > height) max_h = height;
    if (h > max_h) h = max_h;
    if (h < max_h) h += rng.below(max_h - h + 1);
    long w = std::lrint(h * ar);
    double area = static_cast<double>(w) * h;
    if (area < min_area) {
      ++h;
      w = std::lrint(h * ar);
      area = static_cast<double>(w) * h;
    }
    if (w <= 0 || h <= 0 || w > width || h > height || area < min_area || area > max_area) continue;
    long y = rng.below(height - h + 1), x = rng.below(width - w + 1);
    // Coverage of at least one box (the whole image when there is none).
    bool covered = false;
    auto check = [&](const BBox& b) {
      double bx0 = b.xmin * width, bx1 = b.xmax * width, by0 = b.ymin * height, by1 = b.ymax * height;
      double barea = (bx1 - bx0) * (by1 - by0);
      double ix = std::max(0.0, std::min<double>(bx1, x + w) - std::max<double>(bx0, x));
      double iy = std::max(0.0, std::min<double>(by1, y + h) - std::max<double>(by0, y));
      if (barea > 0 && ix * iy / barea >= o.min_object_covered) covered = true;
    };
    if (boxes.empty()) {
      check(BBox{});
    } else {
      for (const auto& b : boxes) check(b);
    }
    if (!covered) continue;
    return {static_cast<int>(x), static_cast<int>(y), static_cast<int>(w), static_cast<int>(h)};
  }
  return {0, 0, width, height};
}

Crop eval_crop(int width, int height, const AugmentOptions& o) {
  if (o.eval_whole) return {0, 0, width, height};
  double scale = static_cast<double>(o.eval_resize) / std::min(width, height);
  int cw = std::min(width, std::max(1, static_cast<int>(std::lround(o.out_w / scale))));
  int ch = std::min(height, std::max(1, static_cast<int>(std::lround(o.out_h / scale))));
  return {(width - cw) / 2, (height - ch) / 2, cw, ch};
}

Crop pad_crop(int width, int height, const AugmentOptions& o, uint64_t seed, uint64_t stream) {
  Rng rng(seed, stream);
  // The padding in source pixels: crop_pad output pixels at the scale of the resize.
  const int px = static_cast<int>(std::lround(static_cast<double>(o.crop_pad) * width / o.out_w));
  const int py = static_cast<int>(std::lround(static_cast<double>(o.crop_pad) * height / o.out_h));
  const int dx = static_cast<int>(rng.below(2 * px + 1)) - px, dy = static_cast<int>(rng.below(2 * py + 1)) - py;
  return {dx, dy, width, height};
}

Draws draw_sample(int width, int height, const std::vector<BBox>& boxes, const AugmentOptions& o, int64_t epoch,
                  int64_t index, int batch_position) {
  Draws d;
  if (o.random_crop) {
    d.crop = distorted_crop(width, height, boxes, o, o.seed, sample_stream(epoch, index, 1));
  } else if (o.crop_pad > 0) {
    d.crop = pad_crop(width, height, o, o.seed, sample_stream(epoch, index, 1));
    d.zeros_outside = true;
  } else {
    d.crop = eval_crop(width, height, o);
  }
  Rng rng(o.seed, sample_stream(epoch, index, 2));
  d.flip_lr = rng.uniform() < o.flip_lr_prob;
  d.flip_ud = rng.uniform() < o.flip_ud_prob;
  d.color = o.color_jitter;
  if (d.color) {
    d.brightness = rng.uniform(-o.brightness_delta, o.brightness_delta);
    d.contrast = rng.uniform(o.contrast_min, o.contrast_max);
    d.saturation = rng.uniform(o.saturation_min, o.saturation_max);
    d.hue = rng.uniform(-o.hue_delta, o.hue_delta);
    d.order = batch_position % 2;
  }
  return d;
}

size_t sample_bytes(const AugmentOptions& o, int channels) {
  return static_cast<size_t>(o.out_h) * static_cast<size_t>(o.out_w) * static_cast<size_t>(channels) *
         dtype_size(o.dtype);
}

void zero_sample(const AugmentOptions& o, int channels, void* dst) { std::memset(dst, 0, sample_bytes(o, channels)); }

namespace {

// The normalisation of each channel, for values in [0, range].
template <int C>
void normalisation(const AugmentOptions& o, float range, float* scale, float* bias) {
  for (int c = 0; c < C; ++c) {
    auto n = kernels::Normalize::from_mean_std(o.mean[c], o.stddev[c], range);
    scale[c] = n.scale;
    bias[c] = n.bias;
  }
}

// Under pad-crop a sample more than half a pixel outside the image is black.
bool outside(bool zeros_outside, float f, int size) { return zeros_outside && (f < -0.5f || f > size - 0.5f); }

// Writes one row of C-channel values (in [0, range]) to output row y.
template <int C>
void write_row(const float* row, int y, float range, const AugmentOptions& o, void* dst) {
  const int W = o.out_w, H = o.out_h;
  const size_t plane = static_cast<size_t>(W) * H;
  if (o.dtype == DType::kU8) {
    auto* out = static_cast<uint8_t*>(dst);
    const float k = 255.0f / range;
    for (int c = 0; c < C; ++c) {
      for (int x = 0; x < W; ++x) {
        float v = row[x * C + c] * k + 0.5f;
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
        size_t at = o.nhwc ? (static_cast<size_t>(y) * W + x) * C + c : c * plane + static_cast<size_t>(y) * W + x;
        out[at] = static_cast<uint8_t>(v);
      }
    }
    return;
  }
  float scale[C], bias[C];
  normalisation<C>(o, range, scale, bias);
  if (o.dtype == DType::kF32) {
    auto* out = static_cast<float*>(dst);
    if (o.nhwc) {
      float* r = out + static_cast<size_t>(y) * W * C;
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < C; ++c) r[x * C + c] = row[x * C + c] * scale[c] + bias[c];
    } else {
      for (int c = 0; c < C; ++c) {
        float* r = out + c * plane + static_cast<size_t>(y) * W;
        const float s = scale[c], b = bias[c];
        for (int x = 0; x < W; ++x) r[x] = row[x * C + c] * s + b;
      }
    }
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (int c = 0; c < C; ++c) {
    for (int x = 0; x < W; ++x) {
      size_t at = o.nhwc ? (static_cast<size_t>(y) * W + x) * C + c : c * plane + static_cast<size_t>(y) * W + x;
      out[at] = kernels::float_to_half_bits(row[x * C + c] * scale[c] + bias[c]);
    }
  }
}

}  // namespace

// Which source columns each output column blends and with what weight (half-pixel
// centres: output pixel i samples source x + (i + 0.5) * w / out_w - 0.5), as offsets
// into the blended row of the columns in use; the C zeros after that row serve the
// columns outside the image.
template <int C>
void Renderer::plan_columns(const SourceImage& src, const CropWindow& crop, const Draws& d, int W) {
  x0_.resize(static_cast<size_t>(W));
  x1_.resize(static_cast<size_t>(W));
  wx_.resize(static_cast<size_t>(W));
  const float sx = crop.w / W;
  constexpr int kOut = -1;  // marks a column outside the image
  int lo = src.width, hi = 0;
  for (int i = 0; i < W; ++i) {
    int ox = d.flip_lr ? W - 1 - i : i;
    float fx = crop.x + (ox + 0.5f) * sx - 0.5f;
    if (outside(d.zeros_outside, fx, src.width)) {
      x0_[static_cast<size_t>(i)] = x1_[static_cast<size_t>(i)] = kOut;
      wx_[static_cast<size_t>(i)] = 0;
      continue;
    }
    fx = std::clamp(fx, 0.0f, static_cast<float>(src.width - 1));
    int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, src.width - 1);
    lo = std::min(lo, x0);
    hi = std::max(hi, x1);
    wx_[static_cast<size_t>(i)] = fx - static_cast<float>(x0);
    x0_[static_cast<size_t>(i)] = x0 * C;
    x1_[static_cast<size_t>(i)] = x1 * C;
  }
  if (lo > hi) lo = hi = 0;
  lo_ = lo;
  span_ = (hi - lo + 1) * C;
  row_a_.assign(static_cast<size_t>(span_ + C), 0.0f);
  for (int i = 0; i < W; ++i) {
    if (x0_[static_cast<size_t>(i)] == kOut) {
      x0_[static_cast<size_t>(i)] = x1_[static_cast<size_t>(i)] = span_;
      continue;
    }
    x0_[static_cast<size_t>(i)] -= lo * C;
    x1_[static_cast<size_t>(i)] -= lo * C;
  }
}

// The vertical blend at source row fy over the columns in use, into row_a_
// (contiguous, so it vectorises); zeros outside the image under pad-crop.
template <int C>
void Renderer::blend_rows(const SourceImage& src, float fy, bool zeros_outside) {
  float* v = row_a_.data();
  if (outside(zeros_outside, fy, src.height)) {
    std::fill_n(v, span_, 0.0f);
    return;
  }
  fy = std::clamp(fy, 0.0f, static_cast<float>(src.height - 1));
  int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, src.height - 1);
  float wy = fy - static_cast<float>(y0);
  const uint8_t* a = src.pixels + src.stride * static_cast<size_t>(y0) + static_cast<size_t>(lo_) * C;
  const uint8_t* b = src.pixels + src.stride * static_cast<size_t>(y1) + static_cast<size_t>(lo_) * C;
  for (int i = 0; i < span_; ++i)
    v[i] = static_cast<float>(a[i]) + (static_cast<float>(b[i]) - static_cast<float>(a[i])) * wy;
}

// The horizontal taps of the blended row, times k, as one HWC output row.
template <int C>
void Renderer::taps(int W, float k, float* r) const {
  const float* v = row_a_.data();
  for (int i = 0; i < W; ++i) {
    const float* p0 = v + x0_[static_cast<size_t>(i)];
    const float* p1 = v + x1_[static_cast<size_t>(i)];
    float w = wx_[static_cast<size_t>(i)];
    for (int c = 0; c < C; ++c) r[i * C + c] = (p0[c] + (p1[c] - p0[c]) * w) * k;
  }
}

// The horizontal taps normalised straight into row out_y of each f32 NCHW plane (no
// colour jitter: the common case, kept to one pass).
template <int C>
void Renderer::taps_to_planes(int W, size_t plane, int out_y, const float* scale, const float* bias, void* dst) const {
  const float* v = row_a_.data();
  float* planes[C];
  for (int c = 0; c < C; ++c) planes[c] = static_cast<float*>(dst) + c * plane + static_cast<size_t>(out_y) * W;
  for (int i = 0; i < W; ++i) {
    const float* p0 = v + x0_[static_cast<size_t>(i)];
    const float* p1 = v + x1_[static_cast<size_t>(i)];
    float w = wx_[static_cast<size_t>(i)];
    for (int c = 0; c < C; ++c) planes[c][i] = (p0[c] + (p1[c] - p0[c]) * w) * scale[c] + bias[c];
  }
}

// Colour jitter's second pass, once the channel means (sums) are known: contrast
// around them, saturation and hue when drawn second, clamping, then the output rows.
template <int C>
void Renderer::finish_colour(const Draws& d, const double* sums, const AugmentOptions& o, void* dst) {
  const int W = o.out_w, H = o.out_h;
  const kernels::SaturationHue sat_hue{d.saturation, d.hue};
  float means[C];
  for (int c = 0; c < C; ++c) means[c] = static_cast<float>(sums[c] / (static_cast<double>(W) * H));
  for (int y = 0; y < H; ++y) {
    float* r = image_.data() + static_cast<size_t>(y) * W * C;
    for (int i = 0; i < W; ++i) {
      for (int c = 0; c < C; ++c) r[i * C + c] = kernels::Contrast{d.contrast, means[c]}(r[i * C + c]);
      if (C == 3 && d.order == 1) sat_hue(&r[3 * i], &r[3 * i + 1], &r[3 * i + 2]);
      for (int c = 0; c < C; ++c) r[i * C + c] = kernels::clamp01(r[i * C + c]);
    }
    write_row<C>(r, y, 1.0f, o, dst);
  }
}

// Row by row: the vertical blend, then the horizontal taps, written out at once, or,
// under colour jitter, brightened (and saturated and hue-shifted when drawn first) into
// the whole image, whose means finish_colour() needs.
template <int C>
void Renderer::render_c(const SourceImage& src, const CropWindow& crop, const Draws& d, const AugmentOptions& o,
                        void* dst) {
  const int W = o.out_w, H = o.out_h;
  row_.resize(static_cast<size_t>(W) * C);
  plan_columns<C>(src, crop, d, W);
  const bool color = d.color;
  if (color) image_.resize(static_cast<size_t>(W) * H * C);
  const bool fast_f32 = !color && o.dtype == DType::kF32 && !o.nhwc;
  float scale[C], bias[C];
  normalisation<C>(o, 255.0f, scale, bias);
  const size_t plane = static_cast<size_t>(W) * H;
  const float sy = crop.h / H;
  double sums[C] = {};
  const kernels::SaturationHue sat_hue{d.saturation, d.hue};
  for (int oy = 0; oy < H; ++oy) {
    blend_rows<C>(src, crop.y + (oy + 0.5f) * sy - 0.5f, d.zeros_outside);
    const int out_y = d.flip_ud ? H - 1 - oy : oy;
    if (fast_f32) {
      taps_to_planes<C>(W, plane, out_y, scale, bias, dst);
      continue;
    }
    float* r = color ? image_.data() + static_cast<size_t>(out_y) * W * C : row_.data();
    taps<C>(W, color ? 1.0f / 255.0f : 1.0f, r);
    if (!color) {
      write_row<C>(r, out_y, 255.0f, o, dst);
      continue;
    }
    kernels::Brightness bright{d.brightness};
    for (int i = 0; i < W * C; ++i) r[i] = bright(r[i]);
    if (C == 3 && d.order == 0)
      for (int i = 0; i < W; ++i) sat_hue(&r[3 * i], &r[3 * i + 1], &r[3 * i + 2]);
    for (int i = 0; i < W; ++i)
      for (int c = 0; c < C; ++c) sums[c] += r[i * C + c];
  }
  if (color) finish_colour<C>(d, sums, o, dst);
}

void Renderer::render(const SourceImage& src, const CropWindow& crop, const Draws& d, const AugmentOptions& o,
                      void* dst) {
  if (src.channels == 3) {
    render_c<3>(src, crop, d, o, dst);
  } else if (src.channels == 1) {
    render_c<1>(src, crop, d, o, dst);
  } else {
    fail(Code::kInvalidArgument, "images with ", src.channels, " channels are not supported (1 or 3)");
  }
}

}  // namespace cohort::data
