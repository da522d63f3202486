// The network graph: parameter registry, gradient-ready hooks, plan reuse, build-time
// shape errors, and a small net that learns a separable problem deterministically.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <random>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/graph.h"
#include "support/host_views.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"

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
    losses.push_back(g.forward_train(cohort::test::batch_view(x, g, 64, Layout::kNCHW), Layout::kNCHW,
                                     cohort::test::labels_view(y, 64)));
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
    const float loss = g.forward_train(cohort::test::batch_view(x, g, n, Layout::kNCHW), Layout::kNCHW,
                                       cohort::test::labels_view(y, n));
    if (s == 0) first = loss;
    last = loss;
    g.backward();
    sgd(g, 0.2f);
  }
  EXPECT_GT(first, 0.5f);
  EXPECT_LT(last, 0.3f);
  // Inference agrees with the labels.
  std::vector<float> logits(n * 2);
  g.infer(cohort::test::batch_view(x, g, n, Layout::kNCHW), Layout::kNCHW,
          cohort::test::output_view(logits, g, n, Layout::kNCHW));
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
  g.set_grad_ready([&](int i, const cohort::Parameter& p, const cohort::Event&) {
    order.push_back(i);
    const float* d = p.grad.data_as<float>();
    at_ready[static_cast<size_t>(i)].assign(d, d + p.grad.numel());
  });
  std::vector<float> x(2 * 3 * 36, 0.5f);
  x[5] = 2.f;
  std::vector<int32_t> y{1, 3};
  for (int step = 0; step < 2; ++step) {
    order.clear();
    g.forward_train(cohort::test::batch_view(x, g, 2, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 2));
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
  const int ida = g.add_grad_ready([&](int, const cohort::Parameter&, const cohort::Event&) { ++a; });
  g.add_grad_ready([&](int, const cohort::Parameter&, const cohort::Event&) { ++b; });
  std::vector<float> x{1, 2, 3};
  std::vector<int32_t> y{1};
  g.forward_train(cohort::test::batch_view(x, g, 1, cohort::Layout::kNCHW), cohort::Layout::kNCHW,
                  cohort::test::labels_view(y, 1));
  g.backward();
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 2);
  g.remove_grad_ready(ida);
  g.forward_train(cohort::test::batch_view(x, g, 1, cohort::Layout::kNCHW), cohort::Layout::kNCHW,
                  cohort::test::labels_view(y, 1));
  g.backward();
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 4);
  g.set_grad_ready(nullptr);
  g.forward_train(cohort::test::batch_view(x, g, 1, cohort::Layout::kNCHW), cohort::Layout::kNCHW,
                  cohort::test::labels_view(y, 1));
  g.backward();
  EXPECT_EQ(b, 4);
}

// ---- bindings and devices ----

cohort::backend::Bindings bindings_of(const Graph& g) {
  cohort::backend::Bindings b;
  for (const auto& p : g.params()) {
    b.params.push_back(p.value);
    b.grads.push_back(p.grad);
  }
  for (const auto& s : g.states()) b.states.push_back(s.value);
  return b;
}

Graph small_net() {
  Graph g({1, 6, 6});
  ConvOptions c;
  g.conv(g.input(), "conv", 4, c);
  g.batch_norm(g.find("conv"), "bn");
  g.flatten(g.find("bn"), "flat");
  g.dense(g.find("flat"), "fc", 3);
  g.softmax_xent(g.find("fc"), "loss");
  g.materialize(3);
  return g;
}

void expect_refused(const cohort::backend::NetSpec& spec, const cohort::backend::Bindings& b, const char* says) {
  auto cpu = cohort::backend::make_backend(cohort::Device::cpu(), 1);
  cohort::backend::PlanOptions o;
  o.batch = 2;
  try {
    cpu->compile(spec, b, o);
    FAIL() << "compiled with a bad binding (" << says << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Backend, CompileRefusesBindingsOfAnotherDeviceShapeTypeOrLayout) {
  Graph g = small_net();
  cohort::backend::PlanOptions o;
  o.batch = 2;
  auto cpu = cohort::backend::make_backend(cohort::Device::cpu(), 1);
  EXPECT_NO_THROW(cpu->compile(g.spec(), bindings_of(g), o));

  cohort::Memory memory;
  auto b = bindings_of(g);
  b.params[0] = cohort::clone_to(b.params[0], *memory.on({cohort::Device::Kind::kTest, 0}));
  expect_refused(g.spec(), b, "binding params[0] is f32[4, 1, 3, 3] on test:0");

  b = bindings_of(g);
  b.grads[2] = cohort::Tensor::empty({5}, cohort::DType::kF32);
  expect_refused(g.spec(), b, "binding grads[2] is f32[5] on cpu but the plan needs contiguous f32[4]");

  b = bindings_of(g);
  b.states[1] = cohort::Tensor::empty({4}, cohort::DType::kBF16);
  expect_refused(g.spec(), b, "binding states[1] is bf16[4]");

  b = bindings_of(g);  // the dense weight [3, 64] as a transposed (strided) view
  const cohort::Tensor& w = b.params[4];
  b.params[4] = cohort::Tensor::wrap(w.data(), w.shape(), cohort::DType::kF32, {}, {1, 3});
  expect_refused(g.spec(), b, "(not contiguous)");

  b = bindings_of(g);
  b.states.pop_back();
  expect_refused(g.spec(), b, "the plan needs 2 states bindings, got 1");
}

TEST(Backend, TheFactoryFollowsTheDevice) {
  auto cpu = cohort::backend::make_backend(cohort::Device::cpu(), 2);
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->device(), cohort::Device::cpu());
  EXPECT_TRUE(cpu->stream().is_host());
  EXPECT_EQ(cpu->stream().threads(), 2);
  EXPECT_EQ(cohort::backend::make_backend({cohort::Device::Kind::kCudaHost, 0}, 1)->name(), "cpu");
  try {
    cohort::backend::make_backend({cohort::Device::Kind::kTest, 0}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kUnsupported);
  }
}

// A backend on the test device that compiles nothing: what the graph does with its
// memory is what a GPU backend would get.
class TestDeviceBackend final : public cohort::backend::Backend {
 public:
  std::string name() const override { return "test"; }
  cohort::Device device() const override { return {cohort::Device::Kind::kTest, 0}; }
  cohort::Stream stream() const override { return stream_; }
  std::unique_ptr<cohort::backend::Plan> compile(const cohort::backend::NetSpec& spec,
                                                 const cohort::backend::Bindings& b,
                                                 const cohort::backend::PlanOptions&) override {
    cohort::backend::check_bindings(spec, b, device());
    throw Error(cohort::Code::kUnsupported, "the test device runs no network");
  }

 private:
  cohort::OwnedStream stream_{cohort::Device{cohort::Device::Kind::kTest, 0}};
};

TEST(Graph, ParametersLiveOnTheBackendsDeviceAndFollowItWhenItChanges) {
  Graph host = small_net();
  Graph g({1, 6, 6});
  ConvOptions c;
  g.conv(g.input(), "conv", 4, c);
  g.batch_norm(g.find("conv"), "bn");
  g.flatten(g.find("bn"), "flat");
  g.dense(g.find("flat"), "fc", 3);
  g.softmax_xent(g.find("fc"), "loss");
  cohort::Memory memory;
  auto backend = std::make_shared<TestDeviceBackend>();
  EXPECT_THROW(g.set_backend(backend), Error);  // a device backend needs an allocator
  g.set_backend(backend, memory.on(backend->device()));
  g.materialize(3);
  for (size_t i = 0; i < g.params().size(); ++i) {
    const auto& p = g.params()[i];
    ASSERT_EQ(p.value.device(), backend->device()) << p.name;
    ASSERT_EQ(p.grad.device(), backend->device()) << p.name;
    cohort::Tensor v = cohort::to_host(p.value), want = host.params()[i].value;
    EXPECT_EQ(std::memcmp(v.data(), want.data(), v.nbytes()), 0) << p.name << ": drawn like the host's";
    cohort::Tensor d = cohort::to_host(p.grad);
    for (int64_t j = 0; j < d.numel(); ++j) ASSERT_EQ(d.data_as<float>()[j], 0.f) << p.name;
  }
  EXPECT_EQ(cohort::to_host(g.states()[1].value).data_as<float>()[0], 1.f);  // running variance
  // The device's plan sees its bindings on the device.
  std::vector<float> x(2 * 36, 0.5f);
  std::vector<int32_t> y{0, 1};
  try {
    g.forward_train(cohort::test::batch_view(x, g, 2, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "the test device runs no network");
  }
  // Back to the CPU: the values come along and train there.
  g.set_backend(cohort::backend::make_backend(cohort::Device::cpu(), 1));
  for (size_t i = 0; i < g.params().size(); ++i) {
    EXPECT_TRUE(g.params()[i].value.device().is_host());
    EXPECT_EQ(std::memcmp(g.params()[i].value.data(), host.params()[i].value.data(), g.params()[i].value.nbytes()), 0);
  }
  const float a =
      g.forward_train(cohort::test::batch_view(x, g, 2, Layout::kNCHW), Layout::kNCHW, cohort::test::labels_view(y, 2));
  const float b = host.forward_train(cohort::test::batch_view(x, host, 2, Layout::kNCHW), Layout::kNCHW,
                                     cohort::test::labels_view(y, 2));
  EXPECT_EQ(a, b);
}

}  // namespace
