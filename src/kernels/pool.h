// Max and average pooling over NCHW or NHWC values as COHORT_HD functors, the CUDA
// backend's pooling for every window (ceil-mode outputs whose padding is larger at the
// bottom or right included) and type. Average pooling excludes padding, as the CPU
// backend's does. Backward gathers: element i of the input gradient sums what
// the windows covering it send it, so no two threads write one element. Values are
// stored as S and computed in f32 through the codec C (kernels/layer_ops.h).
#pragma once

#include <cstdint>

#include "kernels/for_each.h"
#include "kernels/hd.h"
#include "kernels/pack.h"
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

// The outputs whose windows may cover input pixel (iy, ix): rows [oy0, oy1) and columns
// [ox0, ox1), before clipping to the output and checking each window (pool_window).
template <typename I>
COHORT_HD void covering_outputs(const PoolGeometry& g, I iy, I ix, I& oy0, I& oy1, I& ox0, I& ox1) {
  oy0 = (iy + g.ph - g.kh + g.sh) / g.sh;
  ox0 = (ix + g.pw - g.kw + g.sw) / g.sw;
  if (iy + g.ph - g.kh + 1 <= 0) oy0 = 0;
  if (ix + g.pw - g.kw + 1 <= 0) ox0 = 0;
  oy1 = (iy + g.ph) / g.sh + 1;
  ox1 = (ix + g.pw) / g.sw + 1;
}

// Element p indexes packs of kVec values of the output (kVec = 1: each value, in either
// layout; kVec > 1: kVec neighbouring channels of one NHWC pixel, one 16-byte access per
// window tap and one coordinate split per pack, for channels that are whole packs:
// packs_fit). Max pooling also records, in arg, which input pixel of the window
// (h·iw + w) is each value's first maximum in row-major order (the one the CPU backend
// sends the gradient to); average pooling takes arg = nullptr. Each value is computed as
// by kVec = 1, whatever kVec.
template <typename S = float, typename C = PlainCodec<float>, int kVec = 1>
struct PoolForward {
  PoolGeometry g;
  bool max;
  COHORT_HD void operator()(int64_t p, S* y, const S* x, int32_t* arg) const {
    if (g.fits_int32())
      run<int32_t>(static_cast<int32_t>(p), y, x, arg);
    else
      run<int64_t>(p, y, x, arg);
  }
  template <typename I>
  COHORT_HD void run(I p, S* y, const S* x, int32_t* arg) const {
    const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), i = p * kVec;
    I b, ch, oy, ox;
    g.coords<I>(i, static_cast<I>(g.oh), static_cast<I>(g.ow), b, ch, oy, ox);
    I h0, h1, w0, w1;
    pool_window<I>(g, oy, ox, h0, h1, w0, w1);
    float acc[kVec];
    Pack<int32_t, kVec> at;
    for (int j = 0; j < kVec; ++j) {
      acc[j] = max ? -3.402823466e38f : 0.f;
      at.v[j] = static_cast<int32_t>(h0 * iw + w0);
    }
    for (I h = h0; h < h1; ++h)
      for (I w = w0; w < w1; ++w) {
        const Pack<S, kVec> v = load_pack<S, kVec>(x + g.at<I>(b, ch, h, w, ih, iw));
        for (int j = 0; j < kVec; ++j) {
          const float f = C::load(v.v[j]);
          if (!max) {
            acc[j] += f;
          } else if (f > acc[j]) {
            acc[j] = f;
            at.v[j] = static_cast<int32_t>(h * iw + w);
          }
        }
      }
    const I count = (h1 - h0) * (w1 - w0);
    Pack<S, kVec> out;
    for (int j = 0; j < kVec; ++j)
      out.v[j] = C::store(max ? acc[j] : (count > 0 ? acc[j] / static_cast<float>(count) : 0.f));
    store_pack<S, kVec>(y + i, out);
    if (max && arg) store_pack<int32_t, kVec>(arg + i, at);
  }
};

// Element p indexes packs of kVec values of the input gradient (as PoolForward's): each
// value the sum of what the windows covering it send (a max window sends its gradient
// to the pixel its forward recorded in arg), summed in the same order whatever kVec.
template <typename S = float, typename C = PlainCodec<float>, int kVec = 1>
struct PoolBackward {
  PoolGeometry g;
  bool max;
  bool accumulate;
  COHORT_HD void operator()(int64_t p, S* dx, const S* dy, const int32_t* arg) const {
    if (g.fits_int32())
      run<int32_t>(static_cast<int32_t>(p), dx, dy, arg);
    else
      run<int64_t>(p, dx, dy, arg);
  }
  template <typename I>
  COHORT_HD void run(I p, S* dx, const S* dy, const int32_t* arg) const {
    const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), oh = static_cast<I>(g.oh), ow = static_cast<I>(g.ow);
    const I i = p * kVec;
    I b, ch, iy, ix;
    g.coords<I>(i, ih, iw, b, ch, iy, ix);
    I oy0, oy1, ox0, ox1;
    covering_outputs<I>(g, iy, ix, oy0, oy1, ox0, ox1);
    const int32_t self = static_cast<int32_t>(iy * iw + ix);
    float sum[kVec] = {};
    for (I oy = oy0; oy < oy1 && oy < oh; ++oy)
      for (I ox = ox0; ox < ox1 && ox < ow; ++ox) {
        I h0, h1, w0, w1;
        pool_window<I>(g, oy, ox, h0, h1, w0, w1);
        if (iy < h0 || iy >= h1 || ix < w0 || ix >= w1) continue;
        const I o = g.at<I>(b, ch, oy, ox, oh, ow);
        const Pack<S, kVec> d = load_pack<S, kVec>(dy + o);
        if (!max) {
          const float n = static_cast<float>((h1 - h0) * (w1 - w0));
          for (int j = 0; j < kVec; ++j) sum[j] += C::load(d.v[j]) / n;
        } else {
          const Pack<int32_t, kVec> a = load_pack<int32_t, kVec>(arg + o);
          for (int j = 0; j < kVec; ++j)
            if (a.v[j] == self) sum[j] += C::load(d.v[j]);
        }
      }
    Pack<S, kVec> out;
    if (accumulate) out = load_pack<S, kVec>(dx + i);
    for (int j = 0; j < kVec; ++j) out.v[j] = C::store(accumulate ? C::load(out.v[j]) + sum[j] : sum[j]);
    store_pack<S, kVec>(dx + i, out);
  }
};

// The pooling passes ordered on `stream`, packed (kPack<S> channels at a time) where
// the values are NHWC with whole packs of channels and 16-byte aligned buffers, value
// by value otherwise. `arg` is max pooling's i32 record of first maxima (null: average).
template <typename S, typename C>
void pool_forward(const Stream& stream, const PoolGeometry& g, bool max, S* y, const S* x, int32_t* arg) {
  const int64_t n = g.n * g.c * g.oh * g.ow;
  if (g.nhwc && packs_fit<S>(g.c, {y, x, arg}))
    for_each(stream, n / kPack<S>, PoolForward<S, C, kPack<S>>{g, max}, y, x, arg);
  else
    for_each(stream, n, PoolForward<S, C>{g, max}, y, x, arg);
}

template <typename S, typename C>
void pool_backward(const Stream& stream, const PoolGeometry& g, bool max, bool accumulate, S* dx, const S* dy,
                   const int32_t* arg) {
  const int64_t n = g.n * g.c * g.ih * g.iw;
  if (g.nhwc && packs_fit<S>(g.c, {dx, dy, arg}))
    for_each(stream, n / kPack<S>, PoolBackward<S, C, kPack<S>>{g, max, accumulate}, dx, dy, arg);
  else
    for_each(stream, n, PoolBackward<S, C>{g, max, accumulate}, dx, dy, arg);
}

}  // namespace cohort::kernels
