// Every layer of the CPU backend against the f64 reference: the reference's backward
// is checked by finite differences, oneDNN's forward and backward are compared with
// the reference (relative error 1e-4), and NCHW and NHWC inputs give the same result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/plan.h"
#include "harness.h"
#include "support/host_views.h"

namespace {

using namespace testing_compute;
using cohort::ActKind;
using cohort::ConvOptions;
using cohort::PoolOptions;
using cohort::backend::PointwiseBackward;

constexpr double kTol = 1e-4;

void expect_close(const ref::Vec& got, const ref::Vec& want, const char* what, double tol = kTol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LT(ref::rel_err(got, want), tol) << what;
}

void expect_layouts_agree(Graph& g, int64_t n, const ref::Vec& x, const std::vector<ref::Vec>& params,
                          const ref::Vec& dy) {
  Result a = run(g, n, x, params, dy, Layout::kNCHW);
  Result b = run(g, n, x, params, dy, Layout::kNHWC);
  expect_close(b.y, a.y, "NHWC output", 1e-5);
  expect_close(b.dx, a.dx, "NHWC input gradient", 1e-5);
  for (size_t i = 0; i < a.dparams.size(); ++i)
    expect_close(b.dparams[i], a.dparams[i], "NHWC parameter gradient", 1e-5);
}

struct ConvCase {
  int n, c, h, w, out, k, stride, pad, dil, groups;
  bool bias;
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, MatchesReferenceForwardAndBackward) {
  const ConvCase cc = GetParam();
  ref::Geo geo{cc.n, cc.c, cc.h, cc.w, cc.k, cc.k, cc.stride, cc.pad, cc.dil};
  Graph g({cc.c, cc.h, cc.w});
  g.conv(g.input(), "conv", cc.out, ConvOptions{cc.k, cc.k, cc.stride, cc.pad, cc.dil, cc.groups, cc.bias});
  ASSERT_EQ(g.shape(1), (cohort::Shape{cc.out, geo.oh(), geo.ow()}));
  const size_t wn = static_cast<size_t>(cc.out) * (cc.c / cc.groups) * cc.k * cc.k;
  ref::Vec x = ref::random_vec(static_cast<size_t>(cc.n) * cc.c * cc.h * cc.w, 1);
  ref::Vec w = ref::random_vec(wn, 2);
  ref::Vec b = ref::random_vec(static_cast<size_t>(cc.out), 3);
  ref::Vec dy = ref::random_vec(static_cast<size_t>(cc.n) * cc.out * geo.oh() * geo.ow(), 4);
  std::vector<ref::Vec> params{w};
  if (cc.bias) params.push_back(b);

  ref::Vec y = ref::conv_fwd(geo, cc.out, cc.groups, x, w, cc.bias ? &b : nullptr);
  ref::Vec dx, dw, db;
  ref::conv_bwd(geo, cc.out, cc.groups, x, w, dy, dx, dw, db);

  Result r = run(g, cc.n, x, params, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "weight gradient");
  if (cc.bias) expect_close(r.dparams[1], db, "bias gradient");
  expect_layouts_agree(g, cc.n, x, params, dy);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Values(ConvCase{2, 3, 7, 7, 4, 3, 1, 1, 1, 1, true},
                                           ConvCase{2, 16, 8, 8, 16, 3, 1, 1, 1, 1, true},    // blocked layouts
                                           ConvCase{2, 16, 9, 9, 32, 3, 2, 0, 1, 1, false},   // stride 2
                                           ConvCase{1, 4, 9, 8, 6, 3, 1, 2, 2, 1, true},      // dilation 2
                                           ConvCase{2, 8, 7, 7, 8, 5, 1, 2, 1, 2, true},      // groups
                                           ConvCase{2, 32, 6, 6, 32, 3, 1, 1, 1, 2, true},    // groups, blocked
                                           ConvCase{3, 16, 5, 5, 8, 1, 2, 0, 1, 1, false}));  // 1x1 stride 2

// The 1x1 convolutions of a plan whose backward is matrix products.
int matmul_backwards(Graph& g, int64_t n, Layout layout) {
  return dynamic_cast<cohort::backend::cpu::CpuPlan&>(g.plan(n, layout, true, true)).matmul_backwards_;
}

struct PointwiseCase {
  int n, c, h, w, out, stride;
};

class PointwiseTest : public ::testing::TestWithParam<PointwiseCase> {};

// run(), after a step on other values whose buffer stays alive and turns NaN before
// the second backward: a plan still reading the first step's input would show it.
Result run_after_another_input(Graph& g, int64_t n, const ref::Vec& x, const std::vector<ref::Vec>& params,
                               const ref::Vec& dy, Layout layout) {
  set_params(g, params);
  const cohort::Shape &in_shape = g.shape(0), &out_shape = g.shape(g.num_layers() - 1);
  auto& plan = g.plan(n, layout, true, true);
  std::vector<float> first = to_f32(ref::random_vec(x.size(), 7)),
                     xin = to_f32(to_layout(x, in_shape, n, layout, true));
  std::vector<float> y(dy.size()), dx(x.size()), dyl = to_f32(to_layout(dy, out_shape, n, layout, true));
  plan.forward(cohort::test::batch_view(first, g, n, layout), {}, 0, {});
  plan.backward(cohort::test::batch_view(dyl, g, n, layout, g.num_layers() - 1), [](int, const cohort::Event&) {}, {});
  plan.forward(cohort::test::batch_view(xin, g, n, layout), {}, 1, {});
  std::fill(first.begin(), first.end(), std::nanf(""));
  plan.read(g.num_layers() - 1, cohort::test::batch_view(y, g, n, layout, g.num_layers() - 1));
  plan.backward(cohort::test::batch_view(dyl, g, n, layout, g.num_layers() - 1), [](int, const cohort::Event&) {}, {});
  plan.read_input_grad(cohort::test::batch_view(dx, g, n, layout));
  Result r{to_layout(to_f64(y), out_shape, n, layout, false), to_layout(to_f64(dx), in_shape, n, layout, false), {}};
  for (const auto& p : g.params())
    r.dparams.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  return r;
}

// cpu_pointwise_backward=matmul: a 1x1 convolution's weight and input gradients as
// matrix products over NHWC values (at a stride: x read and dx written at every
// stride-th pixel, zero elsewhere) match the reference from either input layout, also
// in a step whose input sits elsewhere than the step before's; =convolution keeps
// oneDNN's.
TEST_P(PointwiseTest, MatmulBackwardMatchesReference) {
  const PointwiseCase pc = GetParam();
  ref::Geo geo{pc.n, pc.c, pc.h, pc.w, 1, 1, pc.stride, 0, 1};
  Graph g({pc.c, pc.h, pc.w});
  g.conv(g.input(), "conv", pc.out, ConvOptions{1, 1, pc.stride, 0, 1, 1, false});
  g.materialize(1);
  g.set_pointwise_backward(PointwiseBackward::kMatmul);
  const size_t xn = static_cast<size_t>(pc.n) * pc.c * pc.h * pc.w;
  ref::Vec x = ref::random_vec(xn, 1), w = ref::random_vec(static_cast<size_t>(pc.out) * pc.c, 2);
  ref::Vec dy = ref::random_vec(static_cast<size_t>(pc.n) * pc.out * geo.oh() * geo.ow(), 4);
  ref::Vec dx, dw, db;
  ref::conv_bwd(geo, pc.out, 1, x, w, dy, dx, dw, db);
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    Result r = run_after_another_input(g, pc.n, x, {w}, dy, layout);
    expect_close(r.y, ref::conv_fwd(geo, pc.out, 1, x, w, nullptr), "output");
    expect_close(r.dx, dx, "input gradient");
    expect_close(r.dparams[0], dw, "weight gradient");
    EXPECT_EQ(matmul_backwards(g, pc.n, layout), 1);
  }
  g.set_pointwise_backward(PointwiseBackward::kConvolution);
  Result r = run(g, pc.n, x, {w}, dy);
  expect_close(r.dx, dx, "input gradient (oneDNN)");
  expect_close(r.dparams[0], dw, "weight gradient (oneDNN)");
  EXPECT_EQ(matmul_backwards(g, pc.n, Layout::kNCHW), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PointwiseTest,
                         ::testing::Values(PointwiseCase{2, 16, 8, 8, 32, 1}, PointwiseCase{3, 16, 9, 9, 8, 2},
                                           PointwiseCase{2, 5, 7, 6, 3, 2},     // channels of no block
                                           PointwiseCase{1, 8, 7, 5, 16, 3}));  // stride 3, uneven edges

// 1x1 convolutions of one value, one after a relu, and a 3x3 one (blocked layouts)
// that a sum joins: the gradients the value gets add up in either layout, and the
// relu masks its own.
TEST(Pointwise, MatmulGradientsOfAValueAdd) {
  const int n = 2;
  Graph g({8, 6, 6});
  const int a = g.conv(g.input(), "a", 16, ConvOptions{1, 1, 1, 0, 1, 1, false});
  const int b = g.conv(g.relu(a, "relu"), "b", 16, ConvOptions{1, 1, 2, 0, 1, 1, false});
  const int c = g.conv(a, "c", 16, ConvOptions{1, 1, 2, 0, 1, 1, false});
  const int d = g.conv(a, "d", 16, ConvOptions{3, 3, 2, 1, 1, 1, false});
  g.add({b, c, d}, "sum");
  g.materialize(1);
  ref::Vec x = ref::random_vec(n * 8 * 36, 1), wa = ref::random_vec(16 * 8, 2), wb = ref::random_vec(16 * 16, 3);
  ref::Vec wc = ref::random_vec(16 * 16, 4), wd = ref::random_vec(16 * 16 * 9, 6), dy = ref::random_vec(n * 16 * 9, 5);
  const Result want = run(g, n, x, {wa, wb, wc, wd}, dy);  // oneDNN's backward convolutions (f32)
  g.set_pointwise_backward(PointwiseBackward::kMatmul);
  const Result got = run(g, n, x, {wa, wb, wc, wd}, dy);
  EXPECT_EQ(matmul_backwards(g, n, Layout::kNCHW), 3);
  expect_close(got.y, want.y, "output", 1e-5);
  expect_close(got.dx, want.dx, "input gradient", 1e-5);
  for (size_t i = 0; i < want.dparams.size(); ++i)
    expect_close(got.dparams[i], want.dparams[i], "weight gradient", 1e-5);
}

TEST(Reference, ConvBackwardMatchesFiniteDifferences) {
  ref::Geo geo{2, 4, 5, 6, 3, 3, 2, 1, 1};
  const int out = 4, groups = 2;
  ref::Vec x = ref::random_vec(2 * 4 * 5 * 6, 5), w = ref::random_vec(4 * 2 * 9, 6), b = ref::random_vec(4, 7);
  ref::Vec dy = ref::random_vec(static_cast<size_t>(2 * out * geo.oh() * geo.ow()), 8);
  ref::Vec dx, dw, db;
  ref::conv_bwd(geo, out, groups, x, w, dy, dx, dw, db);
  auto nx = ref::numeric_grad([&](const ref::Vec& v) { return ref::conv_fwd(geo, out, groups, v, w, &b); }, x, dy);
  auto nw = ref::numeric_grad([&](const ref::Vec& v) { return ref::conv_fwd(geo, out, groups, x, v, &b); }, w, dy);
  auto nb = ref::numeric_grad([&](const ref::Vec& v) { return ref::conv_fwd(geo, out, groups, x, w, &v); }, b, dy);
  EXPECT_LT(ref::rel_err(dx, nx), 1e-7);
  EXPECT_LT(ref::rel_err(dw, nw), 1e-7);
  EXPECT_LT(ref::rel_err(db, nb), 1e-7);
}

TEST(Dense, MatchesReferenceAndFiniteDifferences) {
  const int n = 4, in = 20, out = 7;
  Graph g({in});
  g.dense(g.input(), "fc", out);
  ref::Vec x = ref::random_vec(n * in, 1), w = ref::random_vec(out * in, 2), b = ref::random_vec(out, 3);
  ref::Vec dy = ref::random_vec(n * out, 4);
  ref::Vec dx, dw, db;
  ref::dense_bwd(n, in, out, x, w, dy, dx, dw, db);
  EXPECT_LT(ref::rel_err(
                dx, ref::numeric_grad([&](const ref::Vec& v) { return ref::dense_fwd(n, in, out, v, w, b); }, x, dy)),
            1e-7);
  EXPECT_LT(ref::rel_err(
                dw, ref::numeric_grad([&](const ref::Vec& v) { return ref::dense_fwd(n, in, out, x, v, b); }, w, dy)),
            1e-7);
  Result r = run(g, n, x, {w, b}, dy);
  expect_close(r.y, ref::dense_fwd(n, in, out, x, w, b), "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "weight gradient");
  expect_close(r.dparams[1], db, "bias gradient");
}

TEST(Dense, AfterFlattenOfBlockedConvOutput) {
  const int n = 2;
  Graph g({16, 4, 4});
  int c = g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 1, 1, 1, false});
  int f = g.flatten(c, "flat");
  g.dense(f, "fc", 5);
  ref::Geo geo{n, 16, 4, 4, 3, 3, 1, 1, 1};
  ref::Vec x = ref::random_vec(n * 16 * 16, 1), w = ref::random_vec(16 * 16 * 9, 2);
  ref::Vec fw = ref::random_vec(5 * 256, 3), fb = ref::random_vec(5, 4), dy = ref::random_vec(n * 5, 5);
  ref::Vec y1 = ref::conv_fwd(geo, 16, 1, x, w, nullptr);
  ref::Vec y = ref::dense_fwd(n, 256, 5, y1, fw, fb);
  ref::Vec d1, dfw, dfb, dx, dw, db;
  ref::dense_bwd(n, 256, 5, y1, fw, dy, d1, dfw, dfb);
  ref::conv_bwd(geo, 16, 1, x, w, d1, dx, dw, db);
  Result r = run(g, n, x, {w, fw, fb}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "conv weight gradient");
  expect_close(r.dparams[1], dfw, "dense weight gradient");
  expect_layouts_agree(g, n, x, {w, fw, fb}, dy);
}

struct PoolCase {
  int c, h, w, k, s, p;
  bool ceil, max;
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, MatchesReference) {
  const PoolCase pc = GetParam();
  const int n = 2;
  Graph g({pc.c, pc.h, pc.w});
  PoolOptions o{pc.k, pc.s, pc.p, pc.ceil};
  if (pc.max)
    g.max_pool(g.input(), "pool", o);
  else
    g.avg_pool(g.input(), "pool", o);
  const int oh = static_cast<int>(g.shape(1)[1]), ow = static_cast<int>(g.shape(1)[2]);
  ref::Geo geo{n, pc.c, pc.h, pc.w, pc.k, pc.k, pc.s, pc.p, 1};
  ref::Vec x = ref::random_vec(static_cast<size_t>(n) * pc.c * pc.h * pc.w, 11);
  ref::Vec dy = ref::random_vec(static_cast<size_t>(n) * pc.c * oh * ow, 12);
  ref::Vec y = ref::pool_fwd(geo, oh, ow, pc.max, x);
  ref::Vec dx = ref::pool_bwd(geo, oh, ow, pc.max, x, dy);
  ref::Vec nx = ref::numeric_grad([&](const ref::Vec& v) { return ref::pool_fwd(geo, oh, ow, pc.max, v); }, x, dy);
  EXPECT_LT(ref::rel_err(dx, nx), 1e-6) << "reference backward vs finite differences";
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Values(PoolCase{3, 8, 8, 2, 2, 0, false, true},
                                           PoolCase{16, 7, 7, 3, 2, 1, false, true},
                                           PoolCase{16, 8, 8, 3, 2, 0, true, true},  // ceil mode
                                           PoolCase{3, 8, 8, 2, 2, 0, false, false},
                                           PoolCase{16, 7, 7, 3, 2, 1, false, false},
                                           PoolCase{4, 7, 7, 3, 1, 1, true, true}));

// Max pooling of a convolution's blocked output: on a CPU with AVX-512 the CPU backend's
// own loops read it, writing plain values for a flatten and blocked ones for another
// convolution (elsewhere oneDNN's pooling runs, and the tests check that instead). Here
// the convolution applies a relu, whose gradient the pooling's backward then applies.
TEST(MaxPool, OfABlockedConvAndReluIntoAFlatten) {
  const int n = 2;
  Graph g({16, 6, 6});
  int c = g.relu(g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 1, 1, 1, false}), "relu");
  int f = g.flatten(g.max_pool(c, "pool", PoolOptions{2, 2, 0, false}), "flat");
  g.dense(f, "fc", 5);
  ref::Geo geo{n, 16, 6, 6, 3, 3, 1, 1, 1}, pgeo{n, 16, 6, 6, 2, 2, 2, 0, 1};
  ref::Vec x = ref::random_vec(n * 16 * 36, 1), w = ref::random_vec(16 * 16 * 9, 2);
  ref::Vec fw = ref::random_vec(5 * 144, 3), fb = ref::random_vec(5, 4), dy = ref::random_vec(n * 5, 5);
  ref::Vec y1 = ref::conv_fwd(geo, 16, 1, x, w, nullptr);
  for (double& v : y1) v = std::max(v, 0.0);
  ref::Vec y2 = ref::pool_fwd(pgeo, 3, 3, true, y1);
  ref::Vec d2, dfw, dfb, dx, dw, db;
  ref::dense_bwd(n, 144, 5, y2, fw, dy, d2, dfw, dfb);
  ref::Vec d1 = ref::pool_bwd(pgeo, 3, 3, true, y1, d2);
  for (size_t i = 0; i < d1.size(); ++i) d1[i] = y1[i] > 0 ? d1[i] : 0.0;
  ref::conv_bwd(geo, 16, 1, x, w, d1, dx, dw, db);
  Result r = run(g, n, x, {w, fw, fb}, dy);
  expect_close(r.y, ref::dense_fwd(n, 144, 5, y2, fw, fb), "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "conv weight gradient");
  expect_close(r.dparams[1], dfw, "dense weight gradient");
  expect_layouts_agree(g, n, x, {w, fw, fb}, dy);
}

TEST(MaxPool, OfABlockedConvIntoAConv) {
  const int n = 2;
  Graph g({16, 7, 7});
  int c = g.conv(g.input(), "conv1", 32, ConvOptions{3, 3, 1, 1, 1, 1, false});
  g.conv(g.max_pool(c, "pool", PoolOptions{3, 2, 1, false}), "conv2", 16, ConvOptions{1, 1, 1, 0, 1, 1, false});
  ref::Geo geo1{n, 16, 7, 7, 3, 3, 1, 1, 1}, pgeo{n, 32, 7, 7, 3, 3, 2, 1, 1}, geo2{n, 32, 4, 4, 1, 1, 1, 0, 1};
  ref::Vec x = ref::random_vec(n * 16 * 49, 1), w1 = ref::random_vec(32 * 16 * 9, 2);
  ref::Vec w2 = ref::random_vec(16 * 32, 3), dy = ref::random_vec(n * 16 * 16, 4);
  ref::Vec y1 = ref::conv_fwd(geo1, 32, 1, x, w1, nullptr), y2 = ref::pool_fwd(pgeo, 4, 4, true, y1);
  ref::Vec d2, dw2, db2, dx, dw1, db1;
  ref::conv_bwd(geo2, 16, 1, y2, w2, dy, d2, dw2, db2);
  ref::conv_bwd(geo1, 32, 1, x, w1, ref::pool_bwd(pgeo, 4, 4, true, y1, d2), dx, dw1, db1);
  Result r = run(g, n, x, {w1, w2}, dy);
  expect_close(r.y, ref::conv_fwd(geo2, 16, 1, y2, w2, nullptr), "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw1, "conv1 weight gradient");
  expect_close(r.dparams[1], dw2, "conv2 weight gradient");
  expect_layouts_agree(g, n, x, {w1, w2}, dy);
}

TEST(GlobalAvgPool, IsTheMeanOverSpace) {
  const int n = 2, c = 16, h = 3, w = 5;
  Graph g({c, h, w});
  g.global_avg_pool(g.input(), "gap");
  ref::Geo geo{n, c, h, w, h, w, 1, 0, 1};
  ref::Vec x = ref::random_vec(n * c * h * w, 1), dy = ref::random_vec(n * c, 2);
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, ref::pool_fwd(geo, 1, 1, false, x), "output");
  expect_close(r.dx, ref::pool_bwd(geo, 1, 1, false, x, dy), "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

TEST(BatchNorm, TrainingMatchesReferenceAndUpdatesRunningStats) {
  const int n = 3, c = 16, h = 3, w = 4;
  const double eps = 1e-5;
  Graph g({c, h, w});
  g.batch_norm(g.input(), "bn", static_cast<float>(eps), 0.1f);
  ref::Geo geo{n, c, h, w, 1, 1, 1, 0, 1};
  ref::Vec x = ref::random_vec(n * c * h * w, 1, -2, 3), sc = ref::random_vec(c, 2), sh = ref::random_vec(c, 3);
  ref::Vec dy = ref::random_vec(n * c * h * w, 4);
  ref::Vec dx, dsc, dsh;
  ref::bn_bwd(geo, x, sc, eps, dy, dx, dsc, dsh);
  auto nx = ref::numeric_grad([&](const ref::Vec& v) { return ref::bn_fwd(geo, v, sc, sh, eps); }, x, dy);
  EXPECT_LT(ref::rel_err(dx, nx), 1e-6) << "reference backward vs finite differences";
  Result r = run(g, n, x, {sc, sh}, dy);
  expect_close(r.y, ref::bn_fwd(geo, x, sc, sh, eps), "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dsc, "scale gradient");
  expect_close(r.dparams[1], dsh, "shift gradient");
  // running mean after one step: 0.9 * 0 + 0.1 * batch mean
  const float* rm = g.states()[0].value.data_as<float>();
  double mean0 = 0;
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < h * w; ++i) mean0 += x[ref::at4(c, h, w, b, 0, 0, 0) + static_cast<size_t>(i)];
  mean0 /= n * h * w;
  EXPECT_NEAR(rm[0], 0.1 * mean0, 1e-5);
  expect_layouts_agree(g, n, x, {sc, sh}, dy);
}

TEST(BatchNorm, InferenceUsesRunningStatistics) {
  const int c = 4;
  Graph g({c, 2, 2});
  g.batch_norm(g.input(), "bn");
  g.materialize(1);
  float* rm = g.states()[0].value.data_as<float>();
  float* rv = g.states()[1].value.data_as<float>();
  for (int i = 0; i < c; ++i) rm[i] = static_cast<float>(i), rv[i] = 4.f;
  std::vector<float> x(c * 4, 2.f), y(c * 4);
  g.infer(cohort::test::batch_view(x, g, 1, Layout::kNCHW), Layout::kNCHW,
          cohort::test::output_view(y, g, 1, Layout::kNCHW));
  for (int i = 0; i < c; ++i) EXPECT_NEAR(y[static_cast<size_t>(i) * 4], (2.f - static_cast<float>(i)) / 2.f, 1e-4);
}

TEST(Lrn, MatchesReferenceWithFiniteDifferenceGradient) {
  const int n = 2, c = 16, h = 3, w = 3, size = 5;
  const double alpha = 1e-2, beta = 0.75, k = 2.0;
  Graph g({c, h, w});
  g.lrn(g.input(), "lrn", size, static_cast<float>(alpha), static_cast<float>(beta), static_cast<float>(k));
  ref::Geo geo{n, c, h, w, 1, 1, 1, 0, 1};
  ref::Vec x = ref::random_vec(n * c * h * w, 1, -3, 3), dy = ref::random_vec(n * c * h * w, 2);
  auto f = [&](const ref::Vec& v) { return ref::lrn_fwd(geo, size, alpha, beta, k, v); };
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, f(x), "output");
  expect_close(r.dx, ref::numeric_grad(f, x, dy), "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

struct ActCase {
  ActKind kind;
  ref::Act ref_kind;
  float alpha;
};

class ActTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(ActTest, MatchesReference) {
  const ActCase ac = GetParam();
  const int n = 2, c = 16, h = 3, w = 3;
  Graph g({c, h, w});
  g.activation(g.input(), "act", ac.kind, ac.alpha);
  ref::Vec x = ref::random_vec(n * c * h * w, 1, -3, 3), dy = ref::random_vec(n * c * h * w, 2);
  for (auto& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;  // keep finite differences away from the kink
  ref::Vec y(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = ref::act_f(ac.ref_kind, x[i], ac.alpha);
    dx[i] = ref::act_df(ac.ref_kind, x[i], ac.alpha) * dy[i];
  }
  auto f = [&](const ref::Vec& v) {
    ref::Vec o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = ref::act_f(ac.ref_kind, v[i], ac.alpha);
    return o;
  };
  EXPECT_LT(ref::rel_err(dx, ref::numeric_grad(f, x, dy)), 1e-6);
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ActTest,
                         ::testing::Values(ActCase{ActKind::kRelu, ref::Act::kRelu, 0.f},
                                           ActCase{ActKind::kLeakyRelu, ref::Act::kLeaky, 0.1f},
                                           ActCase{ActKind::kElu, ref::Act::kElu, 1.f},
                                           ActCase{ActKind::kTanh, ref::Act::kTanh, 0.f},
                                           ActCase{ActKind::kSigmoid, ref::Act::kSigmoid, 0.f}));

TEST(SoftmaxXent, LossAndGradientMatchReferenceWithLabelSmoothing) {
  const int n = 5, k = 7;
  const double eps = 0.1;
  Graph g({k});
  g.softmax_xent(g.input(), "loss", static_cast<float>(eps));
  g.materialize(1);
  ref::Vec z = ref::random_vec(n * k, 1, -4, 4);
  std::vector<int32_t> labels{0, 3, 6, 2, 2};
  ref::Vec grad;
  const double want = ref::xent(n, k, z, labels, eps, &grad);
  ref::Vec ng(z.size());
  {
    ref::Vec zz = z;
    for (size_t i = 0; i < zz.size(); ++i) {
      const double keep = zz[i];
      zz[i] = keep + 1e-6;
      const double a = ref::xent(n, k, zz, labels, eps, nullptr);
      zz[i] = keep - 1e-6;
      const double b = ref::xent(n, k, zz, labels, eps, nullptr);
      zz[i] = keep;
      ng[i] = (a - b) / 2e-6;
    }
  }
  EXPECT_LT(ref::rel_err(grad, ng), 1e-6);
  auto& plan = g.plan(n, Layout::kNCHW, true, true);
  std::vector<float> zf = to_f32(z), dz(z.size());
  plan.forward(cohort::test::view(zf, {n, k}), cohort::Tensor::wrap(labels.data(), {n}, cohort::DType::kI32), 0, {});
  EXPECT_NEAR(plan.loss(), want, 1e-5);
  plan.backward({}, [](int, const cohort::Event&) {}, {});
  plan.read_input_grad(cohort::test::view(dz, {n, k}));
  EXPECT_LT(ref::rel_err(dz, grad), kTol);
}

TEST(Dropout, IsDeterministicFromTheSeedAndScalesKeptValues) {
  const int n = 4, f = 1000;
  const float p = 0.25f;
  auto masks = [&](uint64_t seed) {
    Graph g({f});
    g.dropout(g.input(), "drop", p);
    g.set_dropout_seed(seed);
    g.materialize(1);
    std::vector<float> x(n * f, 1.f), y(n * f), dx(n * f), dy(n * f, 2.f);
    auto& plan = g.plan(n, Layout::kNCHW, true, true);
    plan.forward(cohort::test::view(x, {n, f}), {}, 7, {});
    plan.read(1, cohort::test::view(y, {n, f}));
    plan.backward(cohort::test::view(dy, {n, f}), [](int, const cohort::Event&) {}, {});
    plan.read_input_grad(cohort::test::view(dx, {n, f}));
    for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(dx[i], 2.f * y[i]);
    return y;
  };
  std::vector<float> a = masks(42), b = masks(42), c = masks(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int dropped = 0;
  for (float v : a) {
    if (v == 0.f)
      ++dropped;
    else
      EXPECT_FLOAT_EQ(v, 1.f / (1.f - p));
  }
  EXPECT_NEAR(static_cast<double>(dropped) / a.size(), p, 0.03);
}

TEST(Dropout, IsIdentityInInference) {
  Graph g({10});
  g.dropout(g.input(), "drop", 0.5f);
  g.materialize(1);
  std::vector<float> x(20), y(20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  g.infer(cohort::test::batch_view(x, g, 2, Layout::kNCHW), Layout::kNCHW,
          cohort::test::output_view(y, g, 2, Layout::kNCHW));
  EXPECT_EQ(x, y);
}

TEST(Concat, JoinsChannelsAndSplitsGradients) {
  const int n = 2;
  Graph g({16, 3, 3});
  int a = g.relu(g.input(), "a");
  int b = g.activation(g.input(), "b", ActKind::kTanh);
  int c = g.activation(g.input(), "c", ActKind::kSigmoid);
  g.concat({a, b, c}, "cat");
  ASSERT_EQ(g.shape(4), (cohort::Shape{48, 3, 3}));
  ref::Vec x = ref::random_vec(n * 16 * 9, 1, -2, 2), dy = ref::random_vec(n * 48 * 9, 2);
  ref::Vec y(dy.size()), dx(x.size(), 0.0);
  const ref::Act kinds[] = {ref::Act::kRelu, ref::Act::kTanh, ref::Act::kSigmoid};
  for (int s = 0; s < n; ++s)
    for (int part = 0; part < 3; ++part)
      for (int ch = 0; ch < 16; ++ch)
        for (int i = 0; i < 9; ++i) {
          const size_t xi = ref::at4(16, 3, 3, s, ch, 0, 0) + static_cast<size_t>(i);
          const size_t yi = ref::at4(48, 3, 3, s, part * 16 + ch, 0, 0) + static_cast<size_t>(i);
          y[yi] = ref::act_f(kinds[part], x[xi], 0);
          dx[xi] += ref::act_df(kinds[part], x[xi], 0) * dy[yi];
        }
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient (sum over three consumers)");
  expect_layouts_agree(g, n, x, {}, dy);
}

TEST(Concat, UnalignedChannelCounts) {
  const int n = 2;
  Graph g({3, 4, 4});
  int a = g.conv(g.input(), "a", 5, ConvOptions{1, 1, 1, 0, 1, 1, false});
  int b = g.conv(g.input(), "b", 7, ConvOptions{3, 3, 1, 1, 1, 1, false});
  g.concat({a, b}, "cat");
  ref::Geo g1{n, 3, 4, 4, 1, 1, 1, 0, 1}, g3{n, 3, 4, 4, 3, 3, 1, 1, 1};
  ref::Vec x = ref::random_vec(n * 48, 1), wa = ref::random_vec(15, 2), wb = ref::random_vec(7 * 27, 3);
  ref::Vec dy = ref::random_vec(n * 12 * 16, 4);
  ref::Vec ya = ref::conv_fwd(g1, 5, 1, x, wa, nullptr), yb = ref::conv_fwd(g3, 7, 1, x, wb, nullptr);
  ref::Vec y(dy.size()), dya(ya.size()), dyb(yb.size());
  for (int s = 0; s < n; ++s)
    for (int ch = 0; ch < 12; ++ch)
      for (int i = 0; i < 16; ++i) {
        const size_t yi = ref::at4(12, 4, 4, s, ch, 0, 0) + static_cast<size_t>(i);
        if (ch < 5) {
          y[yi] = ya[ref::at4(5, 4, 4, s, ch, 0, 0) + static_cast<size_t>(i)];
          dya[ref::at4(5, 4, 4, s, ch, 0, 0) + static_cast<size_t>(i)] = dy[yi];
        } else {
          y[yi] = yb[ref::at4(7, 4, 4, s, ch - 5, 0, 0) + static_cast<size_t>(i)];
          dyb[ref::at4(7, 4, 4, s, ch - 5, 0, 0) + static_cast<size_t>(i)] = dy[yi];
        }
      }
  ref::Vec dxa, dwa, dba, dxb, dwb, dbb;
  ref::conv_bwd(g1, 5, 1, x, wa, dya, dxa, dwa, dba);
  ref::conv_bwd(g3, 7, 1, x, wb, dyb, dxb, dwb, dbb);
  for (size_t i = 0; i < dxa.size(); ++i) dxa[i] += dxb[i];
  Result r = run(g, n, x, {wa, wb}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dxa, "input gradient");
  expect_close(r.dparams[0], dwa, "weight a gradient");
  expect_close(r.dparams[1], dwb, "weight b gradient");
}

TEST(Add, SumsInputsAndCopiesGradients) {
  const int n = 2;
  Graph g({16, 3, 3});
  int a = g.activation(g.input(), "a", ActKind::kTanh);
  g.add({a, g.input()}, "sum");
  ref::Vec x = ref::random_vec(n * 144, 1), dy = ref::random_vec(n * 144, 2), y(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = std::tanh(x[i]) + x[i];
    dx[i] = dy[i] * (ref::act_df(ref::Act::kTanh, x[i], 0) + 1);
  }
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

TEST(ShortcutA, SubsamplesAndPadsChannels) {
  const int n = 2, c = 4, h = 5, w = 5;
  Graph g({c, h, w});
  g.shortcut_a(g.input(), "sc", 8, 2);
  ASSERT_EQ(g.shape(1), (cohort::Shape{8, 3, 3}));
  ref::Vec x = ref::random_vec(n * c * h * w, 1), dy = ref::random_vec(n * 8 * 9, 2);
  ref::Vec y(dy.size(), 0.0), dx(x.size(), 0.0);
  for (int s = 0; s < n; ++s)
    for (int ch = 0; ch < c; ++ch)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          const size_t yi = ref::at4(8, 3, 3, s, ch + 2, i, j), xi = ref::at4(c, h, w, s, ch, 2 * i, 2 * j);
          y[yi] = x[xi];
          dx[xi] = dy[yi];
        }
  Result r = run(g, n, x, {}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_layouts_agree(g, n, x, {}, dy);
}

}  // namespace

namespace {

// y = relu(z) and the gradient dz it passes back from dy.
void relu_reference(const ref::Vec& z, const ref::Vec& dy, ref::Vec& y, ref::Vec& dz) {
  y.resize(z.size());
  dz.resize(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    y[i] = z[i] > 0 ? z[i] : 0;
    dz[i] = z[i] > 0 ? dy[i] : 0;
  }
}

TEST(BatchNorm, FusedWithFollowingReluMatchesReference) {
  const int n = 2, c = 16, h = 3, w = 3;
  const double eps = 1e-5;
  Graph g({c, h, w});
  int b = g.batch_norm(g.input(), "bn", static_cast<float>(eps));
  g.relu(b, "relu");
  ref::Geo geo{n, c, h, w, 1, 1, 1, 0, 1};
  ref::Vec x = ref::random_vec(n * c * h * w, 1, -2, 3), sc = ref::random_vec(c, 2), sh = ref::random_vec(c, 3);
  ref::Vec dy = ref::random_vec(n * c * h * w, 4);
  ref::Vec z = ref::bn_fwd(geo, x, sc, sh, eps), y, dz;
  relu_reference(z, dy, y, dz);
  ref::Vec dx, dsc, dsh;
  ref::bn_bwd(geo, x, sc, eps, dz, dx, dsc, dsh);
  Result r = run(g, n, x, {sc, sh}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dsc, "scale gradient");
  expect_close(r.dparams[1], dsh, "shift gradient");
  expect_layouts_agree(g, n, x, {sc, sh}, dy);
}

// conv → relu and dense → relu: the relu runs as the producer's post-op in forward and
// from the fused output in backward.
TEST(Conv, FusedWithFollowingReluMatchesReference) {
  const int n = 2, c = 3, h = 6, w = 6, out = 16;
  ref::Geo geo{n, c, h, w, 3, 3, 1, 1, 1};
  Graph g({c, h, w});
  g.relu(g.conv(g.input(), "conv", out, ConvOptions{3, 3, 1, 1, 1, 1, true}), "relu");
  ref::Vec x = ref::random_vec(n * c * h * w, 1), wt = ref::random_vec(out * c * 9, 2), b = ref::random_vec(out, 3);
  ref::Vec dy = ref::random_vec(n * out * h * w, 4);
  ref::Vec z = ref::conv_fwd(geo, out, 1, x, wt, &b), y, dz;
  relu_reference(z, dy, y, dz);
  ref::Vec dx, dw, db;
  ref::conv_bwd(geo, out, 1, x, wt, dz, dx, dw, db);
  Result r = run(g, n, x, {wt, b}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "weight gradient");
  expect_close(r.dparams[1], db, "bias gradient");
  expect_layouts_agree(g, n, x, {wt, b}, dy);
}

TEST(Dense, FusedWithFollowingReluMatchesReference) {
  const int n = 4, in = 10, out = 7;
  Graph g({in});
  g.relu(g.dense(g.input(), "fc", out), "relu");
  ref::Vec x = ref::random_vec(n * in, 1), wt = ref::random_vec(out * in, 2), b = ref::random_vec(out, 3);
  ref::Vec dy = ref::random_vec(n * out, 4);
  ref::Vec z = ref::dense_fwd(n, in, out, x, wt, b), y, dz;
  relu_reference(z, dy, y, dz);
  ref::Vec dx, dw, db;
  ref::dense_bwd(n, in, out, x, wt, dz, dx, dw, db);
  Result r = run(g, n, x, {wt, b}, dy);
  expect_close(r.y, y, "output");
  expect_close(r.dx, dx, "input gradient");
  expect_close(r.dparams[0], dw, "weight gradient");
  expect_close(r.dparams[1], db, "bias gradient");
}

}  // namespace
