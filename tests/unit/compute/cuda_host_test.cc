// What of the CUDA backend runs without a GPU: its math policy, its algorithm cache, its
// descriptions of values and windows for cuDNN, and the kernels/ functors its own
// kernels launch, checked here on the host against the CPU backend's results.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/algo_cache.h"
#include "backend/cuda/tensor_layout.h"
#include "backend/math_policy.h"
#include "core/status.h"
#include "graph/graph.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"
#include "kernels/optim_update.h"
#include "kernels/pool.h"
#include "support/host_views.h"

namespace cohort {
namespace {

using backend::Layout;
using backend::Tf32;

TEST(MathPolicy, Tf32OnlyWhereTheGpuHasItAndNeverWhenOff) {
  EXPECT_EQ(backend::parse_tf32("auto"), Tf32::kAuto);
  EXPECT_EQ(backend::parse_tf32("off"), Tf32::kOff);
  EXPECT_THROW(backend::parse_tf32("maybe"), Error);
  EXPECT_TRUE(backend::tf32_enabled(Tf32::kAuto, 9, 0));   // H100
  EXPECT_TRUE(backend::tf32_enabled(Tf32::kAuto, 8, 0));   // A100
  EXPECT_FALSE(backend::tf32_enabled(Tf32::kAuto, 7, 0));  // V100: no TF32
  EXPECT_FALSE(backend::tf32_enabled(Tf32::kOn, 7, 5));
  EXPECT_FALSE(backend::tf32_enabled(Tf32::kOff, 9, 0));
  EXPECT_EQ(backend::describe_math(Tf32::kAuto, 9, 0),
            "tf32=auto: TF32 tensor cores for f32 convolutions and matrix products (sm_90)");
  EXPECT_EQ(backend::describe_math(Tf32::kOff, 9, 0),
            "tf32=off: f32 convolutions and matrix products in full f32 (sm_90)");
  EXPECT_EQ(backend::describe_math(Tf32::kAuto, 7, 0), "tf32=auto: full f32 (sm_70 has no TF32 tensor cores)");
}

TEST(AlgoCache, SearchesEachShapeOnceAndTellsPassesAndPoliciesApart) {
  backend::AlgoCache cache;
  backend::ConvKey k;
  k.input = {8, 3, 32, 32};
  k.output = {8, 16, 32, 32};
  k.filter = {16, 3, 3, 3};
  k.win = {3, 3, 1, 1, 1, 1, 1, 1, false};
  int searched = 0;
  auto search = [&] {
    ++searched;
    return backend::ConvChoice{searched, 0, 1024, 0.5f};
  };
  EXPECT_EQ(cache.find(k, search).algo, 1);
  EXPECT_EQ(cache.find(k, search).algo, 1);  // cached
  backend::ConvKey data = k;
  data.pass = backend::ConvPass::kBackwardData;
  EXPECT_EQ(cache.find(data, search).algo, 2);
  backend::ConvKey tf32 = k;
  tf32.tf32 = true;
  EXPECT_EQ(cache.find(tf32, search).algo, 3);
  backend::ConvKey batch = k;
  batch.input[0] = batch.output[0] = 16;
  EXPECT_EQ(cache.find(batch, search).algo, 4);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.searches(), 4u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(k.text(), "fwd in[8, 3, 32, 32] out[8, 16, 32, 32] w[16, 3, 3, 3] k3x3 s1x1 p1x1 d1x1 g1 f32 nchw");
}

TEST(TensorLayout, FourDimensionalViewsWithTheLayoutsStrides) {
  backend::Desc4 a = backend::describe4(2, {3, 4, 5}, Layout::kNCHW);
  EXPECT_EQ(a.dims, (std::array<int, 4>{2, 3, 4, 5}));
  EXPECT_EQ(a.strides, (std::array<int, 4>{60, 20, 5, 1}));
  backend::Desc4 b = backend::describe4(2, {3, 4, 5}, Layout::kNHWC);
  EXPECT_EQ(b.strides, (std::array<int, 4>{60, 1, 15, 3}));
  backend::Desc4 f = backend::describe4(7, {10}, Layout::kNHWC);  // [N, F] is [N, F, 1, 1]
  EXPECT_EQ(f.dims, (std::array<int, 4>{7, 10, 1, 1}));
  EXPECT_EQ(f.strides, (std::array<int, 4>{10, 1, 1, 1}));
  EXPECT_THROW(backend::describe4(1 << 20, {3, 1024, 1024}, Layout::kNCHW), Error);
}

TEST(TensorLayout, CudnnPoolsOnlyWhereItsSymmetricPaddingGivesTheNetworksOutput) {
  backend::Window w{3, 3, 2, 2, 0, 0, 1, 1, false};
  // 7 → floor 3; ceil mode also 3: cuDNN places the windows alike.
  EXPECT_TRUE(backend::cudnn_pool_fits(w, 7, 7, 3, 3));
  // 8 → floor 3 but ceil 4: one window more at the bottom/right, which cuDNN cannot.
  EXPECT_EQ(backend::window_out(8, 3, 2, 0, 1, true), 4);
  EXPECT_FALSE(backend::cudnn_pool_fits(w, 8, 8, 4, 4));
  EXPECT_TRUE(backend::cudnn_pool_fits(w, 8, 8, 3, 3));
}

// ---- the CUDA kernels' functors against the CPU backend ----

std::vector<float> ramp(int64_t n, float scale = 0.37f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * scale) * 2.f;
  return v;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << " at " << i;
}

// Forward output and input gradient of a one-layer graph on the CPU backend.
struct CpuRun {
  std::vector<float> y, dx;
};
CpuRun run_cpu(Graph& g, int64_t n, std::vector<float> x, std::vector<float> dy) {
  g.materialize(1);
  auto& plan = g.plan(n, Layout::kNCHW, true, true);
  plan.forward(test::batch_view(x, g, n, Layout::kNCHW), {}, 5, {});
  CpuRun r;
  r.y.resize(dy.size());
  plan.read(g.num_layers() - 1, test::batch_view(r.y, g, n, Layout::kNCHW, g.num_layers() - 1));
  plan.backward(test::batch_view(dy, g, n, Layout::kNCHW, g.num_layers() - 1), [](int, const Event&) {}, {});
  r.dx.resize(x.size());
  plan.read_input_grad(test::batch_view(r.dx, g, n, Layout::kNCHW));
  return r;
}

TEST(CudaFunctors, CeilModePoolingMatchesTheCpuBackendForwardAndBackward) {
  for (bool max : {true, false}) {
    const int64_t n = 2, c = 3, h = 8, w = 9;
    Graph g({c, h, w});
    PoolOptions o{3, 2, 1, true};
    if (max)
      g.max_pool(g.input(), "pool", o);
    else
      g.avg_pool(g.input(), "pool", o);
    const Shape& os = g.shape(1);
    std::vector<float> x = ramp(n * c * h * w), dy = ramp(n * os[0] * os[1] * os[2], 0.11f);
    const CpuRun cpu = run_cpu(g, n, x, dy);
    const kernels::PoolGeometry geo{n, c, h, w, os[1], os[2], 3, 3, 2, 2, 1, 1};
    std::vector<float> y(cpu.y.size()), dx(x.size(), 0.f);
    kernels::host_for_each(1, static_cast<int64_t>(y.size()), kernels::PoolForward{geo, max}, y.data(),
                           static_cast<const float*>(x.data()));
    expect_near(y, cpu.y, 1e-5f, max ? "max pool forward" : "avg pool forward");
    kernels::host_for_each(1, static_cast<int64_t>(dx.size()), kernels::PoolBackward{geo, max, false}, dx.data(),
                           static_cast<const float*>(dy.data()), static_cast<const float*>(x.data()),
                           static_cast<const float*>(y.data()));
    expect_near(dx, cpu.dx, 1e-5f, max ? "max pool backward" : "avg pool backward");
  }
}

TEST(CudaFunctors, ShortcutAMatchesTheCpuBackend) {
  const int64_t n = 2, c = 4, h = 6, w = 5;
  Graph g({c, h, w});
  g.shortcut_a(g.input(), "short", 8, 2);
  const Shape& os = g.shape(1);
  std::vector<float> x = ramp(n * c * h * w), dy = ramp(n * os[0] * os[1] * os[2], 0.23f);
  const CpuRun cpu = run_cpu(g, n, x, dy);
  const kernels::ShortcutAForward f{c, h, w, os[0], os[1], os[2], 2, (os[0] - c) / 2};
  std::vector<float> y(cpu.y.size()), dx(x.size());
  kernels::host_for_each(1, static_cast<int64_t>(y.size()), f, y.data(), static_cast<const float*>(x.data()));
  EXPECT_EQ(y, cpu.y);
  const kernels::ShortcutABackward b{c, h, w, os[0], os[1], os[2], 2, (os[0] - c) / 2, false};
  kernels::host_for_each(1, static_cast<int64_t>(dx.size()), b, dx.data(), static_cast<const float*>(dy.data()));
  EXPECT_EQ(dx, cpu.dx);
}

TEST(CudaFunctors, DropoutDrawsTheCpuBackendsMask) {
  const int64_t n = 4, f = 5000;
  const float p = 0.3f;
  Graph g({f});
  g.dropout(g.input(), "drop", p);
  g.set_dropout_seed(99);
  std::vector<float> x = ramp(n * f), dy = ramp(n * f, 0.05f);
  const CpuRun cpu = run_cpu(g, n, x, dy);
  // run_cpu's forward is step 5; the dropout is layer 1.
  const uint64_t draws = (uint64_t{5} << 20) ^ 1u;
  std::vector<float> y(x.size()), dx(x.size());
  kernels::host_for_each(2, n * f, kernels::DropoutForward{draws, 99, p}, y.data(),
                         static_cast<const float*>(x.data()));
  expect_near(y, cpu.y, 1e-6f, "dropout forward");
  kernels::host_for_each(2, n * f, kernels::DropoutBackward{draws, 99, p, false}, dx.data(),
                         static_cast<const float*>(dy.data()));
  expect_near(dx, cpu.dx, 1e-6f, "dropout backward");
}

TEST(CudaFunctors, LeakyReluMatchesTheCpuBackend) {
  const int64_t n = 3, f = 100;
  Graph g({f});
  g.activation(g.input(), "leaky", ActKind::kLeakyRelu, 0.1f);
  std::vector<float> x = ramp(n * f), dy = ramp(n * f, 0.7f);
  const CpuRun cpu = run_cpu(g, n, x, dy);
  std::vector<float> y(x.size()), dx(x.size(), 1.f);
  kernels::host_for_each(1, n * f, kernels::LeakyReluForward{0.1f}, y.data(), static_cast<const float*>(x.data()));
  expect_near(y, cpu.y, 1e-6f, "leaky relu forward");
  kernels::host_for_each(1, n * f, kernels::LeakyReluBackward{0.1f, false}, dx.data(),
                         static_cast<const float*>(dy.data()), static_cast<const float*>(x.data()));
  expect_near(dx, cpu.dx, 1e-6f, "leaky relu backward");
}

TEST(CudaFunctors, ConcatAndLayoutCopiesPlaceEveryElement) {
  // Two inputs of 2 and 3 channels into 5, NCHW: rows of C_i·H·W with pitch 5·H·W.
  const int64_t n = 2, hw = 6;
  std::vector<float> a = ramp(n * 2 * hw), b = ramp(n * 3 * hw, 0.9f), y(static_cast<size_t>(n * 5 * hw), -1.f);
  kernels::host_for_each(1, n * 2 * hw, kernels::CopyRows{2 * hw, 5 * hw, 2 * hw, false}, y.data(),
                         static_cast<const float*>(a.data()));
  kernels::host_for_each(1, n * 3 * hw, kernels::CopyRows{3 * hw, 5 * hw, 3 * hw, false}, y.data() + 2 * hw,
                         static_cast<const float*>(b.data()));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t c = 0; c < 5; ++c)
      for (int64_t i = 0; i < hw; ++i) {
        const float want =
            c < 2 ? a[static_cast<size_t>((s * 2 + c) * hw + i)] : b[static_cast<size_t>((s * 3 + c - 2) * hw + i)];
        ASSERT_EQ(y[static_cast<size_t>((s * 5 + c) * hw + i)], want);
      }
  // NCHW → NHWC → NCHW is the identity.
  std::vector<float> nhwc(y.size()), back(y.size());
  kernels::host_for_each(1, static_cast<int64_t>(y.size()), kernels::ToNhwc{5, hw}, nhwc.data(),
                         static_cast<const float*>(y.data()));
  EXPECT_EQ(nhwc[1], y[static_cast<size_t>(hw)]);  // (n0, h0w0, c1) = (n0, c1, h0w0)
  kernels::host_for_each(1, static_cast<int64_t>(y.size()), kernels::ToNchw{5, hw, false}, back.data(),
                         static_cast<const float*>(nhwc.data()));
  EXPECT_EQ(back, y);
}

TEST(CudaFunctors, TheLossRowsMatchTheCpuBackendsLossAndGradient) {
  const int64_t n = 6, k = 7;
  Graph g({k});
  g.softmax_xent(g.input(), "loss", 0.1f);
  g.materialize(1);
  std::vector<float> z = ramp(n * k);
  std::vector<int32_t> labels{0, 6, 3, 2, 5, 1};
  auto& plan = g.plan(n, Layout::kNCHW, true, true);
  plan.forward(test::view(z, {n, k}), test::labels_view(labels, n), 0, {});
  const float cpu_loss = plan.loss();
  plan.backward({}, [](int, const Event&) {}, {});
  std::vector<float> cpu_dz(z.size());
  plan.read_input_grad(test::view(cpu_dz, {n, k}));
  int32_t bad = 0;
  double sum = 0;
  kernels::host_reduce_into(1, n, kernels::SoftmaxXentLoss{z.data(), labels.data(), k, 0.1f, &bad}, kernels::Plus{},
                            &sum);
  EXPECT_NEAR(sum / n, cpu_loss, 1e-5);
  std::vector<float> dz(z.size());
  kernels::host_for_each(1, n,
                         kernels::SoftmaxXentRows{z.data(), labels.data(), k, 0.1f, dz.data(), 1.f / n, nullptr, &bad});
  expect_near(dz, cpu_dz, 1e-6f, "loss gradient");
  EXPECT_EQ(bad, 0);
  labels[2] = 9;  // outside [0, 7)
  kernels::host_reduce_into(1, n, kernels::SoftmaxXentLoss{z.data(), labels.data(), k, 0.1f, &bad}, kernels::Plus{},
                            &sum);
  EXPECT_EQ(bad, 1);
}

}  // namespace
}  // namespace cohort
