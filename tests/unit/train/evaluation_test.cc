// Evaluation metrics: top-k as tf.nn.in_top_k, stable cross-entropy, padded samples
// excluded, totals summed over ranks; metric averaging across ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "thread_collectives.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"
#include "train/evaluation.h"

namespace cohort {
namespace {

using testing::run_ranks;
using testing::ThreadCollectives;

Tensor logits(std::vector<float> v, int64_t classes) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size()) / classes, classes}, DType::kF32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

Tensor labels(std::vector<int32_t> v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

TEST(Evaluation, TopKCountsStrictlyHigherScores) {
  const float s[6] = {0.1f, 0.9f, 0.5f, 0.5f, 0.2f, 0.3f};
  EXPECT_TRUE(in_top_k(s, 6, 1, 1));
  EXPECT_FALSE(in_top_k(s, 6, 2, 1));
  EXPECT_TRUE(in_top_k(s, 6, 2, 2));  // tied with class 3 at the boundary: both count
  EXPECT_TRUE(in_top_k(s, 6, 3, 2));
  EXPECT_TRUE(in_top_k(s, 6, 4, 5));
  EXPECT_FALSE(in_top_k(s, 6, 0, 5));
  const float nan[3] = {std::nanf(""), 1.0f, 0.0f};
  EXPECT_FALSE(in_top_k(nan, 3, 1, 5));
}

TEST(Evaluation, CrossEntropyIsStable) {
  const float uniform[4] = {3, 3, 3, 3};
  EXPECT_NEAR(softmax_cross_entropy(uniform, 4, 2), std::log(4.0), 1e-12);
  const float big[2] = {1000.0f, 0.0f};
  EXPECT_NEAR(softmax_cross_entropy(big, 2, 0), 0.0, 1e-12);
  EXPECT_NEAR(softmax_cross_entropy(big, 2, 1), 1000.0, 1e-9);
}

TEST(Evaluation, PaddedSamplesAreNeverCounted) {
  EvalAccumulator acc;
  // 3 rows, 2 valid; the padded third row would be "correct" if it counted.
  acc.add_batch(logits({2, 1, 0, /**/ 0, 1, 2, /**/ 9, 0, 0}, 3), labels({0, 0, 0}), 2);
  EXPECT_EQ(acc.totals().samples, 2);
  EXPECT_EQ(acc.totals().top1, 1);
  EXPECT_EQ(acc.totals().top5, 2);
  EvalResult r = acc.local_result();
  EXPECT_DOUBLE_EQ(r.top1, 0.5);
  EXPECT_DOUBLE_EQ(r.top5, 1.0);
  const float a[3] = {2, 1, 0}, b[3] = {0, 1, 2};
  EXPECT_NEAR(r.loss, 0.5 * (softmax_cross_entropy(a, 3, 0) + softmax_cross_entropy(b, 3, 0)), 1e-12);
}

TEST(Evaluation, BadInputsAreNamed) {
  EvalAccumulator acc;
  EXPECT_THROW(acc.add_batch(logits({1, 2}, 2), labels({0, 1}), 1), Error);  // 1 row, 2 labels
  EXPECT_THROW(acc.add_batch(logits({1, 2}, 2), labels({2}), 1), Error);     // label out of range
  EXPECT_THROW(acc.add_batch(logits({1, 2}, 2), labels({0}), 2), Error);     // valid > N
  EXPECT_NO_THROW(acc.add_batch(logits({1, 2}, 2), labels({7}), 0));         // padding is not read
}

TEST(Evaluation, GlobalResultSumsRanksBeforeDividing) {
  std::mutex mu;
  std::vector<EvalResult> results;
  run_ranks(3, [&](int rank, ThreadCollectives& c) {
    EvalAccumulator acc;
    // rank r evaluates r + 1 valid samples, of which only rank 0's is correct
    std::vector<float> v;
    std::vector<int32_t> l;
    for (int i = 0; i <= rank; ++i) {
      v.insert(v.end(), {1.0f, 0.0f});
      l.push_back(rank == 0 ? 0 : 1);
    }
    v.insert(v.end(), {5.0f, 0.0f});  // padding
    l.push_back(0);
    acc.add_batch(logits(v, 2), labels(l), rank + 1);
    EvalResult r = acc.global_result(c);
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(r);
  });
  for (const EvalResult& r : results) {
    EXPECT_EQ(r.samples, 6);
    EXPECT_DOUBLE_EQ(r.top1, 1.0 / 6);  // not the mean of the per-rank accuracies (1/3)
    EXPECT_DOUBLE_EQ(r.top5, 1.0);
  }
}

TEST(Evaluation, AverageMetricsAcrossRanks) {
  std::mutex mu;
  std::vector<std::map<std::string, double>> out;
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    auto m = average_metrics({{"loss", 1.0 + rank}, {"accuracy", 0.5 * rank}}, c);
    std::lock_guard<std::mutex> lock(mu);
    out.push_back(m);
  });
  for (auto& m : out) {
    EXPECT_DOUBLE_EQ(m["loss"], 1.5);
    EXPECT_DOUBLE_EQ(m["accuracy"], 0.25);
  }
  std::vector<std::string> errors;
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    try {
      average_metrics({{rank == 0 ? "loss" : "los", 1.0}}, c);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e.what());
    }
  });
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("different metric names"), std::string::npos) << errors[0];
}

// Logits and labels on a device (the test device: host memory behind the device
// interface) are counted there, with the same totals as on the host.
TEST(Evaluation, CountsLogitsAndLabelsOnADevice) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  OwnedStream stream(test);
  const int64_t n = 5, k = 7;
  Tensor logits = Tensor::empty({n, k}, DType::kF32);
  Tensor labels = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n * k; ++i) logits.data_as<float>()[i] = std::sin(0.9f * static_cast<float>(i));
  for (int64_t i = 0; i < n; ++i) labels.data_as<int32_t>()[i] = static_cast<int32_t>((3 * i) % k);
  EvalAccumulator host, device, device_logits_only;
  host.add_batch(logits, labels, 4);
  const Tensor dl = clone_to(logits, *memory.on(test)), dy = clone_to(labels, *memory.on(test));
  device.add_batch(dl, dy, 4, stream);
  device_logits_only.add_batch(dl, labels, 4, stream);  // host labels are copied over
  for (const EvalAccumulator* a : {&device, &device_logits_only}) {
    EXPECT_EQ(a->totals().samples, host.totals().samples);
    EXPECT_EQ(a->totals().top1, host.totals().top1);
    EXPECT_EQ(a->totals().top5, host.totals().top5);
    EXPECT_NEAR(a->totals().loss_sum, host.totals().loss_sum, 1e-9);
  }
  // A bad label on the device is found (on a host copy) and named.
  Tensor bad = clone_to(labels, *memory.on(test));
  labels.data_as<int32_t>()[2] = 9;
  copy(bad, labels);
  try {
    device.add_batch(dl, bad, 4, stream);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 9 of sample 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
