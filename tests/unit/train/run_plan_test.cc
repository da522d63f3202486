// Run length from num_iter / num_epochs, the epoch size and the global batch.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "core/status.h"
#include "train/run_plan.h"

namespace cohort {
namespace {

TEST(RunPlan, EpochsAreSplitAcrossRanksAndPadded) {
  // Fashion-MNIST: 60000 images, 2 ranks × 256 = 512 per step → 118 steps (the last padded).
  RunPlan p = make_run_plan(0, 5, 10, 60000, 512);
  EXPECT_EQ(p.steps_per_epoch, 118);
  EXPECT_EQ(p.total_steps, 590);
  EXPECT_EQ(p.warmup_steps, 10);
  EXPECT_DOUBLE_EQ(p.epochs_at(59), 0.5);
  EXPECT_EQ(make_run_plan(0, 0.5, 10, 60000, 512).total_steps, 59);
  EXPECT_EQ(make_run_plan(0, 1, 10, 1024, 512).total_steps, 2);
}

TEST(RunPlan, NumIterWinsAndWarmupLeavesOneMeasuredStep) {
  RunPlan p = make_run_plan(100, 5, 10, 0, 64);  // synthetic: epoch size unknown
  EXPECT_EQ(p.steps_per_epoch, 0);
  EXPECT_EQ(p.total_steps, 100);
  EXPECT_EQ(p.epochs_at(50), 0.0);
  EXPECT_EQ(make_run_plan(5, 0, 10, 0, 64).warmup_steps, 4);
  EXPECT_EQ(make_run_plan(1, 0, 10, 0, 64).warmup_steps, 0);
}

TEST(RunPlan, UnknowableLengthIsAClearError) {
  try {
    make_run_plan(0, 1, 10, 0, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set num_iter instead"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_run_plan(0, 0, 10, 100, 64), Error);
  EXPECT_THROW(make_run_plan(10, 0, 10, 100, 0), Error);
}

TEST(RunPlan, FromConfig) {
  Config c;
  c.set("num_epochs", "2");
  c.set("num_warmup_batches", "3");
  RunPlan p = make_run_plan(c, 1000, 100);
  EXPECT_EQ(p.total_steps, 20);
  EXPECT_EQ(p.warmup_steps, 3);
}

}  // namespace
}  // namespace cohort
