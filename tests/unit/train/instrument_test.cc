// What instrument_dir records for cohort-check while a program runs, not only at its
// end: a rank's progress (steps started and finished) is on disk at every moment, so a
// rank that hangs in a step or is killed still tells how far it got; the end record
// says how many steps were started and what a step cost (in wall time and in the
// training thread's CPU time); a training pipeline's record is written as soon as its
// first epoch is delivered.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/pipeline.h"
#include "json_parse.h"
#include "support/temp_dir.h"
#include "train/instrument.h"

namespace cohort::instrument {
namespace {

using cohort::testing::Json;
using cohort::testing::parse_json;
using cohort::testing::TempDir;

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<Json> records(const std::filesystem::path& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(parse_json(line));
  return out;
}

Json progress(const TempDir& dir) { return parse_json(read_all(dir.path() / "rank-0.progress.json")); }

OptimizerTrace::Setup setup() {
  OptimizerTrace::Setup s;
  s.params.push_back(Tensor::empty({4}, DType::kF32));
  std::fill_n(s.params[0].data_as<float>(), 4, 0.0f);
  s.size = 2;
  s.device = "cpu";
  s.variable_update = "independent";
  s.base_lr = 0.1;
  return s;
}

TEST(OptimizerTrace, ProgressIsOnDiskAtTheStartAndTheEndOfEveryStep) {
  TempDir dir;
  OptimizerTrace trace((dir.path() / "rank-0.jsonl").string(), setup());
  trace.before_step(0.1);
  Json p = progress(dir);
  EXPECT_EQ(p.at("event").text, "progress");
  EXPECT_EQ(p.at("steps_started").number, 1);
  EXPECT_EQ(p.at("steps").number, 0);
  EXPECT_TRUE(p.at("in_step").boolean);
  EXPECT_EQ(p.at("runtime_size").number, 2);
  EXPECT_GT(p.at("time").number, 1.6e9);  // seconds since 1970
  trace.after_step(2.5, 8, 0.01);
  p = progress(dir);
  EXPECT_EQ(p.at("steps").number, 1);
  EXPECT_FALSE(p.at("in_step").boolean);
  // A step that never finishes (a rank stuck in a collective): started, not finished.
  trace.before_step(0.2);
  p = progress(dir);
  EXPECT_EQ(p.at("steps_started").number, 2);
  EXPECT_EQ(p.at("steps").number, 1);
  EXPECT_TRUE(p.at("in_step").boolean);
  EXPECT_EQ(p.at("lr").number, 0.2);
  // Rewritten in place: one record, whatever the history.
  const std::string text = read_all(dir.path() / "rank-0.progress.json");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  // Before the end, the record file holds only the first step's line.
  const std::vector<Json> lines = records(dir.path() / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("event").text, "first_step");
  EXPECT_EQ(lines[0].at("variable_update").text, "independent");  // whether gradients are averaged
}

TEST(OptimizerTrace, TheEndRecordCountsStartedStepsAndTheirCost) {
  TempDir dir;
  {
    OptimizerTrace trace((dir.path() / "rank-0.jsonl").string(), setup());
    for (int i = 0; i < 9; ++i) {
      trace.before_step(0.1);
      trace.after_step(1.0, 8, 0.001);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a wait between steps, not work
    }
    trace.before_step(0.1);  // the tenth step threw
  }
  const std::vector<Json> lines = records(dir.path() / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  const Json& end = lines[1];
  EXPECT_EQ(end.at("event").text, "end");
  EXPECT_EQ(end.at("steps").number, 9);
  EXPECT_EQ(end.at("steps_started").number, 10);
  // Intervals between step starts after the 5 unmeasured steps: starts 6→7, …, 9→10.
  EXPECT_EQ(end.at("step_intervals").number, 4);
  EXPECT_GE(end.at("step_interval_median_s").number, 0.01);  // wall time: the sleep counts
  EXPECT_LT(end.at("step_cpu_median_s").number, 0.005);      // the thread's CPU time: it does not
  EXPECT_GE(end.at("train_s").number, 0);
}

TEST(PipelineTrace, TheFirstEpochIsRecordedAsSoonAsItIsDelivered) {
  TempDir dir;
  const std::string file = (dir.path() / "rank-0.jsonl").string();
  data::PipelineOptions options;
  options.source.split = "train";
  options.batch_size = 4;
  options.shuffle = false;
  {
    PipelineTrace trace(file, options, 8);  // two batches per epoch
    trace.batch(0, 0, 4);
    EXPECT_FALSE(std::filesystem::exists(file));
    trace.batch(0, 1, 4);
    std::vector<Json> lines = records(file);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].at("first_epoch_samples").number, 8);
    EXPECT_EQ(lines[0].at("first_epoch_bitmap").text, "ff");
    trace.batch(1, 0, 4);
  }
  const std::vector<Json> lines = records(file);
  ASSERT_EQ(lines.size(), 2u);  // and once more at the end
  EXPECT_EQ(lines[1].at("batches").number, 3);
}

}  // namespace
}  // namespace cohort::instrument
