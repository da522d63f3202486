// The CPU's own max pooling (backend/cpu/max_pool.h) against a plain reference, in
// every layout pair it takes, f32 and bf16, on values with many ties (small integers,
// exact in bf16, so that maxima and gradient sums compare exactly).
#include "backend/cpu/max_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/half.h"

namespace cohort::backend::cpu {
namespace {

struct Case {
  int64_t c, ih, iw;
  int k, s, p;
  bool ceil;
};

int64_t out_size(int64_t i, int k, int s, int p, bool ceil) {
  const int64_t span = i + 2 * p - k;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (o - 1) * s >= i + p) --o;  // the last window must start inside the input or its top padding
  return o;
}

enum class Form { kBlocked, kNhwc, kNchw };

PoolLayout layout_of(Form f, int64_t n, int64_t c, int64_t h, int64_t w) {
  switch (f) {
    case Form::kBlocked:
      return blocked_layout(n, c, h, w, 16);
    case Form::kNhwc:
      return nhwc_layout(n, c, h, w);
    case Form::kNchw:
      return nchw_layout(n, c, h, w);
  }
  return {};
}

int64_t elements(Form f, int64_t n, int64_t c, int64_t h, int64_t w) {
  return f == Form::kBlocked ? n * ((c + 15) / 16) * 16 * h * w : n * c * h * w;
}

// The reference: each output its clipped window's first maximum in row-major order,
// the gradient summed into that tap (relu: only where the maximum is positive).
void reference(const MaxPoolGeometry& g, const std::vector<float>& x, std::vector<float>& y,
               const std::vector<float>& dy, std::vector<float>& dx, bool relu) {
  y.assign(static_cast<size_t>(g.n * g.c * g.oh * g.ow), 0.f);
  dx.assign(static_cast<size_t>(g.n * g.c * g.ih * g.iw), 0.f);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t h0 = std::max<int64_t>(oy * g.sh - g.ph, 0), h1 = std::min(oy * g.sh - g.ph + g.kh, g.ih);
          const int64_t w0 = std::max<int64_t>(ox * g.sw - g.pw, 0), w1 = std::min(ox * g.sw - g.pw + g.kw, g.iw);
          float best = -3.402823466e38f;
          int64_t at = ((n * g.c + c) * g.ih + h0) * g.iw + w0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const int64_t i = ((n * g.c + c) * g.ih + h) * g.iw + w;
              if (x[static_cast<size_t>(i)] > best) {
                best = x[static_cast<size_t>(i)];
                at = i;
              }
            }
          const size_t o = static_cast<size_t>(((n * g.c + c) * g.oh + oy) * g.ow + ox);
          y[o] = best;
          if (!relu || best > 0.f) dx[static_cast<size_t>(at)] += dy[o];
        }
}

// f32 values as bf16 bits (rounded to nearest even), and back.
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = kernels::float_to_bf16(v[i]);
  return b;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = kernels::bf16_to_float(b[i]);
  return v;
}

// Values in `form` (padding channels zero) from NCHW ones.
std::vector<float> to_form(const std::vector<float>& nchw, Form f, int64_t n, int64_t c, int64_t h, int64_t w) {
  const PoolLayout l = layout_of(f, n, c, h, w);
  std::vector<float> out(static_cast<size_t>(elements(f, n, c, h, w)), 0.f);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          out[static_cast<size_t>(l.at(b, ch, y, x))] = nchw[static_cast<size_t>(((b * c + ch) * h + y) * w + x)];
  return out;
}

// Compares `got` (in `form`) with NCHW `want`, and a blocked layout's padding with 0.
void expect_form(const std::vector<float>& got, const std::vector<float>& want, Form f, int64_t n, int64_t c, int64_t h,
                 int64_t w, const std::string& what) {
  std::vector<float> expected = to_form(want, f, n, c, h, w);
  ASSERT_EQ(got.size(), expected.size()) << what;
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && ++wrong <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << expected[i];
  EXPECT_EQ(wrong, 0) << what;
}

void check(const Case& k, Form in, Form out, bool bf16, bool relu = false) {
  const int64_t n = 2;
  MaxPoolGeometry g{
      n,   k.c, k.ih, k.iw, out_size(k.ih, k.k, k.s, k.p, k.ceil), out_size(k.iw, k.k, k.s, k.p, k.ceil), k.k, k.k,
      k.s, k.s, k.p,  k.p};
  const PoolLayout xl = layout_of(in, n, g.c, g.ih, g.iw), yl = layout_of(out, n, g.c, g.oh, g.ow);
  if (!max_pool_supported(g, xl)) GTEST_SKIP() << "this CPU has no AVX-512: oneDNN's pooling runs instead";
  std::mt19937 rng(static_cast<uint32_t>(k.c * 131 + k.ih * 7 + k.k));
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> x(static_cast<size_t>(n * g.c * g.ih * g.iw)), dy(static_cast<size_t>(n * g.c * g.oh * g.ow));
  for (auto& v : x) v = static_cast<float>(relu ? std::max(small(rng), 0) : small(rng));
  for (auto& v : dy) v = static_cast<float>(small(rng));
  std::vector<float> y_ref, dx_ref;
  reference(g, x, y_ref, dy, dx_ref, relu);

  const std::vector<float> xf = to_form(x, in, n, g.c, g.ih, g.iw), dyf = to_form(dy, out, n, g.c, g.oh, g.ow);
  std::vector<float> y(static_cast<size_t>(elements(out, n, g.c, g.oh, g.ow)), 0.f);
  std::vector<float> dx(xf.size(), 7.f);  // every element, padding too, must be written
  std::vector<uint8_t> arg(static_cast<size_t>(max_pool_arg_size(g, xl)));
  const int64_t planes = max_pool_planes(g, xl);
  if (bf16) {
    const std::vector<uint16_t> xb = to_bf16(xf), dyb = to_bf16(dyf);
    std::vector<uint16_t> yb = to_bf16(y), dxb = to_bf16(dx);
    max_pool_forward(g, true, xb.data(), xl, yb.data(), yl, arg.data(), relu, 0, planes / 2);
    max_pool_forward(g, true, xb.data(), xl, yb.data(), yl, arg.data(), relu, planes / 2, planes);
    max_pool_backward(g, true, dyb.data(), yl, arg.data(), dxb.data(), xl, 0, planes);
    y = from_bf16(yb);
    dx = from_bf16(dxb);
  } else {
    max_pool_forward(g, false, xf.data(), xl, y.data(), yl, arg.data(), relu, 0, planes / 2);
    max_pool_forward(g, false, xf.data(), xl, y.data(), yl, arg.data(), relu, planes / 2, planes);
    max_pool_backward(g, false, dyf.data(), yl, arg.data(), dx.data(), xl, 0, planes);
  }
  expect_form(y, y_ref, out, n, g.c, g.oh, g.ow, "forward");
  expect_form(dx, dx_ref, in, n, g.c, g.ih, g.iw, "backward");
}

const Case kCases[] = {
    {64, 24, 24, 2, 2, 0, false},  // mnist_cnn's: windows that tile the input
    {20, 9, 9, 2, 2, 0, false},    // a row and a column past the last window; padding channels
    {16, 9, 9, 2, 2, 0, true},     // ceil mode: the last windows tile past the input's edge
    {16, 8, 150, 2, 2, 0, false},  // rows of 75 outputs: NCHW ones pass through two runs
    {16, 13, 11, 3, 2, 1, false},  // ResNet-50's: overlapping, clipped at the top and left
    {32, 8, 8, 3, 2, 0, true},     // ceil mode: the last windows clipped at the bottom and right
    {16, 7, 7, 3, 1, 1, false},    // stride 1: up to 9 windows cover a pixel
};

TEST(CpuMaxPool, MatchesTheReferenceFromBlockedValues) {
  for (const Case& k : kCases)
    for (Form out : {Form::kBlocked, Form::kNchw})
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE("c " + std::to_string(k.c) + " " + std::to_string(k.ih) + "x" + std::to_string(k.iw) + " k " +
                     std::to_string(k.k) + " s " + std::to_string(k.s) + (out == Form::kNchw ? " into NCHW" : "") +
                     (bf16 ? " bf16" : " f32"));
        check(k, Form::kBlocked, out, bf16);
      }
}

TEST(CpuMaxPool, MatchesTheReferenceFromNhwcValues) {
  for (const Case& k : kCases) {
    if (k.c % 16 != 0) continue;
    for (Form out : {Form::kNhwc, Form::kNchw})
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE("c " + std::to_string(k.c) + " " + std::to_string(k.ih) + "x" + std::to_string(k.iw) + " k " +
                     std::to_string(k.k) + (out == Form::kNchw ? " into NCHW" : "") + (bf16 ? " bf16" : " f32"));
        check(k, Form::kNhwc, out, bf16);
      }
  }
}

// After a relu (many zeros, so many windows whose maximum is 0), the backward applies
// the relu's gradient too: nothing flows back from a window whose maximum is 0.
TEST(CpuMaxPool, AppliesTheGradientOfTheReluBeforeIt) {
  for (const Case& k : kCases)
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE("c " + std::to_string(k.c) + " k " + std::to_string(k.k) + " s " + std::to_string(k.s) +
                   (bf16 ? " bf16" : " f32"));
      check(k, Form::kBlocked, Form::kBlocked, bf16, true);
      check(k, Form::kBlocked, Form::kNchw, bf16, true);
    }
}

TEST(CpuMaxPool, TakesOnlyWholeSixteensOfChannels) {
  const MaxPoolGeometry g{1, 24, 8, 8, 4, 4, 2, 2, 2, 2, 0, 0};
  EXPECT_FALSE(max_pool_supported(g, nhwc_layout(1, 24, 8, 8)));
  EXPECT_FALSE(max_pool_supported(g, nchw_layout(1, 24, 8, 8)));
  const MaxPoolGeometry huge{1, 16, 32, 32, 1, 1, 16, 16, 16, 16, 0, 0};  // 256 taps: too many for a byte
  EXPECT_FALSE(max_pool_supported(huge, blocked_layout(1, 16, 32, 32, 16)));
}

}  // namespace
}  // namespace cohort::backend::cpu
