// Max and average pooling over NCHW or NHWC values as COHORT_HD functors, the CUDA
// backend's pooling for every window (ceil-mode outputs whose padding is larger at the
// bottom or right included) and type. Average pooling excludes padding, as the CPU
// backend's does. Backward gathers: element i of the input gradient sums what
// the windows covering it send it, so no two threads write one element. Values are
// stored as S and computed in f32 through the codec C (kernels/layer_ops.h).
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "kernels/reduce.h"

namespace cohort::kernels {

struct PoolGeometry {
  int64_t n, c, ih, iw, oh, ow;
  int kh, kw, sh, sw, ph, pw;
  bool nhwc = false;
  // Index of (n, c, y, x) in a value of `h` × `w` pixels.
  COHORT_HD int64_t at(int64_t b, int64_t ch, int64_t y, int64_t x, int64_t h, int64_t w) const {
    return nhwc ? ((b * h + y) * w + x) * c + ch : ((b * c + ch) * h + y) * w + x;
  }
  // (n, c, y, x) of index i in a value of `h` × `w` pixels.
  COHORT_HD void coords(int64_t i, int64_t h, int64_t w, int64_t& b, int64_t& ch, int64_t& y, int64_t& x) const {
    if (nhwc) {
      ch = i % c;
      x = (i / c) % w;
      y = (i / (c * w)) % h;
      b = i / (c * w * h);
    } else {
      x = i % w;
      y = (i / w) % h;
      ch = (i / (w * h)) % c;
      b = i / (w * h * c);
    }
  }
};

// The input rows [h0, h1) and columns [w0, w1) of output (oy, ox), clipped to the input.
COHORT_HD void pool_window(const PoolGeometry& g, int64_t oy, int64_t ox, int64_t& h0, int64_t& h1, int64_t& w0,
                           int64_t& w1) {
  h0 = oy * g.sh - g.ph;
  w0 = ox * g.sw - g.pw;
  h1 = h0 + g.kh;
  w1 = w0 + g.kw;
  h0 = h0 < 0 ? 0 : h0;
  w0 = w0 < 0 ? 0 : w0;
  h1 = h1 > g.ih ? g.ih : h1;
  w1 = w1 > g.iw ? g.iw : w1;
}

// Element i indexes the output. Max pooling also records, in arg[i], which input pixel
// of the window (h·iw + w) is its first maximum in row-major order (the one the CPU
// backend sends the gradient to); average pooling takes arg = nullptr.
template <typename S = float, typename C = PlainCodec<float>>
struct PoolForward {
  PoolGeometry g;
  bool max;
  COHORT_HD void operator()(int64_t i, S* y, const S* x, int32_t* arg) const {
    int64_t b, ch, oy, ox;
    g.coords(i, g.oh, g.ow, b, ch, oy, ox);
    int64_t h0, h1, w0, w1;
    pool_window(g, oy, ox, h0, h1, w0, w1);
    float acc = max ? -3.402823466e38f : 0.f;
    int64_t at = h0 * g.iw + w0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const float v = C::load(x[g.at(b, ch, h, w, g.ih, g.iw)]);
        if (!max) {
          acc += v;
        } else if (v > acc) {
          acc = v;
          at = h * g.iw + w;
        }
      }
    const int64_t count = (h1 - h0) * (w1 - w0);
    if (max && arg) arg[i] = static_cast<int32_t>(at);
    y[i] = C::store(max ? acc : (count > 0 ? acc / static_cast<float>(count) : 0.f));
  }
};

// Element i indexes the input gradient: the sum of what the windows covering it send
// (a max window sends its gradient to the pixel its forward recorded in arg).
template <typename S = float, typename C = PlainCodec<float>>
struct PoolBackward {
  PoolGeometry g;
  bool max;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, S* dx, const S* dy, const int32_t* arg) const {
    int64_t b, ch, ih_, iw_;
    g.coords(i, g.ih, g.iw, b, ch, ih_, iw_);
    // The outputs whose window covers (ih_, iw_).
    int64_t oy0 = (ih_ + g.ph - g.kh + g.sh) / g.sh, ox0 = (iw_ + g.pw - g.kw + g.sw) / g.sw;
    if (ih_ + g.ph - g.kh + 1 <= 0) oy0 = 0;
    if (iw_ + g.pw - g.kw + 1 <= 0) ox0 = 0;
    const int64_t oy1 = (ih_ + g.ph) / g.sh + 1, ox1 = (iw_ + g.pw) / g.sw + 1;
    const int32_t self = static_cast<int32_t>(ih_ * g.iw + iw_);
    float sum = 0.f;
    for (int64_t oy = oy0; oy < oy1 && oy < g.oh; ++oy)
      for (int64_t ox = ox0; ox < ox1 && ox < g.ow; ++ox) {
        int64_t h0, h1, w0, w1;
        pool_window(g, oy, ox, h0, h1, w0, w1);
        if (ih_ < h0 || ih_ >= h1 || iw_ < w0 || iw_ >= w1) continue;
        const int64_t o = g.at(b, ch, oy, ox, g.oh, g.ow);
        if (!max)
          sum += C::load(dy[o]) / static_cast<float>((h1 - h0) * (w1 - w0));
        else if (arg[o] == self)
          sum += C::load(dy[o]);
      }
    dx[i] = C::store(accumulate ? C::load(dx[i]) + sum : sum);
  }
};

}  // namespace cohort::kernels
