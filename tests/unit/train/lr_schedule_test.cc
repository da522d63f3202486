// Learning-rate schedules against exact values: linear scaling, Goyal/Horovod warm-up,
// step, polynomial and cosine decay, and the errors for missing run geometry.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "optim/lr_schedule.h"

namespace cohort {
namespace {

LrScheduleOptions base(LrScheduleKind kind, double lr) {
  LrScheduleOptions o;
  o.kind = kind;
  o.base_lr = lr;
  return o;
}

TEST(LrSchedule, ConstantIsTheBaseLr) {
  LrSchedule s(base(LrScheduleKind::kConstant, 0.1));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(123456), 0.1);
  EXPECT_DOUBLE_EQ(s.scale_factor(), 1.0);
}

TEST(LrSchedule, LinearScalingRule) {
  LrScheduleOptions o = base(LrScheduleKind::kConstant, 0.1);
  o.linear_scaling = true;
  o.global_batch = 8192;
  o.base_batch_size = 256;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.scale_factor(), 32.0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 3.2);  // Goyal et al.: 0.1 × 8192/256
}

TEST(LrSchedule, WarmupMatchesHorovodCallback) {
  // 4 ranks × 64 = 256 images, base batch 64: k = 4; 100 steps per epoch; 5 epochs.
  LrScheduleOptions o = base(LrScheduleKind::kConstant, 0.1);
  o.linear_scaling = true;
  o.global_batch = 256;
  o.base_batch_size = 64;
  o.warmup_epochs = 5;
  o.steps_per_epoch = 100;
  LrSchedule s(o);
  const int size = 4;
  for (int step : {0, 1, 50, 250, 499}) {
    double epoch = step / 100.0;
    double horovod = 0.4 * (1.0 / size) * (epoch * (size - 1) / 5.0 + 1.0);
    EXPECT_NEAR(s.lr_at(step), horovod, 1e-15) << "step " << step;
  }
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);  // lr/k of the scaled lr
  EXPECT_DOUBLE_EQ(s.lr_at(250), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.4);  // the scaled lr from the end of warm-up
  EXPECT_DOUBLE_EQ(s.lr_at(10000), 0.4);
}

TEST(LrSchedule, WarmupWithoutScalingStartsFromZero) {
  LrScheduleOptions o = base(LrScheduleKind::kConstant, 1.0);
  o.warmup_steps = 10;
  o.warmup_epochs = 3;  // warmup_steps wins
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
}

TEST(LrSchedule, LinearScalingAtOrBelowTheBaseBatchWarmsUpFromZero) {
  // k = 1 (one rank at the base batch) and k < 1: no smaller lr to start from.
  LrScheduleOptions o = base(LrScheduleKind::kConstant, 0.1);
  o.linear_scaling = true;
  o.global_batch = 64;
  o.base_batch_size = 64;
  o.warmup_steps = 10;
  LrSchedule one(o);
  EXPECT_DOUBLE_EQ(one.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(one.lr_at(5), 0.05);
  EXPECT_DOUBLE_EQ(one.lr_at(10), 0.1);
  o.global_batch = 32;
  LrSchedule half(o);
  EXPECT_DOUBLE_EQ(half.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(half.lr_at(5), 0.025);
  EXPECT_DOUBLE_EQ(half.lr_at(10), 0.05);
}

TEST(LrSchedule, StepDecayAtEpochBoundaries) {
  LrScheduleOptions o = base(LrScheduleKind::kStep, 0.1);
  o.steps_per_epoch = 10;
  LrSchedule s(o);  // default boundaries 30, 60, 80, factor 0.1
  EXPECT_DOUBLE_EQ(s.lr_at(299), 0.1);
  EXPECT_NEAR(s.lr_at(300), 0.01, 1e-17);
  EXPECT_NEAR(s.lr_at(599), 0.01, 1e-17);
  EXPECT_NEAR(s.lr_at(600), 0.001, 1e-18);
  EXPECT_NEAR(s.lr_at(800), 0.0001, 1e-19);
}

TEST(LrSchedule, PolynomialDecay) {
  LrScheduleOptions o = base(LrScheduleKind::kPoly, 1.0);
  o.total_steps = 100;
  LrSchedule s(o);  // power 2
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(50), 0.25);
  EXPECT_NEAR(s.lr_at(90), 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(100), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(150), 0.0);
  o.end_lr = 0.1;
  o.poly_power = 1;
  LrSchedule lin(o);
  EXPECT_DOUBLE_EQ(lin.lr_at(50), 0.55);
  EXPECT_DOUBLE_EQ(lin.lr_at(100), 0.1);
}

TEST(LrSchedule, CosineDecayAfterWarmup) {
  LrScheduleOptions o = base(LrScheduleKind::kCosine, 1.0);
  o.total_steps = 120;
  o.warmup_steps = 20;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.5);  // warm-up
  EXPECT_DOUBLE_EQ(s.lr_at(20), 1.0);
  EXPECT_NEAR(s.lr_at(70), 0.5, 1e-15);
  EXPECT_NEAR(s.lr_at(45), 0.5 * (1 + std::cos(3.14159265358979323846 / 4)), 1e-15);
  EXPECT_NEAR(s.lr_at(120), 0.0, 1e-16);
}

TEST(LrSchedule, ErrorsNameWhatIsMissing) {
  auto message = [](LrScheduleOptions o) -> std::string {
    try {
      LrSchedule s(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(base(LrScheduleKind::kPoly, 1)).find("needs the total number of steps"), std::string::npos);
  EXPECT_NE(message(base(LrScheduleKind::kStep, 1)).find("lr_schedule=step needs"), std::string::npos);
  LrScheduleOptions lin = base(LrScheduleKind::kConstant, 1);
  lin.linear_scaling = true;
  EXPECT_NE(message(lin).find("global batch"), std::string::npos);
  LrScheduleOptions warm = base(LrScheduleKind::kConstant, 1);
  warm.warmup_epochs = 2;
  EXPECT_NE(message(warm).find("use lr_warmup_steps"), std::string::npos);
  EXPECT_THROW(parse_lr_schedule("exponential"), Error);
}

TEST(LrSchedule, EpochListParsing) {
  EXPECT_EQ(parse_epoch_list("30, 60,80", "k"), (std::vector<double>{30, 60, 80}));
  EXPECT_TRUE(parse_epoch_list("", "k").empty());
  EXPECT_EQ(parse_epoch_list("0.5", "k"), (std::vector<double>{0.5}));
  EXPECT_THROW(parse_epoch_list("30,abc", "lr_decay_epochs"), Error);
  EXPECT_THROW(parse_epoch_list("60,30", "lr_decay_epochs"), Error);
  EXPECT_THROW(parse_epoch_list("30,,60", "lr_decay_epochs"), Error);
}

TEST(LrSchedule, FromConfig) {
  Config c;
  c.set("lr", "0.05");
  c.set("lr_schedule", "polynomial");
  c.set("lr_scaling", "linear");
  c.set("base_batch_size", "128");
  c.set("warmup_epochs", "1");
  LrSchedule s(LrScheduleOptions::from_config(c, 512, 10, 100));
  c.set("lr_warmup_steps", "4");
  EXPECT_DOUBLE_EQ(LrSchedule(LrScheduleOptions::from_config(c, 512, 10, 100)).warmup_steps(), 4.0);
  EXPECT_DOUBLE_EQ(s.target_lr(), 0.2);
  EXPECT_DOUBLE_EQ(s.warmup_steps(), 10.0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.2);
  EXPECT_EQ(s.options().kind, LrScheduleKind::kPoly);
}

}  // namespace
}  // namespace cohort
