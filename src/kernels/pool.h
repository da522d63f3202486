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
  // Whether every index of the input and the output fits 32 bits: the functors then do
  // their index arithmetic in int32, whose division a GPU runs several times faster than
  // int64's (a pooling kernel is bound by it, not by memory).
  COHORT_HD bool fits_int32() const {
    const int64_t pixels = ih * iw > oh * ow ? ih * iw : oh * ow;
    return n * c * pixels < (int64_t{1} << 31);
  }
  // Index of (n, c, y, x) in a value of `h` × `w` pixels.
  template <typename I>
  COHORT_HD I at(I b, I ch, I y, I x, I h, I w) const {
    const I cc = static_cast<I>(c);
    return nhwc ? ((b * h + y) * w + x) * cc + ch : ((b * cc + ch) * h + y) * w + x;
  }
  // (n, c, y, x) of index i in a value of `h` × `w` pixels: i split digit by digit,
  // innermost dimension first.
  template <typename I>
  COHORT_HD void coords(I i, I h, I w, I& b, I& ch, I& y, I& x) const {
    const I cc = static_cast<I>(c);
    b = nhwc ? split(split(split(i, cc, ch), w, x), h, y) : split(split(split(i, w, x), h, y), cc, ch);
  }
  // v / d, leaving v % d in `rest` (one division).
  template <typename I>
  COHORT_HD static I split(I v, I d, I& rest) {
    const I q = v / d;
    rest = v - q * d;
    return q;
  }
};

// The input rows [h0, h1) and columns [w0, w1) of output (oy, ox), clipped to the input.
template <typename I>
COHORT_HD void pool_window(const PoolGeometry& g, I oy, I ox, I& h0, I& h1, I& w0, I& w1) {
  const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw);
  h0 = oy * g.sh - g.ph;
  w0 = ox * g.sw - g.pw;
  h1 = h0 + g.kh;
  w1 = w0 + g.kw;
  h0 = h0 < 0 ? 0 : h0;
  w0 = w0 < 0 ? 0 : w0;
  h1 = h1 > ih ? ih : h1;
  w1 = w1 > iw ? iw : w1;
}

// Element i indexes the output. Max pooling also records, in arg[i], which input pixel
// of the window (h·iw + w) is its first maximum in row-major order (the one the CPU
// backend sends the gradient to); average pooling takes arg = nullptr.
template <typename S = float, typename C = PlainCodec<float>>
struct PoolForward {
  PoolGeometry g;
  bool max;
  COHORT_HD void operator()(int64_t i, S* y, const S* x, int32_t* arg) const {
    if (g.fits_int32())
      run<int32_t>(static_cast<int32_t>(i), y, x, arg);
    else
      run<int64_t>(i, y, x, arg);
  }
  template <typename I>
  COHORT_HD void run(I i, S* y, const S* x, int32_t* arg) const {
    const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw);
    I b, ch, oy, ox;
    g.coords<I>(i, static_cast<I>(g.oh), static_cast<I>(g.ow), b, ch, oy, ox);
    I h0, h1, w0, w1;
    pool_window<I>(g, oy, ox, h0, h1, w0, w1);
    float acc = max ? -3.402823466e38f : 0.f;
    I at = h0 * iw + w0;
    for (I h = h0; h < h1; ++h)
      for (I w = w0; w < w1; ++w) {
        const float v = C::load(x[g.at<I>(b, ch, h, w, ih, iw)]);
        if (!max) {
          acc += v;
        } else if (v > acc) {
          acc = v;
          at = h * iw + w;
        }
      }
    const I count = (h1 - h0) * (w1 - w0);
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
    if (g.fits_int32())
      run<int32_t>(static_cast<int32_t>(i), dx, dy, arg);
    else
      run<int64_t>(i, dx, dy, arg);
  }
  template <typename I>
  COHORT_HD void run(I i, S* dx, const S* dy, const int32_t* arg) const {
    const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow);
    I b, ch, ih_, iw_;
    g.coords<I>(i, ih, iw, b, ch, ih_, iw_);
    // The outputs whose window covers (ih_, iw_).
    I oy0 = (ih_ + g.ph - g.kh + g.sh) / g.sh, ox0 = (iw_ + g.pw - g.kw + g.sw) / g.sw;
    if (ih_ + g.ph - g.kh + 1 <= 0) oy0 = 0;
    if (iw_ + g.pw - g.kw + 1 <= 0) ox0 = 0;
    const I oy1 = (ih_ + g.ph) / g.sh + 1, ox1 = (iw_ + g.pw) / g.sw + 1;
    const int32_t self = static_cast<int32_t>(ih_ * iw + iw_);
    float sum = 0.f;
    for (I oy = oy0; oy < oy1 && oy < oh; ++oy)
      for (I ox = ox0; ox < ox1 && ox < ow; ++ox) {
        I h0, h1, w0, w1;
        pool_window<I>(g, oy, ox, h0, h1, w0, w1);
        if (ih_ < h0 || ih_ >= h1 || iw_ < w0 || iw_ >= w1) continue;
        const I o = g.at<I>(b, ch, oy, ox, oh, ow);
        if (!max)
          sum += C::load(dy[o]) / static_cast<float>((h1 - h0) * (w1 - w0));
        else if (arg[o] == self)
          sum += C::load(dy[o]);
      }
    dx[i] = C::store(accumulate ? C::load(dx[i]) + sum : sum);
  }
};

}  // namespace cohort::kernels
