// Max and average pooling over NCHW as COHORT_HD functors, for the windows cuDNN's
// pooling cannot place (a ceil-mode output that needs more padding at the bottom or
// right than at the top or left). Average pooling excludes padding, as the CPU
// backend's does. Backward gathers: element i of the input gradient sums what the
// windows covering it send it, so no two threads write one element.
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace cohort::kernels {

struct PoolGeometry {
  int64_t n, c, ih, iw, oh, ow;
  int kh, kw, sh, sw, ph, pw;
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

// Element i indexes the output [n, c, oh, ow].
struct PoolForward {
  PoolGeometry g;
  bool max;
  COHORT_HD void operator()(int64_t i, float* y, const float* x) const {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, nc = i / (g.ow * g.oh);
    int64_t h0, h1, w0, w1;
    pool_window(g, oy, ox, h0, h1, w0, w1);
    const float* plane = x + nc * g.ih * g.iw;
    float acc = max ? -3.402823466e38f : 0.f;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const float v = plane[h * g.iw + w];
        acc = max ? (v > acc ? v : acc) : acc + v;
      }
    const int64_t count = (h1 - h0) * (w1 - w0);
    y[i] = max ? acc : (count > 0 ? acc / static_cast<float>(count) : 0.f);
  }
};

// Element i indexes the input gradient [n, c, ih, iw]. Max pooling sends a window's
// gradient to its first maximum (in row-major order), found again from x and y.
struct PoolBackward {
  PoolGeometry g;
  bool max;
  bool accumulate;
  COHORT_HD void operator()(int64_t i, float* dx, const float* dy, const float* x, const float* y) const {
    const int64_t iw_ = i % g.iw, ih_ = (i / g.iw) % g.ih, nc = i / (g.iw * g.ih);
    // The outputs whose window covers (ih_, iw_).
    int64_t oy0 = (ih_ + g.ph - g.kh + g.sh) / g.sh, ox0 = (iw_ + g.pw - g.kw + g.sw) / g.sw;
    if (ih_ + g.ph - g.kh + 1 <= 0) oy0 = 0;
    if (iw_ + g.pw - g.kw + 1 <= 0) ox0 = 0;
    const int64_t oy1 = (ih_ + g.ph) / g.sh + 1, ox1 = (iw_ + g.pw) / g.sw + 1;
    const float* xp = x + nc * g.ih * g.iw;
    float sum = 0.f;
    for (int64_t oy = oy0; oy < oy1 && oy < g.oh; ++oy)
      for (int64_t ox = ox0; ox < ox1 && ox < g.ow; ++ox) {
        int64_t h0, h1, w0, w1;
        pool_window(g, oy, ox, h0, h1, w0, w1);
        if (ih_ < h0 || ih_ >= h1 || iw_ < w0 || iw_ >= w1) continue;
        const int64_t o = nc * g.oh * g.ow + oy * g.ow + ox;
        if (!max) {
          sum += dy[o] / static_cast<float>((h1 - h0) * (w1 - w0));
          continue;
        }
        // Is (ih_, iw_) the window's first maximum?
        const float top = y[o];
        bool first = false;
        for (int64_t h = h0; h < h1 && !first; ++h)
          for (int64_t w = w0; w < w1; ++w)
            if (xp[h * g.iw + w] == top) {
              first = h == ih_ && w == iw_;
              h = h1;  // stop at the first maximum either way
              break;
            }
        if (first) sum += dy[o];
      }
    dx[i] = accumulate ? dx[i] + sum : sum;
  }
};

}  // namespace cohort::kernels
