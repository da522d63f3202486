// Mixed precision on the CPU backend: every kind of layer at bf16 against the same
// layer at f32 (validated against the f64 reference in layers_test) within bf16
// tolerances; f32 master weights and their exact update; the dropout mask of the CPU
// loops against the counter-based draws; the loss-scale hook; the missing-ISA error;
// the per-layer profile.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "backend/cpu/dropout_mask.h"
#include "backend/cpu/plan.h"
#include "backend/precision.h"
#include "core/status.h"
#include "harness.h"
#include "kernels/cast.h"
#include "kernels/dropout.h"
#include "optim/optimizer.h"
#include "support/host_views.h"

namespace {

using namespace testing_compute;
using cohort::ActKind;
using cohort::ConvOptions;
using cohort::PoolOptions;
using cohort::backend::CpuIsa;
using cohort::backend::PointwiseBackward;
using cohort::backend::Precision;

bool cpu_has_bf16() { return cohort::backend::probe_cpu_isa().bf16; }

#define SKIP_WITHOUT_BF16()                                                                                     \
  do {                                                                                                          \
    if (!cpu_has_bf16())                                                                                        \
      GTEST_SKIP() << "this CPU has no bf16 instructions (oneDNN ISA " << cohort::backend::probe_cpu_isa().name \
                   << ")";                                                                                      \
  } while (0)

struct NetCase {
  const char* name;
  cohort::Shape input;
  std::function<void(Graph&)> build;
};

// Runs the net at `p` with fixed inputs, parameters and output gradient.
Result run_at(const NetCase& c, Precision p, int64_t n, PointwiseBackward mode = PointwiseBackward::kAuto) {
  Graph g(c.input);
  c.build(g);
  g.materialize(1);
  g.set_precision(p);
  g.set_pointwise_backward(mode);
  std::vector<ref::Vec> params;
  for (size_t i = 0; i < g.params().size(); ++i) {
    const auto& prm = g.params()[i];
    const bool scale = prm.name.find(".weight") != std::string::npos && prm.shape.size() == 1;  // batch-norm scale
    params.push_back(ref::random_vec(static_cast<size_t>(prm.value.numel()), 10 + static_cast<uint32_t>(i),
                                     scale ? 0.5 : -0.5, scale ? 1.5 : 0.5));
  }
  int64_t in = n, out = n;
  for (int64_t d : c.input) in *= d;
  for (int64_t d : g.shape(g.num_layers() - 1)) out *= d;
  // Inputs that bf16 holds exactly, so both runs see the same values (max pooling picks
  // the same element in each window).
  ref::Vec x = ref::random_vec(static_cast<size_t>(in), 1);
  for (double& v : x) v = cohort::kernels::round_to_bf16(static_cast<float>(v));
  return run(g, n, x, params, ref::random_vec(static_cast<size_t>(out), 2));
}

class Bf16Layer : public ::testing::TestWithParam<NetCase> {};

// bf16 keeps 8 significant bits: a value is off by up to 2^-9 relative, and sums of a
// few hundred products stay within a few percent of the f32 result.
TEST_P(Bf16Layer, MatchesF32WithinBf16Tolerance) {
  SKIP_WITHOUT_BF16();
  const NetCase& c = GetParam();
  const Result f = run_at(c, Precision::kF32, 4);
  const Result b = run_at(c, Precision::kBF16, 4);
  const double tol = 3e-2;
  EXPECT_LT(ref::rel_err(b.y, f.y), tol) << "output";
  EXPECT_LT(ref::rel_err(b.dx, f.dx), tol) << "input gradient";
  for (size_t i = 0; i < f.dparams.size(); ++i) EXPECT_LT(ref::rel_err(b.dparams[i], f.dparams[i]), tol) << i;
  // The bf16 path really ran: its output is not the f32 one.
  if (std::string(c.name) != "max_pool") {
    EXPECT_GT(ref::rel_err(b.y, f.y), 1e-6) << "output is bitwise f32";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layers, Bf16Layer,
    ::testing::Values(
        NetCase{"conv",
                {8, 9, 9},
                [](Graph& g) {
                  g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 1, 1, 1, true});
                }},
        NetCase{"conv_stride2_nobias",
                {16, 10, 10},
                [](Graph& g) {
                  g.conv(g.input(), "conv", 32, ConvOptions{3, 3, 2, 1, 1, 1, false});
                }},
        NetCase{"dense", {64}, [](Graph& g) { g.dense(g.input(), "fc", 32); }},
        NetCase{"conv_flatten_dense",
                {4, 6, 6},
                [](Graph& g) {
                  int h = g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 0, 1, 1, true});
                  g.dense(g.flatten(h, "flat"), "fc", 10);
                }},
        NetCase{"batch_norm_relu", {16, 5, 5}, [](Graph& g) { g.relu(g.batch_norm(g.input(), "bn"), "relu"); }},
        NetCase{"max_pool",
                {16, 8, 8},
                [](Graph& g) {
                  g.max_pool(g.input(), "pool", PoolOptions{2, 2, 0, false});
                }},
        NetCase{"avg_pool",
                {16, 8, 8},
                [](Graph& g) {
                  g.avg_pool(g.input(), "pool", PoolOptions{3, 2, 1, false});
                }},
        NetCase{"global_avg_pool", {16, 4, 4}, [](Graph& g) { g.global_avg_pool(g.input(), "gap"); }},
        NetCase{
            "conv_tanh",
            {4, 6, 6},
            [](Graph& g) {
              g.activation(g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 1, 1, 1, true}), "act", ActKind::kTanh);
            }},
        NetCase{"add_concat",
                {16, 6, 6},
                [](Graph& g) {
                  int a = g.conv(g.input(), "a", 16, ConvOptions{3, 3, 1, 1, 1, 1, false});
                  int b = g.conv(g.input(), "b", 16, ConvOptions{1, 1, 1, 0, 1, 1, false});
                  int s = g.add({a, b}, "add");
                  g.concat({s, a}, "cat");
                }},
        NetCase{"shortcut_a",
                {16, 8, 8},
                [](Graph& g) {
                  int c = g.conv(g.input(), "conv", 16, ConvOptions{3, 3, 1, 1, 1, 1, false});
                  g.shortcut_a(c, "sc", 32, 2);
                }},
        NetCase{"lrn", {16, 5, 5}, [](Graph& g) { g.lrn(g.input(), "lrn", 5, 1e-4f, 0.75f, 1.f); }}),
    [](const ::testing::TestParamInfo<NetCase>& i) { return std::string(i.param.name); });

// 1x1 convolutions, one strided, whose input gradient a 3x3 one before them takes.
const NetCase kPointwise{"pointwise", {8, 10, 10}, [](Graph& g) {
                           int a = g.conv(g.input(), "a", 16, ConvOptions{3, 3, 1, 1, 1, 1, false});
                           int b = g.conv(g.relu(a, "relu"), "b", 32, ConvOptions{1, 1, 1, 0, 1, 1, false});
                           g.conv(b, "c", 16, ConvOptions{1, 1, 2, 0, 1, 1, false});
                         }};

// bf16 1x1 convolutions whose backward is matrix products (forced, or chosen on a CPU
// with AMX) against f32 ones whose backward is oneDNN's convolutions.
TEST(Bf16Pointwise, MatrixProductsMatchF32ConvolutionsWithinBf16Tolerance) {
  SKIP_WITHOUT_BF16();
  const Result f = run_at(kPointwise, Precision::kF32, 4, PointwiseBackward::kConvolution);
  for (PointwiseBackward mode : {PointwiseBackward::kMatmul, PointwiseBackward::kAuto}) {
    const Result b = run_at(kPointwise, Precision::kBF16, 4, mode);
    EXPECT_LT(ref::rel_err(b.y, f.y), 3e-2) << "output";
    EXPECT_LT(ref::rel_err(b.dx, f.dx), 3e-2) << "input gradient";
    for (size_t i = 0; i < f.dparams.size(); ++i) EXPECT_LT(ref::rel_err(b.dparams[i], f.dparams[i]), 3e-2) << i;
  }
}

// auto takes matrix products for bf16 on a CPU with AMX only, and never for f32 (in a
// build on oneDNN 2.6, whose AMX convolutions choose NHWC values for both 1x1 ones).
TEST(Bf16Pointwise, AutoTakesMatrixProductsForBf16WithAmx) {
  SKIP_WITHOUT_BF16();
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    Graph g(kPointwise.input);
    kPointwise.build(g);
    g.materialize(1);
    g.set_precision(p);
    auto& plan = dynamic_cast<cohort::backend::cpu::CpuPlan&>(g.plan(2, cohort::Layout::kNCHW, true, true));
    const bool amx = cohort::backend::probe_cpu_isa().amx;
    const bool taken = p == Precision::kBF16 && amx && !cohort::backend::dnnlc::kV3;
    EXPECT_EQ(plan.matmul_backwards_, taken ? 2 : 0) << cohort::backend::probe_cpu_isa().name;
  }
}

TEST(Bf16Dropout, DropsWhatF32DropsAndScalesTheRest) {
  SKIP_WITHOUT_BF16();
  NetCase c{"dropout", {256}, [](Graph& g) { g.dropout(g.input(), "drop", 0.3f); }};
  const Result f = run_at(c, Precision::kF32, 4);
  const Result b = run_at(c, Precision::kBF16, 4);
  for (size_t i = 0; i < f.y.size(); ++i) {
    EXPECT_EQ(f.y[i] == 0, b.y[i] == 0) << i;
    EXPECT_NEAR(b.y[i], f.y[i], 1e-2 * std::abs(f.y[i])) << i;
    EXPECT_EQ(f.dx[i] == 0, b.dx[i] == 0) << i;
  }
}

// The loss and its gradient stay f32; a small net trains at bf16.
TEST(Bf16Training, LossFallsOnASeparableProblem) {
  SKIP_WITHOUT_BF16();
  Graph g({8});
  g.softmax_xent(g.dense(g.relu(g.dense(g.input(), "fc1", 32), "relu"), "fc2", 2), "loss");
  g.materialize(3);
  g.set_precision(Precision::kBF16);
  std::vector<float> x(64 * 8);
  std::vector<int32_t> y(64);
  for (int i = 0; i < 64; ++i) {
    y[static_cast<size_t>(i)] = i % 2;
    for (int j = 0; j < 8; ++j) x[static_cast<size_t>(i * 8 + j)] = std::sin(i * 1.3f + j) + (i % 2 ? 1.f : -1.f);
  }
  cohort::Optimizer opt({cohort::OptimizerKind::kSgd, 0, 0});
  std::vector<cohort::ParamGrad> pg;
  for (auto& p : g.params()) pg.push_back({p.name, p.value, p.grad});
  float first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    last = g.forward_train(cohort::test::batch_view(x, g, 64, Layout::kNCHW), Layout::kNCHW,
                           cohort::test::labels_view(y, 64));
    if (s == 0) first = last;
    g.backward();
    opt.step(pg, 0.1);
  }
  EXPECT_LT(last, 0.5f * first);
}

// Master weights: the update is computed and stored in f32 from the f32 gradient, so
// steps far below bf16's resolution accumulate instead of rounding away.
TEST(MasterWeights, UpdateIsExactInF32) {
  SKIP_WITHOUT_BF16();
  Graph g({16});
  g.softmax_xent(g.dense(g.input(), "fc", 4), "loss");
  g.materialize(5);
  g.set_precision(Precision::kBF16);
  ASSERT_EQ(g.params()[0].value.dtype(), cohort::DType::kF32);
  ASSERT_EQ(g.params()[0].grad.dtype(), cohort::DType::kF32);
  std::vector<float> x(8 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3f * static_cast<float>(i));
  std::vector<int32_t> y{0, 1, 2, 3, 0, 1, 2, 3};
  g.forward_train(cohort::test::batch_view(x, g, 8, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 8));
  g.backward();
  std::vector<cohort::ParamGrad> pg;
  std::vector<std::vector<float>> before, grads;
  for (auto& p : g.params()) {
    pg.push_back({p.name, p.value, p.grad});
    before.emplace_back(p.value.data_as<float>(), p.value.data_as<float>() + p.value.numel());
    grads.emplace_back(p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
  }
  const float lr = 1e-3f;
  cohort::Optimizer opt({cohort::OptimizerKind::kSgd, 0, 0});
  opt.step(pg, lr);
  int below_bf16 = 0;
  for (size_t k = 0; k < pg.size(); ++k) {
    const float* w = pg[k].param.data_as<float>();
    for (size_t i = 0; i < before[k].size(); ++i) {
      const float want = before[k][i] - lr * grads[k][i];
      ASSERT_EQ(w[i], want) << pg[k].name << "[" << i << "]";
      if (grads[k][i] != 0 && cohort::kernels::round_to_bf16(w[i]) != w[i]) ++below_bf16;
    }
  }
  EXPECT_GT(below_bf16, 0) << "every updated weight is a bf16 value: the master copy is not f32";
}

TEST(LossScale, MultipliesEveryGradient) {
  Graph g({6});
  g.softmax_xent(g.dense(g.input(), "fc", 3), "loss");
  g.materialize(2);
  std::vector<float> x(4 * 6, 0.5f);
  x[3] = -1.f;
  std::vector<int32_t> y{0, 1, 2, 0};
  g.forward_train(cohort::test::batch_view(x, g, 4, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 4));
  g.backward();
  std::vector<float> plain(g.params()[0].grad.data_as<float>(), g.params()[0].grad.data_as<float>() + 18);
  g.set_loss_scale(8.f);
  g.forward_train(cohort::test::batch_view(x, g, 4, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 4));
  g.backward();
  const float* scaled = g.params()[0].grad.data_as<float>();
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], 8.f * plain[i]) << i;
}

TEST(DropoutMask, IsTheCounterBasedDrawOfEveryElement) {
  for (float p : {0.f, 0.1f, 0.25f, 0.5f, 0.9f})
    for (uint64_t offset : {0ull, 1ull, 3ull, 63ull, 64ull, 1000ull, (1ull << 34) - 20})
      for (int64_t n : {0, 1, 5, 64, 200, 1031}) {
        std::vector<uint8_t> keep(static_cast<size_t>(n), 7);
        cohort::backend::dropout_mask(keep.data(), n, offset, 12, 99, p);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(keep[static_cast<size_t>(i)],
                    cohort::kernels::dropout_factor(offset + static_cast<uint64_t>(i), 12, 99, p) != 0.f ? 1 : 0)
              << "p " << p << " offset " << offset << " i " << i;
      }
}

TEST(DropoutMask, AppliesKeepAndScaleInF32AndBf16) {
  const float x[4] = {1.f, -2.f, 3.f, 4.f};
  const uint8_t keep[4] = {1, 0, 1, 0};
  float y[4];
  cohort::backend::dropout_apply_mask(x, y, keep, 4, 2.f);
  EXPECT_EQ(y[0], 2.f);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_EQ(y[2], 6.f);
  uint16_t xb[4], yb[4];
  for (int i = 0; i < 4; ++i) xb[i] = cohort::kernels::float_to_bf16(x[i]);
  cohort::backend::dropout_apply_mask(xb, yb, keep, 4, 2.f);
  EXPECT_EQ(cohort::kernels::bf16_to_float(yb[2]), 6.f);
  EXPECT_EQ(yb[3], 0);
}

TEST(Precision, MissingBf16InstructionsAreNamedWithWhatWorks) {
  const CpuIsa without{"avx512_core", false, false};
  try {
    cohort::backend::check_cpu_precision(Precision::kBF16, without);
    FAIL() << "bf16 accepted on a CPU without bf16 instructions";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kUnsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("AVX512-BF16"), std::string::npos) << m;
    EXPECT_NE(m.find("avx512_core"), std::string::npos) << m;
    EXPECT_NE(m.find("--precision=f32"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(cohort::backend::check_cpu_precision(Precision::kBF16, {"avx512_core_bf16", true, false}));
  EXPECT_NO_THROW(cohort::backend::check_cpu_precision(Precision::kF32, without));
  EXPECT_THROW(cohort::backend::check_cpu_precision(Precision::kF16, {"avx512_core_amx", true, true}), cohort::Error);
}

TEST(Precision, OnlyTheInputAndTheLossStayF32) {
  for (int k = 0; k <= static_cast<int>(cohort::backend::LayerKind::kSoftmaxXent); ++k) {
    cohort::backend::LayerSpec l;
    l.kind = static_cast<cohort::backend::LayerKind>(k);
    const bool f32 = l.kind == cohort::backend::LayerKind::kInput || l.kind == cohort::backend::LayerKind::kSoftmaxXent;
    EXPECT_EQ(cohort::backend::compute_dtype(l, Precision::kBF16), f32 ? cohort::DType::kF32 : cohort::DType::kBF16)
        << cohort::backend::layer_kind_name(l.kind);
    EXPECT_EQ(cohort::backend::compute_dtype(l, Precision::kF32), cohort::DType::kF32);
  }
  EXPECT_TRUE(cohort::backend::needs_loss_scaling(Precision::kF16));
  EXPECT_FALSE(cohort::backend::needs_loss_scaling(Precision::kBF16));
  EXPECT_EQ(cohort::backend::parse_precision("bfloat16"), Precision::kBF16);
  EXPECT_THROW(cohort::backend::parse_precision("f8"), cohort::Error);
}

// Run by ctest a second time with ONEDNN_MAX_CPU_ISA=AVX512_CORE: oneDNN then reports
// no bf16 instructions, as on a CPU without them, and compiling a bf16 plan fails.
TEST(ForcedNoBf16, CompilingABf16PlanNamesTheMissingInstructions) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap || std::string(cap) != "AVX512_CORE") GTEST_SKIP() << "needs ONEDNN_MAX_CPU_ISA=AVX512_CORE";
  EXPECT_FALSE(cpu_has_bf16());
  Graph g({4});
  g.softmax_xent(g.dense(g.input(), "fc", 2), "loss");
  g.materialize(1);
  g.set_precision(Precision::kBF16);
  std::vector<float> x(8, 1.f);
  std::vector<int32_t> y{0, 1};
  try {
    g.forward_train(cohort::test::batch_view(x, g, 2, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 2));
    FAIL() << "a bf16 plan compiled without bf16 instructions";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("AVX512-BF16"), std::string::npos) << e.what();
  }
}

TEST(Profile, ListsEveryLayerAndPrintsItsTotalBesideTheStepTime) {
  Graph g({1, 12, 12});
  int h = g.relu(g.conv(g.input(), "conv1", 8, ConvOptions{3, 3, 1, 0, 1, 1, true}), "relu1");
  h = g.dropout(g.max_pool(h, "pool", PoolOptions{2, 2, 0, false}), "drop", 0.25f);
  g.softmax_xent(g.dense(g.flatten(h, "flatten"), "fc", 10), "loss");
  g.materialize(1);
  std::vector<float> x(16 * 144, 0.25f);
  std::vector<int32_t> y(16, 3);
  g.forward_train(cohort::test::batch_view(x, g, 16, Layout::kNCHW), Layout::kNCHW,
                  cohort::test::labels_view(y, 16));  // compiles, not profiled
  g.backward();
  g.set_profiling(true);
  for (int s = 0; s < 3; ++s) {
    g.forward_train(cohort::test::batch_view(x, g, 16, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 16));
    g.backward();
    g.record_step(0.5, 0.125);
  }
  const cohort::Profile p = g.profile();
  EXPECT_EQ(p.steps, 3);
  EXPECT_EQ(p.plan.forwards, 3);
  EXPECT_EQ(p.plan.backwards, 3);
  EXPECT_GT(p.plan.layers[1].forward, 0);  // conv1
  EXPECT_GT(p.plan.layers[1].backward, 0);
  const std::string text = cohort::format_profile(p);
  for (int i = 0; i < g.num_layers(); ++i)
    EXPECT_NE(text.find(g.spec().layers[static_cast<size_t>(i)].name), std::string::npos)
        << g.spec().layers[static_cast<size_t>(i)].name << "\n"
        << text;
  EXPECT_NE(text.find("optimizer"), std::string::npos) << text;
  EXPECT_NE(text.find("125.000"), std::string::npos) << text;  // the optimizer, ms per step
  EXPECT_NE(text.find("profiled total"), std::string::npos) << text;
  EXPECT_NE(text.find("measured step time"), std::string::npos) << text;
  EXPECT_NE(text.find("500.000"), std::string::npos) << text;                      // beside it, the step time
  EXPECT_EQ(text.find("outside the layers' kernels"), std::string::npos) << text;  // host-timed
  cohort::Profile device = p;  // a device plan's profile adds the step outside its kernels
  device.plan.device_timed = true;
  device.plan.layers.assign(device.plan.layers.size(), {});
  device.plan.layers[1] = {0.3, 0.6, 0.0};  // 300 ms of kernels per step over 3 steps
  const std::string dtext = cohort::format_profile(device);
  EXPECT_NE(dtext.find("outside the layers' kernels"), std::string::npos) << dtext;
  EXPECT_NE(dtext.find("200.000   (40% of the step)"), std::string::npos) << dtext;
  g.set_profiling(false);
  g.forward_train(cohort::test::batch_view(x, g, 16, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 16));
  EXPECT_EQ(g.profile().steps, 0);
}

TEST(Precision, Bf16OnASapphireRapidsWithoutAmxIsWarnedSlowerThanF32) {
  // AVX512-FP16 without usable AMX: Intel Sapphire Rapids or newer whose tiles are hidden.
  const std::string warning =
      cohort::backend::cpu_precision_warning(Precision::kBF16, {"avx512_core_bf16", true, false, true});
  EXPECT_NE(warning.find("slower than f32"), std::string::npos) << warning;
  EXPECT_NE(warning.find("AMX"), std::string::npos) << warning;
  EXPECT_NE(warning.find("avx512_core_bf16"), std::string::npos) << warning;
  EXPECT_NE(warning.find("--precision=f32"), std::string::npos) << warning;
  // No warning where bf16 is the faster choice (AMX; Zen 4 and Cooper Lake, without
  // AVX512-FP16), nor at f32.
  EXPECT_EQ(cohort::backend::cpu_precision_warning(Precision::kBF16, {"avx512_core_amx", true, true, true}), "");
  EXPECT_EQ(cohort::backend::cpu_precision_warning(Precision::kBF16, {"avx512_core_bf16", true, false, false}), "");
  EXPECT_EQ(cohort::backend::cpu_precision_warning(Precision::kF32, {"avx512_core_bf16", true, false, true}), "");
}

}  // namespace
