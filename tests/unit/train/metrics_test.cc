// Metrics as tf_cnn_benchmarks computes them, and the run summary JSON line parsed back.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "data/pipeline_stats.h"
#include "json_parse.h"
#include "train/metrics.h"
#include "train/run_summary.h"

namespace cohort {
namespace {

using testing::Json;
using testing::parse_json;

TEST(Metrics, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median_of({3, 1, 2}), 2);
  EXPECT_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median_of({}), 0);
}

TEST(Metrics, RatesAsTfCnnBenchmarks) {
  // rates 100, 200, 400, 200, 100 images/s
  std::vector<double> images(5, 100.0);
  std::vector<double> seconds = {1, 0.5, 0.25, 0.5, 1};
  RateSummary r = summarize_rates(images, seconds);
  EXPECT_EQ(r.count, 5);
  EXPECT_DOUBLE_EQ(r.median, 200);
  EXPECT_DOUBLE_EQ(r.mean, 500 / 3.25);              // batch / mean step time
  EXPECT_DOUBLE_EQ(r.std_error, std::sqrt(2400.0));  // np.std (ddof 0) / √5
  EXPECT_DOUBLE_EQ(r.jitter, 1.4826 * 100);          // median |x − 200| = 100
  EXPECT_EQ(format_rate(r), "images/sec: 153.8 +/- 49.0 (jitter = 148.3)");
  EXPECT_EQ(format_step_line(10, r, 2.302585), "10\timages/sec: 153.8 +/- 49.0 (jitter = 148.3)\t2.303");
  EXPECT_EQ(format_total_line(1234.5678), "total images/sec: 1234.57");
}

TEST(Metrics, WarmupStepsAreExcluded) {
  StepMetrics m(2);
  m.record({10.0, 9.0, 0.0, 100});  // slow first steps (graph build, cache fill)
  m.record({5.0, 0.0, 4.0, 100});
  for (double s : {1.0, 0.5, 0.25, 0.5, 1.0}) m.record({s, 0.1 * s, 0.2 * s, 100});
  EXPECT_EQ(m.steps(), 7);
  EXPECT_EQ(m.measured_steps(), 5);
  RateSummary r = m.images_per_sec();
  EXPECT_DOUBLE_EQ(r.median, 200);
  EXPECT_DOUBLE_EQ(r.jitter, 148.26);
  TimeFractions f = m.time_fractions();
  EXPECT_NEAR(f.data_wait, 0.1, 1e-12);
  EXPECT_NEAR(f.comm_exposed, 0.2, 1e-12);
  EXPECT_NEAR(f.compute, 0.7, 1e-12);
}

TEST(Metrics, NoMeasuredStepsGivesZeros) {
  StepMetrics m(10);
  m.record({1.0, 0, 0, 32});
  EXPECT_EQ(m.images_per_sec().count, 0);
  EXPECT_EQ(m.images_per_sec().mean, 0);
  EXPECT_EQ(m.time_fractions().compute, 0);
}

TEST(Metrics, RejectsImpossibleTimings) {
  StepMetrics m(0);
  EXPECT_THROW(m.record({0.0, 0, 0, 1}), Error);
  EXPECT_THROW(m.record({1.0, -1, 0, 1}), Error);
  EXPECT_THROW(StepMetrics(-1), Error);
}

TEST(Metrics, SpeedupAndEfficiency) {
  EXPECT_DOUBLE_EQ(speedup(180, 100), 1.8);
  EXPECT_DOUBLE_EQ(efficiency(180, 100, 2), 0.9);
  EXPECT_DOUBLE_EQ(efficiency(486914, 66176, 8), 486914.0 / 66176 / 8);  // the labs' DGX-1 table
  EXPECT_EQ(speedup(1, 0), 0);
}

TEST(Metrics, StepClockSplitsStepTime) {
  double t = 100.0;
  StepClock clock([&] { return t; });
  clock.begin();
  t += 0.25;  // waiting for the pipeline
  clock.data_ready();
  t += 1.0;  // forward + backward
  clock.comm_wait_begin();
  t += 0.5;
  clock.comm_wait_end();
  clock.comm_wait_begin();
  t += 0.25;
  clock.comm_wait_end();
  t += 0.0625;  // optimizer update
  StepTiming s = clock.end(256);
  EXPECT_DOUBLE_EQ(s.seconds, 2.0625);
  EXPECT_DOUBLE_EQ(s.data_wait_s, 0.25);
  EXPECT_DOUBLE_EQ(s.comm_exposed_s, 0.75);
  EXPECT_EQ(s.images, 256);
  EXPECT_THROW(clock.end(1), Error);
  clock.begin();
  EXPECT_THROW(clock.begin(), Error);
  EXPECT_THROW(clock.comm_wait_end(), Error);
  StepClock real;
  real.begin();
  real.data_ready();
  EXPECT_GE(real.end(1).seconds, 0.0);
}

TEST(Json, StringsAreEscaped) {
  std::string nasty = "a\"b\\c\nd\te\x01\x7f/é€😀";
  Json v = parse_json(json_string(nasty));
  EXPECT_EQ(v.text, nasty);
  EXPECT_EQ(json_string("\x01"), "\"\\u0001\"");
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong '/')
  // becomes U+FFFD so the line still parses.
  Json bad = parse_json(json_string("x\x80y\xe2\x82z\xc0\xaf"));
  EXPECT_EQ(bad.text, "x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(Json, NumbersRoundTripAndNonFiniteIsNull) {
  for (double d : {0.1, 1.0 / 3, 1e-300, 123456789.125, -2.5, 1e21}) {
    Json v = parse_json(json_number(d));
    EXPECT_EQ(v.kind, Json::Kind::kNumber);
    EXPECT_EQ(v.number, d);
  }
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-0.0), "0");
}

RunSummary sample_summary() {
  RunSummary s;
  s.model = "resnet50";
  s.ranks = 4;
  s.local_ranks = 4;
  s.data = "/data/im\"age\\net";
  s.batch_per_rank = 64;
  s.global_batch = 256;
  s.steps = 100;
  s.warmup_steps = 10;
  s.images_per_sec = {90, 1234.5, 1230.25, 3.5, 7.125};
  s.time_fraction = {0.125, 0.25, 0.625};
  s.epochs = 0.5;
  s.loss = 2.25;
  s.top5 = 0.75;
  s.wall_s = 42.5;
  return s;
}

TEST(RunSummary, FieldsAndOrderAsDesigned) {
  std::string line = run_summary_json(sample_summary());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("{\"schema\": \"cohort.run/1\", \"model\": \"resnet50\", \"ranks\": 4, ", 0), 0u) << line;
  Json j = parse_json(line);
  std::vector<std::string> keys;
  for (const auto& m : j.members) keys.push_back(m.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"schema", "model", "ranks", "local_ranks", "device", "precision", "data",
                                            "batch_per_rank", "global_batch", "steps", "warmup_steps", "images_per_sec",
                                            "time_fraction", "epochs", "loss", "top1", "top5", "wall_s"}));
  EXPECT_EQ(j.at("schema").text, "cohort.run/1");
  EXPECT_EQ(j.at("device").text, "cpu");
  EXPECT_EQ(j.at("precision").text, "f32");
  EXPECT_EQ(j.at("data").text, "/data/im\"age\\net");
  EXPECT_EQ(j.at("ranks").text, "4");  // integers are written as integers
  EXPECT_EQ(j.at("global_batch").number, 256);
  EXPECT_EQ(j.at("warmup_steps").number, 10);
  const Json& r = j.at("images_per_sec");
  EXPECT_EQ(r.at("median").number, 1234.5);
  EXPECT_EQ(r.at("mean").number, 1230.25);
  EXPECT_EQ(r.at("stderr").number, 3.5);
  EXPECT_EQ(r.at("jitter").number, 7.125);
  const Json& f = j.at("time_fraction");
  EXPECT_EQ(f.at("data_wait").number, 0.125);
  EXPECT_EQ(f.at("comm_exposed").number, 0.25);
  EXPECT_EQ(f.at("compute").number, 0.625);
  EXPECT_EQ(j.at("epochs").number, 0.5);
  EXPECT_EQ(j.at("loss").number, 2.25);
  EXPECT_EQ(j.at("top1").kind, Json::Kind::kNull);
  EXPECT_EQ(j.at("top5").number, 0.75);
  EXPECT_EQ(j.at("wall_s").number, 42.5);
}

TEST(RunSummary, DivergedLossIsNullAndExtraFieldsAppend) {
  RunSummary s = sample_summary();
  s.loss = std::nan("");
  s.extra = {{"seed", "1234"}, {"note", json_string("x")}};
  Json j = parse_json(run_summary_json(s));
  EXPECT_EQ(j.at("loss").kind, Json::Kind::kNull);
  EXPECT_EQ(j.members[j.members.size() - 2].key, "seed");
  EXPECT_EQ(j.members.back().value.text, "x");
  s.extra = {{"loss", "1"}};
  EXPECT_THROW(run_summary_json(s), Error);
}

// The message of the kInvalidArgument error run_summary_json throws for s ("" for none).
std::string summary_error(const RunSummary& s) {
  try {
    run_summary_json(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(RunSummary, AnExtraKeyMayNotRepeatAnyKeyBeforeIt) {
  RunSummary s = sample_summary();
  s.extra = {{"wall_s", "1"}};  // a fixed field
  EXPECT_NE(summary_error(s).find("extra field 'wall_s' would repeat a field"), std::string::npos);
  s.extra = {{"note", "1"}, {"note", "2"}};  // an earlier extra one
  EXPECT_NE(summary_error(s).find("extra field 'note' would repeat a field"), std::string::npos);
  s.variable_update = "replicated";  // fields written only with a mode count too
  s.extra = {{"workers", "3"}};
  EXPECT_NE(summary_error(s).find("'workers' would repeat"), std::string::npos);
  // A key that only appears inside a value is no repeat.
  s.data = "\"note\": 1";
  s.extra = {{"note", "1"}};
  EXPECT_EQ(summary_error(s), "");
}

TEST(RunSummary, AnExtraValueIsOneJsonValue) {
  RunSummary s = sample_summary();
  s.extra = {{"note", ""}};
  EXPECT_NE(summary_error(s).find("extra field 'note' has no value"), std::string::npos);
  s.extra = {{"note", "1, \"more\": 2"}};
  EXPECT_NE(summary_error(s).find("extra field 'note' is not one JSON value"), std::string::npos);
  s.extra = {{"note", "{\"a\": "}};
  EXPECT_NE(summary_error(s).find("extra field 'note'"), std::string::npos);
  s.extra = {{"note", " [1, {\"a\": \"b\"}] "}};
  EXPECT_EQ(parse_json(run_summary_json(s)).at("note").items.size(), 2u);
}

TEST(RunSummary, ExtraFieldsFromJsonTextKeepTheirOrder) {
  RunSummary s = sample_summary();
  s.extra = parse_json_members(R"("skipped": 3, "note": {"k": [1]})", "extra_json");
  Json j = parse_json(run_summary_json(s));
  ASSERT_GE(j.members.size(), 2u);
  EXPECT_EQ(j.members[j.members.size() - 2].key, "skipped");
  EXPECT_EQ(j.members.back().key, "note");
  EXPECT_EQ(j.at("note").at("k").items.at(0).number, 1);
}

TEST(RunSummary, InputStagesArePerDecodedImage) {
  data::PipelineStats p;
  p.decoded = 4;
  p.read_cpu_s = 1;
  p.decode_cpu_s = 2;
  p.augment_cpu_s = 0.5;
  p.assemble_cpu_s = 0.25;
  p.bytes_read = 3000;
  p.elapsed_s = 1.5;
  p.limiting_stage = "decode";
  const RunSummary::InputStages in = input_stages(p);
  EXPECT_DOUBLE_EQ(in.read, 0.25);
  EXPECT_DOUBLE_EQ(in.decode, 0.5);
  EXPECT_DOUBLE_EQ(in.augment, 0.125);
  EXPECT_DOUBLE_EQ(in.assemble, 0.0625);
  EXPECT_DOUBLE_EQ(in.read_bytes_per_s, 2000);
  EXPECT_EQ(in.limiting_stage, "decode");
  // Before any image or any time: one image counted, no rate.
  p.decoded = 0;
  p.elapsed_s = 0;
  const RunSummary::InputStages early = input_stages(p);
  EXPECT_DOUBLE_EQ(early.read, 1);
  EXPECT_DOUBLE_EQ(early.read_bytes_per_s, 0);
}

}  // namespace
}  // namespace cohort
