// The network graph: parameter registry, gradient-ready hooks, plan reuse, build-time
// shape errors, and a small net that learns a separable problem deterministically.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/status.h"
#include "graph/graph.h"

namespace {

using cohort::ConvOptions;
using cohort::Error;
using cohort::Graph;
using cohort::Layout;
using cohort::PoolOptions;

// Plain SGD over the registry, as an optimizer would do it.
void sgd(Graph& g, float lr) {
  for (auto& p : g.params()) {
    float* w = p.value.data_as<float>();
    const float* d = p.grad.data_as<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) w[i] -= lr * d[i];
  }
}

// Two classes of points on either side of the line x0 + 2 x1 = 0.
void toy_batch(std::mt19937& gen, int n, std::vector<float>& x, std::vector<int32_t>& y) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  x.resize(static_cast<size_t>(n) * 2);
  y.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    x[2 * i] = u(gen);
    x[2 * i + 1] = u(gen);
    y[static_cast<size_t>(i)] = x[2 * i] + 2 * x[2 * i + 1] > 0 ? 1 : 0;
  }
}

std::vector<float> train_toy(uint64_t seed, int steps) {
  Graph g({2});
  int h = g.dense(g.input(), "fc1", 16);
  h = g.relu(h, "relu1");
  h = g.dense(h, "fc2", 2);
  g.softmax_xent(h, "loss");
  g.materialize(seed);
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::vector<float> x, losses;
  std::vector<int32_t> y;
  for (int s = 0; s < steps; ++s) {
    toy_batch(gen, 64, x, y);
    losses.push_back(g.forward_train(x.data(), 64, Layout::kNCHW, y.data()));
    g.backward();
    sgd(g, 0.5f);
  }
  return losses;
}

TEST(Graph, SmallNetLearnsSeparableProblemDeterministically) {
  std::vector<float> a = train_toy(7, 150);
  EXPECT_GT(a.front(), 0.4f);
  EXPECT_LT(a.back(), 0.15f);
  EXPECT_EQ(a, train_toy(7, 150)) << "same seed, same losses bit for bit";
  EXPECT_NE(a, train_toy(8, 150));
}

TEST(Graph, ConvNetWithBatchNormLearnsImages) {
  // 1x6x6 images: class 1 is bright on the left half, class 0 on the right half.
  Graph g({1, 6, 6});
  int h = g.conv(g.input(), "conv", 8, ConvOptions{3, 3, 1, 1, 1, 1, false});
  h = g.batch_norm(h, "bn");
  h = g.relu(h, "relu");
  h = g.max_pool(h, "pool", PoolOptions{2, 2, 0, false});
  h = g.global_avg_pool(h, "gap");
  h = g.dropout(h, "drop", 0.1f);
  h = g.dense(h, "fc", 2);
  g.softmax_xent(h, "loss", 0.05f);
  g.materialize(3);
  g.set_dropout_seed(5);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> noise(0.f, 0.3f);
  const int n = 32;
  std::vector<float> x(n * 36);
  std::vector<int32_t> y(n);
  float first = 0, last = 0;
  for (int s = 0; s < 120; ++s) {
    for (int i = 0; i < n; ++i) {
      y[static_cast<size_t>(i)] = static_cast<int32_t>(gen() & 1);
      for (int p = 0; p < 36; ++p) {
        const bool left = p % 6 < 3;
        x[static_cast<size_t>(i * 36 + p)] = noise(gen) + ((left == (y[static_cast<size_t>(i)] == 1)) ? 1.f : 0.f);
      }
    }
    const float loss = g.forward_train(x.data(), n, Layout::kNCHW, y.data());
    if (s == 0) first = loss;
    last = loss;
    g.backward();
    sgd(g, 0.2f);
  }
  EXPECT_GT(first, 0.5f);
  EXPECT_LT(last, 0.3f);
  // Inference agrees with the labels.
  std::vector<float> logits(n * 2);
  g.infer(x.data(), n, Layout::kNCHW, logits.data());
  int correct = 0;
  for (int i = 0; i < n; ++i)
    correct += (logits[static_cast<size_t>(2 * i + 1)] > logits[static_cast<size_t>(2 * i)]) ==
               (y[static_cast<size_t>(i)] == 1);
  EXPECT_GE(correct, n - 2);
}

TEST(Graph, ParameterRegistryHasStableNamesAndPlainShapes) {
  Graph g({3, 8, 8});
  int h = g.conv(g.input(), "conv1", 16, ConvOptions{3, 3, 1, 1, 1, 1, true});
  h = g.batch_norm(h, "bn1");
  h = g.flatten(h, "flat");
  g.dense(h, "fc", 10);
  ASSERT_EQ(g.params().size(), 6u);
  EXPECT_EQ(g.params()[0].name, "conv1.weight");
  EXPECT_EQ(g.params()[0].shape, (cohort::Shape{16, 3, 3, 3}));
  EXPECT_EQ(g.params()[1].name, "conv1.bias");
  EXPECT_EQ(g.params()[2].name, "bn1.weight");
  EXPECT_EQ(g.params()[3].name, "bn1.bias");
  EXPECT_EQ(g.params()[4].name, "fc.weight");
  EXPECT_EQ(g.params()[4].shape, (cohort::Shape{10, 16 * 64}));
  EXPECT_EQ(g.states()[0].name, "bn1.running_mean");
  EXPECT_EQ(g.num_params(), 16 * 27 + 16 + 32 + 10 * 1024 + 10);
  EXPECT_FALSE(g.params()[0].value.defined() && g.params()[0].value.numel() > 0)
      << "nothing allocated before materialize";
  const std::string s = g.summary();
  EXPECT_NE(s.find("conv1"), std::string::npos);
  EXPECT_NE(s.find("[16, 8, 8]"), std::string::npos);
  EXPECT_NE(s.find("total parameters: 10730"), std::string::npos);
}

TEST(Graph, GradReadyFiresOncePerParameterAsSoonAsItIsFinal) {
  Graph g({3, 6, 6});
  int h = g.conv(g.input(), "conv1", 16, ConvOptions{3, 3, 1, 1, 1, 1, true});
  h = g.relu(h, "relu1");
  h = g.conv(h, "conv2", 16, ConvOptions{3, 3, 1, 1, 1, 1, true});
  h = g.global_avg_pool(h, "gap");
  h = g.dense(h, "fc", 4);
  g.softmax_xent(h, "loss");
  g.materialize(1);
  std::vector<int> order;
  std::vector<std::vector<float>> at_ready(g.params().size());
  g.set_grad_ready([&](int i, const cohort::Parameter& p) {
    order.push_back(i);
    const float* d = p.grad.data_as<float>();
    at_ready[static_cast<size_t>(i)].assign(d, d + p.grad.numel());
  });
  std::vector<float> x(2 * 3 * 36, 0.5f);
  x[5] = 2.f;
  std::vector<int32_t> y{1, 3};
  for (int step = 0; step < 2; ++step) {
    order.clear();
    g.forward_train(x.data(), 2, Layout::kNCHW, y.data());
    g.backward();
    // fc.weight, fc.bias, conv2.*, conv1.*: reverse layer order, each once
    EXPECT_EQ(order, (std::vector<int>{4, 5, 2, 3, 0, 1}));
    for (size_t i = 0; i < g.params().size(); ++i) {
      const float* d = g.params()[i].grad.data_as<float>();
      EXPECT_EQ(at_ready[i], std::vector<float>(d, d + g.params()[i].grad.numel())) << g.params()[i].name;
    }
  }
}

TEST(Graph, PlansAreCompiledOncePerShape) {
  Graph g({4});
  g.dense(g.input(), "fc", 3);
  g.materialize(1);
  auto* a = &g.plan(8, Layout::kNCHW, true);
  auto* b = &g.plan(8, Layout::kNCHW, true);
  auto* c = &g.plan(4, Layout::kNCHW, true);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Graph, BadShapesFailAtBuildTimeWithClearMessages) {
  EXPECT_NE(error_of([] {
              Graph g({3, 5, 5});
              g.conv(g.input(), "conv1", 8, ConvOptions{7, 7, 1, 0, 1, 1, true});
            }).find("layer 'conv1': conv kernel 7x7 is larger than its padded input 5x5"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              g.max_pool(g.input(), "pool", PoolOptions{9, 1, 0, false});
            }).find("larger than its padded input"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              int a = g.conv(g.input(), "a", 8, ConvOptions{3, 3, 1, 1, 1, 1, true});
              int b = g.conv(g.input(), "b", 16, ConvOptions{3, 3, 1, 1, 1, 1, true});
              g.add({a, b}, "sum");
            }).find("layer 'sum': channel/shape mismatch"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              g.conv(g.input(), "c", 8, ConvOptions{3, 3, 1, 1, 1, 2, true});
            }).find("channel mismatch: 3 input and 8 output channels must both be divisible by groups=2"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              g.dense(g.input(), "fc", 10);
            }).find("add a flatten layer"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              int a = g.max_pool(g.input(), "p", PoolOptions{2, 2, 0, false});
              g.concat({a, g.input()}, "cat");
            }).find("must agree in height and width"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({3, 8, 8});
              g.relu(g.input(), "r");
              g.relu(g.input(), "r");
            }).find("used twice"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({10});
              int l = g.softmax_xent(g.input(), "loss");
              g.relu(l, "after");
            }).find("nothing can follow"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Graph g({10});
              g.relu(42, "r");
            }).find("no layer with index 42"),
            std::string::npos);
}

}  // namespace

namespace {

TEST(Graph, SeveralGradReadyHooksCanBeAddedAndRemoved) {
  cohort::Graph g({3});
  g.softmax_xent(g.dense(g.input(), "fc", 2), "loss");
  g.materialize(1);
  int a = 0, b = 0;
  const int ida = g.add_grad_ready([&](int, const cohort::Parameter&) { ++a; });
  g.add_grad_ready([&](int, const cohort::Parameter&) { ++b; });
  std::vector<float> x{1, 2, 3};
  std::vector<int32_t> y{1};
  g.forward_train(x.data(), 1, cohort::Layout::kNCHW, y.data());
  g.backward();
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 2);
  g.remove_grad_ready(ida);
  g.forward_train(x.data(), 1, cohort::Layout::kNCHW, y.data());
  g.backward();
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 4);
  g.set_grad_ready(nullptr);
  g.forward_train(x.data(), 1, cohort::Layout::kNCHW, y.data());
  g.backward();
  EXPECT_EQ(b, 4);
}

}  // namespace
