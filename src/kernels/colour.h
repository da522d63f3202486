// Colour operations of image augmentation, written once for host and device
// (COHORT_HD). Pixels are RGB floats in [0, 1]; the formulas are those of
// tf.image.adjust_brightness / adjust_contrast / adjust_saturation / adjust_hue, which
// the peers (tf_cnn_benchmarks, Inception preprocessing) use.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/hd.h"

namespace cohort::kernels {

// RGB in [0,1] → HSV with h in [0, 1) (turns), s and v in [0, 1].
COHORT_HD void rgb_to_hsv(float r, float g, float b, float* h, float* s, float* v) {
  float mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
  float mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
  float d = mx - mn;
  *v = mx;
  *s = mx > 0 ? d / mx : 0.0f;
  if (d <= 0) {
    *h = 0;
    return;
  }
  float hh;
  if (mx == r) {
    hh = (g - b) / d;
  } else if (mx == g) {
    hh = 2.0f + (b - r) / d;
  } else {
    hh = 4.0f + (r - g) / d;
  }
  hh /= 6.0f;
  if (hh < 0) hh += 1.0f;
  *h = hh;
}

COHORT_HD void hsv_to_rgb(float h, float s, float v, float* r, float* g, float* b) {
  float h6 = h * 6.0f;
  int i = static_cast<int>(h6);
  float f = h6 - static_cast<float>(i);
  i = ((i % 6) + 6) % 6;
  float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  switch (i) {
    case 0:
      *r = v;
      *g = t;
      *b = p;
      break;
    case 1:
      *r = q;
      *g = v;
      *b = p;
      break;
    case 2:
      *r = p;
      *g = v;
      *b = t;
      break;
    case 3:
      *r = p;
      *g = q;
      *b = v;
      break;
    case 4:
      *r = t;
      *g = p;
      *b = v;
      break;
    default:
      *r = v;
      *g = p;
      *b = q;
      break;
  }
}

// adjust_brightness: x + delta.
struct Brightness {
  float delta;
  COHORT_HD float operator()(float x) const { return x + delta; }
};

// adjust_contrast: (x - mean) * factor + mean, mean over the image per channel.
struct Contrast {
  float factor, mean;
  COHORT_HD float operator()(float x) const { return (x - mean) * factor + mean; }
};

// adjust_saturation then adjust_hue on one pixel (either may be the identity:
// saturation 1, hue delta 0). Saturation is clipped to [0, 1] as TensorFlow does.
struct SaturationHue {
  float saturation, hue_delta;
  COHORT_HD void operator()(float* r, float* g, float* b) const {
    float h, s, v;
    rgb_to_hsv(*r, *g, *b, &h, &s, &v);
    s *= saturation;
    s = s < 0 ? 0 : (s > 1 ? 1 : s);
    h += hue_delta;
    h -= static_cast<float>(static_cast<int>(h));
    if (h < 0) h += 1.0f;
    hsv_to_rgb(h, s, v, r, g, b);
  }
};

// Mean/std normalisation folded into one multiply-add: x * scale + bias.
struct Normalize {
  float scale, bias;
  COHORT_HD float operator()(float x) const { return x * scale + bias; }
  // For pixels in [0, range]: ((x / range) - mean) / std.
  static COHORT_HD Normalize from_mean_std(float mean, float stddev, float range) {
    return {1.0f / (range * stddev), -mean / stddev};
  }
};

COHORT_HD float clamp01(float x) { return x < 0 ? 0.0f : (x > 1 ? 1.0f : x); }

// IEEE binary16 bits of a float, round to nearest even (inf/NaN kept).
COHORT_HD uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

COHORT_HD float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Adobe CMYK as libjpeg returns it (inverted when the file has an Adobe marker) → RGB.
COHORT_HD void cmyk_to_rgb(uint8_t c, uint8_t m, uint8_t y, uint8_t k, bool inverted, uint8_t* rgb) {
  unsigned kk = inverted ? k : 255u - k;
  unsigned cc = inverted ? c : 255u - c, mm = inverted ? m : 255u - m, yy = inverted ? y : 255u - y;
  rgb[0] = static_cast<uint8_t>((cc * kk + 127) / 255);
  rgb[1] = static_cast<uint8_t>((mm * kk + 127) / 255);
  rgb[2] = static_cast<uint8_t>((yy * kk + 127) / 255);
}

}  // namespace cohort::kernels
