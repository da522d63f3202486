// Dynamic loss scaling: unscaling, overflow detection, back-off and growth, state round
// trip, and every rank skipping the step when one rank's gradients overflowed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "core/status.h"
#include "optim/loss_scaler.h"
#include "thread_collectives.h"

namespace cohort {
namespace {

Tensor make(std::vector<float> v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

TEST(LossScaler, UnscaleDividesAndDetectsOverflow) {
  LossScaler s({.initial_scale = 1024.0});
  Tensor g = make({1024.0f, -512.0f});
  Tensor w = make({0, 0});
  ParamGrad p{"w", w, g};
  EXPECT_TRUE(s.unscale({&p, 1}));
  EXPECT_EQ(g.data_as<float>()[0], 1.0f);
  EXPECT_EQ(g.data_as<float>()[1], -0.5f);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Tensor gb = make({1.0f, bad});
    ParamGrad pb{"b", w, gb};
    EXPECT_FALSE(s.unscale({&pb, 1})) << bad;
  }
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterInterval) {
  LossScaler s({.initial_scale = 1024.0, .growth_interval = 3});
  s.update(false);
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.good_steps(), 0);
  s.update(true);
  s.update(false);  // an overflow resets the run of good steps
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512.0);
  LossScaler fixed({.initial_scale = 8.0, .dynamic = false});
  fixed.update(false);
  EXPECT_EQ(fixed.scale(), 8.0);
  EXPECT_THROW(LossScaler({.initial_scale = 0}), Error);
}

TEST(LossScaler, StateRoundTrip) {
  LossScaler a({.initial_scale = 64.0, .growth_interval = 10});
  a.update(false);
  a.update(true);
  LossScaler b;
  b.import_state(a.export_state());
  EXPECT_EQ(b.scale(), 32.0);
  EXPECT_EQ(b.good_steps(), 1);
  Tensor junk = Tensor::empty({1}, DType::kF32);
  std::vector<NamedTensor> bad = {{"loss_scale/x", junk}};
  EXPECT_THROW(b.import_state(bad), Error);
}

// An overflow on one rank skips the step on every rank: with the unscale on the host
// before the update, and with both captured as one device graph (cuda_graphs=on:
// the overflow count is read after the update, which skipped itself).
void expect_overflow_skips_everywhere(bool captured) {
  testing::run_ranks(2, [&](int rank, testing::ThreadCollectives& c) {
    Tensor w = make({1.0f, 2.0f});
    Tensor g = make({0.0f, 0.0f});
    OptimizerOptions o;
    o.kind = OptimizerKind::kSgd;
    o.weight_decay = 0;
    Optimizer opt(o);
    LossScaler scaler({.initial_scale = 4.0});
    DistributedOptions d;
    d.capture_update = captured;
    DistributedOptimizer dist(opt, c, {{"w", w, g}}, d);
    dist.set_loss_scaler(&scaler);
    g.data_as<float>()[0] = rank == 1 ? std::numeric_limits<float>::infinity() : 4.0f;
    g.data_as<float>()[1] = 4.0f;
    EXPECT_TRUE(dist.step(1.0));
    EXPECT_TRUE(dist.last_step_skipped());
    EXPECT_EQ(w.data_as<float>()[1], 2.0f);  // untouched
    EXPECT_EQ(scaler.scale(), 2.0);
    EXPECT_EQ(opt.steps(), 0);
    g.data_as<float>()[0] = 2.0f;  // scaled by 2 now: true gradient 1
    g.data_as<float>()[1] = 2.0f;
    EXPECT_TRUE(dist.step(1.0));
    EXPECT_FALSE(dist.last_step_skipped());
    EXPECT_EQ(w.data_as<float>()[0], 0.0f);
    EXPECT_EQ(w.data_as<float>()[1], 1.0f);
  });
}

TEST(LossScaler, OverflowOnOneRankSkipsTheStepEverywhere) { expect_overflow_skips_everywhere(false); }
TEST(LossScaler, OverflowOnOneRankSkipsTheCapturedUpdateEverywhere) { expect_overflow_skips_everywhere(true); }

}  // namespace
}  // namespace cohort
