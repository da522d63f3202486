// The model zoo: exact parameter counts (REFERENCE.md's table, counted from
// torchvision and the papers), unknown names, options, and a training step of every
// family at a small input size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "models/zoo.h"
#include "support/host_views.h"

namespace {

using cohort::build_model;
using cohort::Layout;
using cohort::ModelOptions;

struct Count {
  const char* name;
  int64_t params;
};

class ZooCount : public ::testing::TestWithParam<Count> {};

TEST_P(ZooCount, MatchesReference) {
  auto g = build_model(GetParam().name, {});
  EXPECT_EQ(g->num_params(), GetParam().params) << g->summary();
  EXPECT_FALSE(g->materialized());
}

INSTANTIATE_TEST_SUITE_P(
    Models, ZooCount,
    ::testing::Values(Count{"resnet18", 11689512}, Count{"resnet34", 21797672}, Count{"resnet50", 25557032},
                      Count{"resnet101", 44549160}, Count{"resnet152", 60192808}, Count{"alexnet_owt", 61100840},
                      Count{"vgg16", 138357544}, Count{"googlenet", 6624904}, Count{"mnist_cnn", 1199882},
                      Count{"alexnet", 60965224}, Count{"resnet20", 269722}, Count{"resnet32", 464154},
                      Count{"resnet44", 658586}, Count{"resnet56", 853018}, Count{"resnet110", 1727962}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Zoo, ClassesChangeTheHead) {
  ModelOptions o;
  o.num_classes = 10;
  EXPECT_EQ(build_model("resnet50", o)->num_params(), 25557032 - 2048 * 990 - 990);
}

TEST(Zoo, UnknownModelListsValidNames) {
  try {
    build_model("resnet51", {});
    FAIL() << "no error";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kInvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("Invalid model type: 'resnet51'"), std::string::npos) << m;
    EXPECT_NE(m.find("resnet50"), std::string::npos) << m;
    EXPECT_NE(m.find("mnist_cnn"), std::string::npos) << m;
  }
}

TEST(Zoo, TooSmallImageIsAClearError) {
  ModelOptions o;
  o.image_size = 8;
  try {
    build_model("alexnet", o);
    FAIL() << "no error";
  } catch (const cohort::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'alexnet' cannot take image_size=8"), std::string::npos) << e.what();
  }
}

struct Small {
  const char* name;
  int image_size;
};

class ZooStep : public ::testing::TestWithParam<Small> {};

// A gradient step on one fixed batch lowers the loss by what the gradient predicts
// (first order: L(w - lr g) ~ L(w) - lr |g|^2): forward, backward and the gradient
// plumbing of the whole family agree. Dropout masks are held fixed by the step number.
TEST_P(ZooStep, GradientPredictsTheLossDecrease) {
  ModelOptions o;
  o.image_size = GetParam().image_size;
  o.num_classes = 5;
  auto g = build_model(GetParam().name, o);
  g->materialize(11);
  g->set_dropout_seed(1);
  const cohort::Shape& in = g->shape(0);
  // batch norm over fewer than ~8 values per channel is too curved for a first-order check
  const int n = 4;
  std::vector<float> x(static_cast<size_t>(n * in[0] * in[1] * in[2]));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
  std::vector<int32_t> y{0, 1, 2, 3};
  int grads = 0;
  g->set_grad_ready([&](int, const cohort::Parameter&, const cohort::Event&) { ++grads; });
  g->set_step(0);
  const float l0 = g->forward_train(cohort::test::batch_view(x, *g, n, Layout::kNCHW), Layout::kNCHW,
                                    cohort::test::labels_view(y, n));
  ASSERT_TRUE(std::isfinite(l0));
  g->backward();
  EXPECT_EQ(grads, static_cast<int>(g->params().size()));
  double norm2 = 0;
  for (auto& p : g->params())
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      norm2 += double(p.grad.data_as<float>()[i]) * p.grad.data_as<float>()[i];
  ASSERT_GT(norm2, 0);
  const double lr = 0.01 * l0 / norm2;  // predicted decrease: 1% of the loss
  for (auto& p : g->params()) {
    float* w = p.value.data_as<float>();
    const float* d = p.grad.data_as<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) w[i] -= static_cast<float>(lr) * d[i];
  }
  g->set_step(0);
  const float l1 = g->forward_train(cohort::test::batch_view(x, *g, n, Layout::kNCHW), Layout::kNCHW,
                                    cohort::test::labels_view(y, n));
  const double ratio = (l0 - l1) / (lr * norm2);
  EXPECT_GT(ratio, 0.8) << GetParam().name << " l0=" << l0 << " l1=" << l1;
  EXPECT_LT(ratio, 1.2) << GetParam().name << " l0=" << l0 << " l1=" << l1;
  std::vector<float> logits(static_cast<size_t>(n) * 5);
  g->infer(cohort::test::batch_view(x, *g, n, Layout::kNCHW), Layout::kNCHW,
           cohort::test::output_view(logits, *g, n, Layout::kNCHW));
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(Models, ZooStep,
                         ::testing::Values(Small{"trivial", 16}, Small{"mnist_cnn", 28}, Small{"resnet20", 16},
                                           Small{"resnet18", 64}, Small{"resnet50", 64}, Small{"googlenet", 64},
                                           Small{"alexnet", 67}, Small{"alexnet_owt", 63}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace

namespace {

// The same batch in NHWC gives the same loss and gradients as in NCHW.
TEST(Zoo, NhwcInputTrainsLikeNchw) {
  ModelOptions o;
  o.image_size = 16;
  auto run = [&](Layout layout) {
    auto g = build_model("resnet20", o);
    g->materialize(3);
    const int n = 4, c = 3, hw = 16 * 16;
    std::vector<float> nchw(static_cast<size_t>(n * c * hw)), input(nchw.size());
    for (size_t i = 0; i < nchw.size(); ++i) nchw[i] = std::cos(static_cast<float>(i) * 0.11f);
    for (int b = 0; b < n; ++b)
      for (int ch = 0; ch < c; ++ch)
        for (int p = 0; p < hw; ++p)
          input[static_cast<size_t>(layout == Layout::kNHWC ? (b * hw + p) * c + ch : (b * c + ch) * hw + p)] =
              nchw[static_cast<size_t>((b * c + ch) * hw + p)];
    std::vector<int32_t> y{0, 1, 2, 3};
    const float loss =
        g->forward_train(cohort::test::batch_view(input, *g, n, layout), layout, cohort::test::labels_view(y, n));
    g->backward();
    std::vector<float> grads;
    for (const auto& p : g->params())
      grads.insert(grads.end(), p.grad.data_as<float>(), p.grad.data_as<float>() + p.grad.numel());
    return std::make_pair(loss, grads);
  };
  auto a = run(Layout::kNCHW), b = run(Layout::kNHWC);
  EXPECT_NEAR(a.first, b.first, 1e-5);
  double err = 0, scale = 1e-6;
  for (size_t i = 0; i < a.second.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(a.second[i] - b.second[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a.second[i])));
  }
  EXPECT_LT(err / scale, 1e-4);
}

}  // namespace
