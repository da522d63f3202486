// Optimizer updates against values computed by hand (PyTorch's formulation of SGD,
// Adam and AdamW; You et al.'s LARS), and the state round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "kernels/optim_update.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"

namespace cohort {
namespace {

Tensor make(std::vector<float> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> values(const Tensor& t) {
  const float* p = t.data_as<float>();
  return {p, p + t.numel()};
}

// Runs three steps from w = [1, -2] with gradients [.5, .25], [.5, .25], [-1, 2].
std::vector<std::vector<float>> three_steps(OptimizerOptions o, double lr) {
  Optimizer opt(o);
  Tensor w = make({1.0f, -2.0f});
  Tensor g = make({0, 0});
  std::vector<std::vector<float>> grads = {{0.5f, 0.25f}, {0.5f, 0.25f}, {-1.0f, 2.0f}};
  std::vector<std::vector<float>> out;
  for (auto& gv : grads) {
    std::memcpy(g.data(), gv.data(), 2 * sizeof(float));
    ParamGrad p{"w", w, g};
    opt.step({&p, 1}, lr);
    out.push_back(values(w));
  }
  return out;
}

void expect_near(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want,
                 double tol = 2e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t i = 0; i < got[s].size(); ++i)
      EXPECT_NEAR(got[s][i], want[s][i], tol) << "step " << s + 1 << " element " << i;
}

OptimizerOptions opts(OptimizerKind kind, double wd = 0.01) {
  OptimizerOptions o;
  o.kind = kind;
  o.momentum = 0.9;
  o.weight_decay = wd;
  return o;
}

TEST(Optimizer, PlainSgdWithWeightDecay) {
  // w -= lr (g + wd w): 1 - 0.1 (0.5 + 0.01) = 0.949
  expect_near(three_steps(opts(OptimizerKind::kSgd), 0.1),
              {{0.949, -2.023}, {0.898051, -2.045977}, {0.997152949, -2.243931023}});
}

TEST(Optimizer, MomentumMatchesHandComputedSteps) {
  // step 2: v = 0.9·0.51 + (0.5 + 0.00949) = 0.96849; w = 0.949 − 0.096849 = 0.852151
  expect_near(three_steps(opts(OptimizerKind::kMomentum), 0.1),
              {{0.949, -2.023}, {0.852151, -2.066677}, {0.864134749, -2.303919623}});
}

TEST(Optimizer, NesterovMatchesHandComputedSteps) {
  // step 1: v = 0.51; w = 1 − 0.1 (0.51 + 0.9·0.51) = 0.9031
  expect_near(three_steps(opts(OptimizerKind::kNesterov), 0.1),
              {{0.9031, -2.0437}, {0.76507411, -2.10594697}, {0.875209958191, -2.517307273757}});
}

TEST(Optimizer, AdamWithL2) {
  expect_near(three_steps(opts(OptimizerKind::kAdam), 0.01),
              {{0.99, -2.01}, {0.9800000516, -2.0199998855}, {0.9806165559, -2.0275556742}});
}

TEST(Optimizer, AdamWDecaysWeightsDirectly) {
  // step 1: w = 1 − 0.01·0.01·1 − 0.01·1 = 0.9899
  expect_near(three_steps(opts(OptimizerKind::kAdamW), 0.01),
              {{0.9899, -2.0098}, {0.9798010104, -2.0195990192}, {0.9804595236, -2.0270324502}});
}

TEST(Optimizer, LarsUsesLayerTrustRatio) {
  // ‖w‖ = 5, ‖g‖ = 1: trust = 0.001·5 / (1 + 0.01·5) = 0.0047619;
  // v = trust·(g + 0.01 w) = [0.003, 0.004]; w = [2.997, 3.996].
  OptimizerOptions o = opts(OptimizerKind::kLars);
  Optimizer opt(o);
  Tensor w = make({3, 4}, {1, 2});
  Tensor g = make({0.6f, 0.8f}, {1, 2});
  ParamGrad p{"fc.weight", w, g};
  opt.step({&p, 1}, 1.0);
  EXPECT_NEAR(values(w)[0], 2.997, 1e-6);
  EXPECT_NEAR(values(w)[1], 3.996, 1e-6);
  opt.step({&p, 1}, 1.0);
  EXPECT_NEAR(values(w)[0], 2.991303, 1e-6);
  EXPECT_NEAR(values(w)[1], 3.988404, 1e-6);
}

TEST(Optimizer, LarsLeavesBiasesAtGlobalLrWithoutDecay) {
  Optimizer opt(opts(OptimizerKind::kLars));
  Tensor b = make({1});
  Tensor g = make({0.5f});
  ParamGrad p{"fc.bias", b, g};
  opt.step({&p, 1}, 0.1);
  EXPECT_NEAR(values(b)[0], 0.95, 1e-7);
}

TEST(Optimizer, LarsTrustRatioIsOneForZeroNorms) {
  EXPECT_EQ(kernels::lars_trust_ratio(0.0, 1.0, 0.001, 0.0), 1.0);
  EXPECT_EQ(kernels::lars_trust_ratio(2.0, 0.0, 0.001, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(kernels::lars_trust_ratio(2.0, 1.0, 0.001, 0.5), 0.001);
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kLars}) {
    OptimizerOptions o = opts(kind);
    Optimizer a(o);
    Tensor w = make({1, -2, 3, 0.5f}, {2, 2});
    Tensor g = make({0.1f, 0.2f, -0.3f, 0.4f}, {2, 2});
    ParamGrad pa{"conv.weight", w, g};
    a.step({&pa, 1}, 0.05);
    a.step({&pa, 1}, 0.05);

    std::vector<NamedTensor> saved;
    for (const NamedTensor& e : a.export_state()) saved.push_back({e.name, clone_host(e.tensor)});
    Tensor w2 = clone_host(w);
    Optimizer b(o);
    b.import_state(saved);
    EXPECT_EQ(b.steps(), 2);
    ParamGrad pb{"conv.weight", w2, g};
    a.step({&pa, 1}, 0.05);
    b.step({&pb, 1}, 0.05);
    EXPECT_EQ(0, std::memcmp(w.data(), w2.data(), w.nbytes())) << optimizer_kind_name(kind);
  }
}

TEST(Optimizer, ExportListsStateSortedWithStepCount) {
  Optimizer opt(opts(OptimizerKind::kAdam));
  Tensor w = make({1, 2}), g = make({0, 0});
  std::vector<ParamGrad> ps = {{"b", w, g}};
  opt.init_state(ps);
  auto st = opt.export_state();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].name, "b/adam_m");
  EXPECT_EQ(st[1].name, "b/adam_v");
  EXPECT_EQ(st[2].name, "step");
  EXPECT_EQ(*st[2].tensor.data_as<int64_t>(), 0);
}

TEST(Optimizer, ExportedStateIsLiveForInPlaceBroadcast) {
  Optimizer opt(opts(OptimizerKind::kMomentum, 0.0));
  Tensor w = make({0}), g = make({0});
  ParamGrad p{"w", w, g};
  opt.init_state({&p, 1});
  for (NamedTensor& e : opt.export_state())
    if (e.name == "w/velocity") *e.tensor.data_as<float>() = 1.0f;  // as a broadcast would
  opt.step({&p, 1}, 1.0);
  EXPECT_NEAR(values(w)[0], -0.9, 1e-7);  // v = 0.9·1 + 0
}

TEST(Optimizer, ImportRejectsStateOfAnotherOptimizer) {
  Optimizer adam(opts(OptimizerKind::kAdam));
  Tensor w = make({1}), g = make({1});
  ParamGrad p{"w", w, g};
  adam.step({&p, 1}, 0.1);
  Optimizer sgd(opts(OptimizerKind::kMomentum));
  try {
    sgd.import_state(adam.export_state());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w/adam_m' does not belong to a momentum optimizer"), std::string::npos)
        << e.what();
  }
}

TEST(Optimizer, ImportedStateOfWrongShapeIsReportedAtStep) {
  Optimizer a(opts(OptimizerKind::kMomentum));
  Tensor w3 = make({1, 2, 3}), g3 = make({1, 2, 3});
  ParamGrad p3{"w", w3, g3};
  a.step({&p3, 1}, 0.1);
  Optimizer b(opts(OptimizerKind::kMomentum));
  b.import_state(a.export_state());
  Tensor w2 = make({1, 2}), g2 = make({1, 2});
  ParamGrad p2{"w", w2, g2};
  EXPECT_THROW(b.step({&p2, 1}, 0.1), Error);
  EXPECT_EQ(values(w2), (std::vector<float>{1, 2}));  // nothing changed
}

// Steps with the same list reuse its checks and state; a list that differs (another
// shape under a known name, another order, a state imported meanwhile) is looked up
// again, so each parameter still meets its own state and a wrong shape is refused.
TEST(Optimizer, ALaterListThatDiffersIsCheckedAndLookedUpAgain) {
  Optimizer opt(opts(OptimizerKind::kMomentum, 0.0));
  Tensor wa = make({1}), ga = make({1}), wb = make({2}), gb = make({-1});
  std::vector<ParamGrad> ab = {{"a", wa, ga}, {"b", wb, gb}};
  opt.step(ab, 1.0);  // v = g: a 1, b -1
  std::vector<ParamGrad> ba = {ab[1], ab[0]};
  opt.step(ba, 1.0);  // v = 0.9·v + g: a 1.9, b -1.9
  EXPECT_NEAR(values(wa)[0], 1 - 1 - 1.9, 1e-6);
  EXPECT_NEAR(values(wb)[0], 2 + 1 + 1.9, 1e-6);
  for (NamedTensor& e : opt.export_state())  // in place: the same state, as a broadcast writes it
    if (e.name == "a/velocity") *e.tensor.data_as<float>() = 10.0f;
  opt.step(ba, 1.0);  // a: v = 9 + 1
  EXPECT_NEAR(values(wa)[0], 1 - 1 - 1.9 - 10, 1e-5);
  std::vector<NamedTensor> fresh;
  for (const NamedTensor& e : opt.export_state()) {
    Tensor t = clone_host(e.tensor);
    if (e.name == "b/velocity") *t.data_as<float>() = 5.0f;
    fresh.push_back({e.name, t});
  }
  opt.import_state(fresh);
  const float b_before = values(wb)[0];
  opt.step(ba, 1.0);  // b: v = 0.9·5 + g = 3.5, from the imported state
  EXPECT_NEAR(values(wb)[0], b_before - 3.5f, 1e-5);
  Tensor wide = make({1, 2}), wide_g = make({1, 2});
  std::vector<ParamGrad> reshaped = {{"b", wide, wide_g}, ab[0]};
  EXPECT_THROW(opt.step(reshaped, 1.0), Error);  // b's state has one value
  EXPECT_EQ(values(wide), (std::vector<float>{1, 2}));
  std::vector<ParamGrad> twice = {ab[0], ab[0]};
  EXPECT_THROW(opt.step(twice, 1.0), Error);  // a name twice
}

TEST(Optimizer, RejectsBadInputsNamingTheParameter) {
  Optimizer opt(opts(OptimizerKind::kMomentum));
  Tensor w = make({1, 2}), g = make({1, 2, 3});
  ParamGrad p{"layer1.weight", w, g};
  try {
    opt.step({&p, 1}, 0.1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("layer1.weight"), std::string::npos);
  }
  ParamGrad ok{"a", w, make({0, 0})};
  std::vector<ParamGrad> dup = {ok, ok};
  EXPECT_THROW(opt.step(dup, 0.1), Error);
  EXPECT_THROW(opt.step({&ok, 1}, -1.0), Error);
  Tensor i32 = Tensor::empty({2}, DType::kI32);
  ParamGrad bad{"x", i32, i32};
  EXPECT_THROW(opt.step({&bad, 1}, 0.1), Error);
  EXPECT_THROW(parse_optimizer_kind("adagrad"), Error);
}

TEST(Optimizer, OptionsComeFromTheRegistry) {
  Config c;
  c.set("optimizer", "adamw");
  c.set("adam_beta2", "0.98");
  c.set("lars_eta", "0.002");
  OptimizerOptions o = OptimizerOptions::from_config(c);
  EXPECT_EQ(o.kind, OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(o.beta2, 0.98);
  EXPECT_DOUBLE_EQ(o.lars_eta, 0.002);
  EXPECT_DOUBLE_EQ(o.momentum, 0.9);
  EXPECT_DOUBLE_EQ(o.epsilon, 1e-8);
}

// The optimizer follows its parameters' device: on the test device (host memory behind
// the device interface) its state lives there, its updates go through the device path,
// and the values agree with the host's to the bit.
TEST(Optimizer, UpdatesOnADeviceMatchTheHostAndKeepTheirStateThere) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  auto cache = memory.on(test);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov,
                             OptimizerKind::kAdam, OptimizerKind::kAdamW, OptimizerKind::kLars}) {
    Optimizer host_opt(opts(kind)), dev_opt(opts(kind));
    Tensor w = make({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2});
    Tensor g = make({0.5f, 0.25f, -1.0f, 2.0f}, {2, 2});
    Tensor dw = clone_to(w, *cache), dg = clone_to(g, *cache);
    OwnedStream stream(test);
    for (int step = 0; step < 3; ++step) {
      ParamGrad hp{"w", w, g}, dp{"w", dw, dg};
      host_opt.step({&hp, 1}, 0.1);
      dev_opt.step({&dp, 1}, 0.1, stream);
    }
    EXPECT_EQ(values(to_host(dw, stream)), values(w)) << optimizer_kind_name(kind);
    for (const NamedTensor& e : dev_opt.export_state()) {
      if (e.name != "step") {
        EXPECT_EQ(e.tensor.device(), test) << e.name;
      }
    }
  }
}

// step_captured reads the step's values from memory: the same updates as step(), to the
// bit, over steps with changing learning rates (Adam's bias corrections follow the step
// count), on the host and on the test device (its device path: the read back).
TEST(Optimizer, ACapturedStepIsTheStepWithItsValuesInMemory) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  auto cache = memory.on(test);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov,
                             OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    Optimizer plain(opts(kind)), host(opts(kind)), dev(opts(kind));
    Tensor w = make({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2}), hw = make({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2});
    Tensor g = make({0.5f, 0.25f, -1.0f, 2.0f}, {2, 2});
    Tensor dw = clone_to(w, *cache), dg = clone_to(g, *cache);
    OwnedStream stream(test);
    for (double lr : {0.1, 0.05, 0.2}) {
      ParamGrad p{"w", w, g}, hp{"w", hw, g}, dp{"w", dw, dg};
      plain.step({&p, 1}, lr);
      EXPECT_TRUE(host.step_captured({&hp, 1}, lr, Stream()));
      EXPECT_TRUE(dev.step_captured({&dp, 1}, lr, stream));
    }
    EXPECT_EQ(values(hw), values(w));
    EXPECT_EQ(values(to_host(dw, stream)), values(w));
    EXPECT_EQ(host.steps(), 3);
    EXPECT_EQ(dev.steps(), 3);
    EXPECT_FALSE(dev.replays_update()) << "the test device keeps no graphs: each step is enqueued";
    const std::vector<NamedTensor> want = plain.export_state(), got = dev.export_state();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 1; i < want.size(); ++i) EXPECT_EQ(values(to_host(got[i].tensor)), values(want[i].tensor));
  }
}

// With unscale, the gradients are divided by the loss scale before the update (here by
// 8: the same values as unscaled gradients), and a non-finite one makes the update
// change nothing and count nothing; the next step goes on as if it had not happened.
TEST(Optimizer, ACapturedStepUnscalesAndSkipsAnOverflowWithoutAHostReadBetween) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  auto cache = memory.on(test);
  OwnedStream test_stream(test);
  for (bool on_device : {false, true})
    for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
      SCOPED_TRACE(std::string(optimizer_kind_name(kind)) + (on_device ? " on the test device" : " on the host"));
      const Stream stream = on_device ? test_stream.get() : Stream();
      auto place = [&](std::vector<float> v) { return on_device ? clone_to(make(v), *cache) : make(v); };
      auto set = [&](Tensor& t, std::vector<float> v) { copy(t, make(v), stream); };
      auto read = [&](const Tensor& t) { return values(to_host(t, stream)); };
      Optimizer plain(opts(kind)), scaled(opts(kind));
      Tensor w = make({1.0f, -2.0f}), g = make({0.5f, 0.25f});
      Tensor sw = place({1.0f, -2.0f}), sg = place({4.0f, 2.0f});
      ParamGrad p{"w", w, g}, sp{"w", sw, sg};
      plain.step({&p, 1}, 0.1);
      EXPECT_TRUE(scaled.step_captured({&sp, 1}, 0.1, stream, true, 0.125));
      EXPECT_EQ(read(sg), values(g)) << "unscaled in place";
      EXPECT_EQ(read(sw), values(w));
      set(sg, {std::numeric_limits<float>::infinity(), 8.0f});
      EXPECT_FALSE(scaled.step_captured({&sp, 1}, 0.1, stream, true, 0.125));
      EXPECT_EQ(read(sw), values(w)) << "an overflow changes nothing";
      EXPECT_EQ(scaled.steps(), 1);
      set(sg, {-8.0f, 16.0f});
      std::memcpy(g.data(), std::vector<float>{-1.0f, 2.0f}.data(), 2 * sizeof(float));
      plain.step({&p, 1}, 0.2);
      EXPECT_TRUE(scaled.step_captured({&sp, 1}, 0.2, stream, true, 0.125));
      EXPECT_EQ(read(sw), values(w)) << "Adam's second step: its bias corrections from the step count";
      EXPECT_EQ(scaled.steps(), 2);
    }
  Optimizer lars(opts(OptimizerKind::kLars));
  Tensor w = make({1.0f}), g = make({1.0f});
  ParamGrad p{"w", w, g};
  try {
    lars.step_captured({&p, 1}, 0.1, Stream());
    FAIL() << "LARS's update was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LARS reads its norms on the host"), std::string::npos) << e.what();
  }
}

// A state that moves to its parameter's device (init_state with the same names on
// another device) releases its old buffer: a later step with the first list looks its
// state up again, and continues as an optimizer that never moved.
TEST(Optimizer, AStateMovedToAnotherDeviceIsLookedUpAgain) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  Optimizer moved(opts(OptimizerKind::kMomentum, 0.0)), stayed(opts(OptimizerKind::kMomentum, 0.0));
  Tensor w = make({1.0f, 2.0f}), g = make({0.5f, -1.0f}), w_ref = make({1.0f, 2.0f});
  ParamGrad p{"w", w, g}, ref{"w", w_ref, g};
  moved.step({&p, 1}, 0.1);
  stayed.step({&ref, 1}, 0.1);
  Tensor dw = clone_to(w, *memory.on(test)), dg = clone_to(g, *memory.on(test));
  OwnedStream stream(test);
  ParamGrad on_device{"w", dw, dg};
  moved.init_state({&on_device, 1}, stream);  // the velocity moves to the test device
  synchronize(stream);
  moved.step({&p, 1}, 0.1);  // and back
  stayed.step({&ref, 1}, 0.1);
  EXPECT_EQ(values(w), values(w_ref));
}

TEST(Optimizer, RefusesParametersAndStreamsOnDifferentDevices) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  Tensor w = make({1.0f}), g = make({1.0f});
  Tensor dg = clone_to(g, *memory.on(test));
  Optimizer opt(opts(OptimizerKind::kMomentum));
  ParamGrad mixed{"w", w, dg};
  try {
    opt.step({&mixed, 1}, 0.1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("both must be on one device"), std::string::npos) << e.what();
  }
  ParamGrad host{"w", w, g};
  OwnedStream stream(test);
  EXPECT_THROW(opt.step({&host, 1}, 0.1, stream), Error);
}

TEST(LossScaler, CountsNonFiniteGradientsOnADevice) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  auto cache = memory.on(test);
  OwnedStream stream(test);
  LossScaler scaler;
  Tensor w = make({0, 0});
  Tensor good = clone_to(make({65536.0f, -131072.0f}), *cache);
  ParamGrad p{"w", clone_to(w, *cache), good};
  EXPECT_TRUE(scaler.unscale({&p, 1}, stream));
  EXPECT_EQ(values(to_host(good)), (std::vector<float>{1.0f, -2.0f}));
  Tensor bad = clone_to(make({1.0f, INFINITY}), *cache);
  ParamGrad q{"w", p.param, bad};
  EXPECT_FALSE(scaler.unscale({&q, 1}, stream));
}

}  // namespace
}  // namespace cohort
