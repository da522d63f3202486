// What of the CUDA backend runs without a GPU: its math policy, its algorithm cache, its
// descriptions of values and windows for cuDNN, and the kernels/ functors its own
// kernels launch, checked here on the host against the CPU backend's results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/algo_cache.h"
#include "backend/cuda/fusion.h"
#include "backend/cuda/step_graphs.h"
#include "backend/cuda/tensor_layout.h"
#include "backend/math_policy.h"
#include "core/status.h"
#include "graph/graph.h"
#include "kernels/batch_norm.h"
#include "kernels/for_each.h"
#include "kernels/layer_ops.h"
#include "kernels/optim_update.h"
#include "kernels/pool.h"
#include "support/host_views.h"
#include "support/temp_dir.h"

#if COHORT_HAVE_CUDA
#  include "backend/cuda/cudnn_util.h"
#endif

namespace cohort {
namespace {

using backend::Layout;
using backend::Tf32;

TEST(MathPolicy, Tf32OnlyWhereTheGpuHasItAndNeverWhenOff) {
  EXPECT_EQ(backend::parse_tf32("auto"), Tf32::kAuto);
  EXPECT_EQ(backend::parse_tf32("off"), Tf32::kOff);
  EXPECT_THROW(backend::parse_tf32("maybe"), Error);
  EXPECT_EQ(backend::parse_cuda_batch_norm("kernels"), backend::CudaBatchNorm::kKernels);
  EXPECT_THROW(backend::parse_cuda_batch_norm("cuDNN"), Error);
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

#if COHORT_HAVE_CUDA
// cuDNN 9's statuses, as errors: out of memory by its device and host codes, every kind
// of "not supported" with its hint, the status's number in every other message.
TEST(CudnnStatus, OutOfMemoryAndUnsupportedKindsAreToldApart) {
  auto thrown = [](cudnnStatus_t rc) -> std::pair<Code, std::string> {
    try {
      backend::cuda::check(rc, "cudnnCall");
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {Code::kOk, ""};
  };
  EXPECT_EQ(thrown(CUDNN_STATUS_SUCCESS).first, Code::kOk);
  const auto device = thrown(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
  EXPECT_EQ(device.first, Code::kOutOfMemory);
  EXPECT_NE(device.second.find("cudnnCall: cuDNN is out of device memory; lower batch_size"), std::string::npos)
      << device.second;
  const auto host = thrown(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED);
  EXPECT_EQ(host.first, Code::kOutOfMemory);
  EXPECT_NE(host.second.find("out of host memory"), std::string::npos) << host.second;
  for (cudnnStatus_t rc : {CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED_SHAPE,
                           CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE}) {
    const auto e = thrown(rc);
    EXPECT_EQ(e.first, Code::kCudnn);
    EXPECT_NE(e.second.find("does not support the shape, layout or data type"), std::string::npos) << e.second;
    EXPECT_NE(e.second.find(cat("(status ", int(rc), ")")), std::string::npos) << e.second;
  }
  const auto bad = thrown(CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(bad.first, Code::kCudnn);
  EXPECT_NE(bad.second.find(cat("cudnnCall failed: ", cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM))), std::string::npos)
      << bad.second;
  EXPECT_EQ(bad.second.find("does not support"), std::string::npos) << bad.second;
}
#endif

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

backend::ConvKey conv_key(int64_t batch, backend::ConvPass pass = backend::ConvPass::kForward) {
  backend::ConvKey k;
  k.pass = pass;
  k.input = {batch, 3, 32, 32};
  k.output = {batch, 16, 32, 32};
  k.filter = {16, 3, 3, 3};
  k.win = {3, 3, 1, 1, 1, 1, 1, 1, false};
  return k;
}

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(AlgoCache, AFileKeepsEachDevicesChoicesForTheNextRun) {
  testing::TempDir dir;
  const auto file = dir.path() / "algorithms.tsv";
  int searched = 0;
  auto search = [&] {
    ++searched;
    return backend::ConvChoice{searched, 1, size_t{1} << 20, 0.25f};
  };
  {
    backend::AlgoCache first;
    first.attach(file, "GPU A\tsm_90 cuDNN 91900");  // a tab in the name becomes a space
    EXPECT_EQ(first.loaded(), 0u);
    first.save();  // nothing searched: no file
    EXPECT_FALSE(std::filesystem::exists(file));
    first.find(conv_key(8), search);
    first.find(conv_key(8, backend::ConvPass::kBackwardFilter), search);
    first.save();
    first.save();  // nothing new
  }
  const std::string written = file_text(file);
  EXPECT_NE(written.find("GPU A sm_90 cuDNN 91900\t" + conv_key(8).text() + "\t1 1 1048576 0.25\n"), std::string::npos)
      << written;
  {
    backend::AlgoCache again;  // the next run on the same device: no search
    again.attach(file, "GPU A sm_90 cuDNN 91900");
    EXPECT_EQ(again.loaded(), 2u);
    EXPECT_EQ(again.find(conv_key(8), search).algo, 1);
    EXPECT_EQ(again.find(conv_key(8, backend::ConvPass::kBackwardFilter), search).algo, 2);
    EXPECT_EQ(again.searches(), 0u);
    EXPECT_EQ(again.hits(), 2u);
    again.save();
    EXPECT_EQ(file_text(file), written);  // nothing searched, nothing rewritten
  }
  backend::AlgoCache other;  // another GPU or cuDNN: its own search, the first's lines kept
  other.attach(file, "GPU B sm_80 cuDNN 91900");
  EXPECT_EQ(other.loaded(), 0u);
  EXPECT_EQ(other.find(conv_key(8), search).algo, 3);
  other.save();
  backend::AlgoCache a, b;
  a.attach(file, "GPU A sm_90 cuDNN 91900");
  b.attach(file, "GPU B sm_80 cuDNN 91900");
  EXPECT_EQ(a.find(conv_key(8), search).algo, 1);
  EXPECT_EQ(b.find(conv_key(8), search).algo, 3);
  EXPECT_EQ(searched, 3);
}

TEST(AlgoCache, TwoWritersOfOneFileKeepBothTheirChoicesAndItsComments) {
  testing::TempDir dir;
  const auto file = dir.path() / "algorithms.tsv";
  write_text(file, "# kept by hand\n\n");
  auto choice = [](int algo) { return [algo] { return backend::ConvChoice{algo, 0, 0, 1.5f}; }; };
  backend::AlgoCache one, two;  // two ranks of one run, each with its own shapes
  one.attach(file, "dev");
  two.attach(file, "dev");
  one.find(conv_key(8), choice(5));
  two.find(conv_key(16), choice(6));
  one.save();
  two.save();  // reads the file again: rank one's line stays
  backend::AlgoCache next;
  next.attach(file, "dev");
  EXPECT_EQ(next.loaded(), 2u);
  EXPECT_EQ(next.find(conv_key(8), choice(0)).algo, 5);
  EXPECT_EQ(next.find(conv_key(16), choice(0)).algo, 6);
  EXPECT_EQ(file_text(file).rfind("# kept by hand\n\n", 0), 0u) << file_text(file);
}

TEST(AlgoCache, ABadLineIsRefusedByFileAndLineAndTheFileStaysAsItWas) {
  testing::TempDir dir;
  const auto file = dir.path() / "algorithms.tsv";
  const std::string good = backend::algo_line("dev", conv_key(8).text(), {1, 0, 64, 0.5f});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"dev only a key", "expected DEVICE<TAB>KEY<TAB>ALGO MATH_TYPE WORKSPACE_BYTES TIME_MS, got 'dev only a key'"},
      {"dev\tkey\t1 0 64", "expected four numbers"},
      {"dev\tkey\t1 -1 64 0.5", "MATH_TYPE must be a whole number from 0 to 2147483647, got '-1'"},
      {"dev\tkey\tx 0 64 0.5", "ALGO must be a whole number from 0 to 2147483647, got 'x'"},
      {"dev\tkey\t1 0 1e3 0.5", "WORKSPACE_BYTES must be a whole number from 0 to 9223372036854775807, got '1e3'"},
      {"dev\tkey\t1 0 64 nan", "TIME_MS must be a number >= 0, got 'nan'"},
      {"\tkey\t1 0 64 0.5", "expected DEVICE<TAB>KEY"},
  };
  for (const auto& [line, why] : bad) {
    SCOPED_TRACE(line);
    write_text(file, "# algorithms\n" + good + "\n" + line + "\n");
    backend::AlgoCache cache;
    try {
      cache.attach(file, "dev");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kCorruptData);
      EXPECT_NE(std::string(e.what()).find("convolution algorithm cache '" + file.string() + "' line 3: " + why),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(file_text(file), "# algorithms\n" + good + "\n" + line + "\n");
  }
  std::string device, key, why;
  backend::ConvChoice c;
  ASSERT_TRUE(backend::parse_algo_line(good, device, key, c, why)) << why;
  EXPECT_EQ(device, "dev");
  EXPECT_EQ(key, conv_key(8).text());
  EXPECT_EQ(c.algo, 1);
  EXPECT_EQ(c.workspace, 64u);
  EXPECT_EQ(c.time_ms, 0.5f);
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

// A value's forms as the CUDA plan stores them: storage type S through codec C, NCHW or
// NHWC. to_form turns an NCHW f32 value into one (kernels::Convert, the plan's casts),
// from_form turns it back.
using kernels::F32;
template <typename S, typename C>
std::vector<S> to_form(const std::vector<float>& x, int64_t c, int64_t hw, bool nhwc) {
  std::vector<S> out(x.size());
  const kernels::Reorder r = nhwc ? kernels::Reorder::kToNhwc : kernels::Reorder::kNone;
  kernels::host_for_each(1, static_cast<int64_t>(x.size()), kernels::Convert<S, C, float, F32>{false, r, c, hw},
                         out.data(), static_cast<const float*>(x.data()));
  return out;
}
template <typename S, typename C>
std::vector<float> from_form(const std::vector<S>& x, int64_t c, int64_t hw, bool nhwc) {
  std::vector<float> out(x.size());
  const kernels::Reorder r = nhwc ? kernels::Reorder::kToNchw : kernels::Reorder::kNone;
  kernels::host_for_each(1, static_cast<int64_t>(x.size()), kernels::Convert<float, F32, S, C>{false, r, c, hw},
                         out.data(), static_cast<const S*>(x.data()));
  return out;
}

// Runs `test(nhwc, tolerance)` for every storage type the CUDA plan uses, in both
// layouts: tolerances are relative to values of magnitude ~2.
template <template <typename, typename> class Test>
void for_every_form() {
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "NHWC" : "NCHW");
    {
      SCOPED_TRACE("f32");
      Test<float, F32>{}(nhwc, 1e-5f);
    }
    {
      SCOPED_TRACE("f16");
      Test<uint16_t, kernels::F16Codec>{}(nhwc, 4e-3f);
    }
    {
      SCOPED_TRACE("bf16");
      Test<uint16_t, kernels::BF16Codec>{}(nhwc, 3e-2f);
    }
  }
}

TEST(CudaFunctors, ConversionsRoundTripAndRoundToTheNearest) {
  const int64_t n = 2, c = 5, hw = 6;
  const std::vector<float> x = ramp(n * c * hw);
  // NCHW → NHWC → NCHW is the identity; (n0, h0w0, c1) is (n0, c1, h0w0).
  const std::vector<float> nhwc = to_form<float, F32>(x, c, hw, true);
  EXPECT_EQ(nhwc[1], x[static_cast<size_t>(hw)]);
  EXPECT_EQ((from_form<float, F32>(nhwc, c, hw, true)), x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ((to_form<uint16_t, kernels::BF16Codec>(x, c, hw, false)[i]), kernels::float_to_bf16(x[i]));
    EXPECT_EQ((to_form<uint16_t, kernels::F16Codec>(x, c, hw, false)[i]), kernels::float_to_half(x[i]));
  }
  // f16 → f32 → f16 is exact; accumulate adds (a cast's gradient sent back).
  const std::vector<uint16_t> h = to_form<uint16_t, kernels::F16Codec>(x, c, hw, true);
  EXPECT_EQ((to_form<uint16_t, kernels::F16Codec>(from_form<uint16_t, kernels::F16Codec>(h, c, hw, true), c, hw, true)),
            h);
  std::vector<float> twice = x;
  kernels::host_for_each(1, n * c * hw, kernels::Convert<float, F32, float, F32>{true}, twice.data(),
                         static_cast<const float*>(x.data()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(twice[i], 2 * x[i]);
}

template <typename S, typename C>
struct PoolTest {
  void operator()(bool nhwc, float tol) const {
    for (bool max : {true, false}) {
      SCOPED_TRACE(max ? "max" : "avg");
      const int64_t n = 2, c = 3, h = 8, w = 9;
      Graph g({c, h, w});
      PoolOptions o{3, 2, 1, true};  // ceil mode: more padding at the bottom and right
      if (max)
        g.max_pool(g.input(), "pool", o);
      else
        g.avg_pool(g.input(), "pool", o);
      const Shape& os = g.shape(1);
      // Inputs exact in bf16 and distinct within any window: the first maximum is the same
      // one in every type.
      std::vector<float> x(static_cast<size_t>(n * c * h * w)), dy = ramp(n * os[0] * os[1] * os[2], 0.11f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 37 % 251) - 128) / 16.f;
      const CpuRun cpu = run_cpu(g, n, x, dy);
      const kernels::PoolGeometry geo{n, c, h, w, os[1], os[2], 3, 3, 2, 2, 1, 1, nhwc};
      const std::vector<S> xs = to_form<S, C>(x, c, h * w, nhwc), dys = to_form<S, C>(dy, c, os[1] * os[2], nhwc);
      std::vector<S> y(cpu.y.size()), dx(x.size());
      std::vector<int32_t> arg(y.size());
      kernels::host_for_each(1, static_cast<int64_t>(y.size()), kernels::PoolForward<S, C>{geo, max}, y.data(),
                             static_cast<const S*>(xs.data()), max ? arg.data() : nullptr);
      expect_near(from_form<S, C>(y, c, os[1] * os[2], nhwc), cpu.y, tol, "pool forward");
      kernels::host_for_each(1, static_cast<int64_t>(dx.size()), kernels::PoolBackward<S, C>{geo, max, false},
                             dx.data(), static_cast<const S*>(dys.data()), static_cast<const int32_t*>(arg.data()));
      expect_near(from_form<S, C>(dx, c, h * w, nhwc), cpu.dx, tol, "pool backward");
    }
  }
};
TEST(CudaFunctors, CeilModePoolingMatchesTheCpuBackendInEveryForm) { for_every_form<PoolTest>(); }

// The pooling functors index in int32 where every index fits (fits_int32) and in int64
// otherwise: both give the same values, argmaxes and gradients.
TEST(CudaFunctors, PoolingIndexesAlikeIn32And64Bits) {
  const int64_t n = 2, c = 3, h = 9, w = 8;
  for (bool nhwc : {false, true})
    for (bool max : {true, false}) {
      SCOPED_TRACE(std::string(nhwc ? "NHWC" : "NCHW") + (max ? " max" : " avg"));
      const kernels::PoolGeometry geo{n, c, h, w, 5, 4, 3, 3, 2, 2, 1, 0, nhwc};
      ASSERT_TRUE(geo.fits_int32());
      const std::vector<float> x = ramp(n * c * h * w), dy = ramp(n * c * 5 * 4, 0.3f);
      const kernels::PoolForward<float, F32> fwd{geo, max};
      const kernels::PoolBackward<float, F32> bwd{geo, max, false};
      std::vector<float> y32(dy.size()), y64(dy.size()), dx32(x.size()), dx64(x.size());
      std::vector<int32_t> arg32(dy.size(), -1), arg64(dy.size(), -1);
      for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i) {
        fwd.run<int32_t>(static_cast<int32_t>(i), y32.data(), x.data(), max ? arg32.data() : nullptr);
        fwd.run<int64_t>(i, y64.data(), x.data(), max ? arg64.data() : nullptr);
      }
      EXPECT_EQ(y32, y64);
      EXPECT_EQ(arg32, arg64);
      for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
        bwd.run<int32_t>(static_cast<int32_t>(i), dx32.data(), dy.data(), arg32.data());
        bwd.run<int64_t>(i, dx64.data(), dy.data(), arg64.data());
      }
      EXPECT_EQ(dx32, dx64);
    }
  // 2^31 indexes or more: int64
  EXPECT_TRUE((kernels::PoolGeometry{1, 1, 46340, 46340, 1, 1, 1, 1, 1, 1, 0, 0}.fits_int32()));   // 2147395600
  EXPECT_FALSE((kernels::PoolGeometry{2, 1, 32768, 32768, 1, 1, 1, 1, 1, 1, 0, 0}.fits_int32()));  // 2^31
  // ResNet-50's max pooling at batch 256: 205,520,896 input indexes
  EXPECT_TRUE((kernels::PoolGeometry{256, 64, 112, 112, 56, 56, 3, 3, 2, 2, 1, 1}.fits_int32()));
}

template <typename S, typename C>
struct ShortcutTest {
  void operator()(bool nhwc, float tol) const {
    const int64_t n = 2, c = 4, h = 6, w = 5;
    Graph g({c, h, w});
    g.shortcut_a(g.input(), "short", 8, 2);
    const Shape& os = g.shape(1);
    std::vector<float> x = ramp(n * c * h * w), dy = ramp(n * os[0] * os[1] * os[2], 0.23f);
    const CpuRun cpu = run_cpu(g, n, x, dy);
    const kernels::ShortcutGeometry geo{c, h, w, os[0], os[1], os[2], 2, (os[0] - c) / 2, nhwc};
    const std::vector<S> xs = to_form<S, C>(x, c, h * w, nhwc), dys = to_form<S, C>(dy, os[0], os[1] * os[2], nhwc);
    std::vector<S> y(cpu.y.size()), dx(x.size());
    kernels::host_for_each(1, static_cast<int64_t>(y.size()), kernels::ShortcutAForward<S, C>{geo}, y.data(),
                           static_cast<const S*>(xs.data()));
    expect_near(from_form<S, C>(y, os[0], os[1] * os[2], nhwc), cpu.y, tol, "shortcut forward");
    kernels::host_for_each(1, static_cast<int64_t>(dx.size()), kernels::ShortcutABackward<S, C>{geo, false}, dx.data(),
                           static_cast<const S*>(dys.data()));
    expect_near(from_form<S, C>(dx, c, h * w, nhwc), cpu.dx, tol, "shortcut backward");
  }
};
TEST(CudaFunctors, ShortcutAMatchesTheCpuBackendInEveryForm) { for_every_form<ShortcutTest>(); }

template <typename S, typename C>
struct DropoutTest {
  void operator()(bool nhwc, float tol) const {
    // An image value: the mask follows the NCHW index in either layout.
    const int64_t n = 3, c = 6, h = 7, w = 9;
    const float p = 0.3f;
    Graph g({c, h, w});
    g.dropout(g.input(), "drop", p);
    g.set_dropout_seed(99);
    std::vector<float> x = ramp(n * c * h * w), dy = ramp(n * c * h * w, 0.05f);
    const CpuRun cpu = run_cpu(g, n, x, dy);
    const uint64_t draws = (uint64_t{5} << 20) ^ 1u;  // run_cpu's step 5, layer 1
    const int64_t ch = nhwc ? c : 0, hw = nhwc ? h * w : 0;
    const std::vector<S> xs = to_form<S, C>(x, c, h * w, nhwc), dys = to_form<S, C>(dy, c, h * w, nhwc);
    std::vector<S> y(x.size()), dx(x.size());
    kernels::host_for_each(2, n * c * h * w, kernels::DropoutForward<S, C>{draws, 99, p, ch, hw}, y.data(),
                           static_cast<const S*>(xs.data()));
    expect_near(from_form<S, C>(y, c, h * w, nhwc), cpu.y, 2 * tol, "dropout forward");
    kernels::host_for_each(2, n * c * h * w, kernels::DropoutBackward<S, C>{draws, 99, p, false, ch, hw}, dx.data(),
                           static_cast<const S*>(dys.data()));
    expect_near(from_form<S, C>(dx, c, h * w, nhwc), cpu.dx, 2 * tol, "dropout backward");
  }
};
TEST(CudaFunctors, DropoutDrawsTheCpuBackendsMaskInEveryForm) { for_every_form<DropoutTest>(); }

// The NHWC batch norm of kernels/batch_norm.h (the CUDA backend's, outside cuDNN's fused
// f16 form) against the CPU backend's, one training step and one inference pass: the
// output, the input's and the parameters' gradients, the running statistics; alone, with
// the relu after it folded in, and with relu(bn(x) + x) folded in (z is the input, so
// its gradient is the batch norm's input gradient plus z's). The values' mean is far
// from zero (the shifted sums must not cancel), and γ, β and the running statistics
// start away from 1, 0, 0 and 1.
enum class Fold { kNone, kRelu, kAddRelu };
template <typename S, typename C>
struct BatchNormTest {
  void operator()(bool nhwc, float tol) const {
    if (!nhwc) return;  // NCHW values go through cuDNN
    for (Fold fold : {Fold::kNone, Fold::kRelu, Fold::kAddRelu}) {
      SCOPED_TRACE(fold == Fold::kNone ? "alone" : fold == Fold::kRelu ? "relu folded" : "add and relu folded");
      run(fold, tol);
    }
  }

  void run(Fold fold, float tol) const {  // tol: for values ~2
    const int64_t n = 3, c = 5, h = 4, w = 7, hw = h * w, rows = n * hw, count = rows * c;
    const float eps = 1e-3f, momentum = 0.3f;
    Graph g({c, h, w});
    const int bn = g.batch_norm(g.input(), "bn", eps, momentum);
    if (fold == Fold::kRelu) g.relu(bn, "relu");
    if (fold == Fold::kAddRelu) g.relu(g.add({bn, g.input()}, "add"), "relu");
    const int out = g.num_layers() - 1;
    g.materialize(1);
    std::vector<float> gamma(c), beta(c), mean0(c), var0(c);
    for (int64_t k = 0; k < c; ++k) {
      gamma[k] = 0.5f + 0.25f * static_cast<float>(k);
      beta[k] = 0.1f * static_cast<float>(k) - 0.2f;
      mean0[k] = 0.05f * static_cast<float>(k);
      var0[k] = 1.f + 0.5f * static_cast<float>(k);
      g.params()[0].value.data_as<float>()[k] = gamma[k];
      g.params()[1].value.data_as<float>()[k] = beta[k];
      g.states()[0].value.data_as<float>()[k] = mean0[k];
      g.states()[1].value.data_as<float>()[k] = var0[k];
    }
    std::vector<float> x = ramp(count), dy = ramp(count, 0.37f);
    // f32: a mean 500 times the spread, where unshifted sums of squares lose the variance;
    // f16 and bf16 store such values too coarsely to normalize them, so 3 to 7 there.
    // (Unshifted sums are 1 % off there; the two backends' roundings of x − mean around
    // 700 differ by 1e-5, hence the f32 tolerance of 1e-4.)
    const float offset = std::is_same_v<S, float> ? 700.f : 3.f;
    if (std::is_same_v<S, float>) tol = 1e-4f;
    for (int64_t i = 0; i < count; ++i) x[static_cast<size_t>(i)] += offset + static_cast<float>(i / hw % c);
    // The CPU reads the values as stored in S (f16 and bf16 round them), so that only the
    // kernels' own rounding differs.
    x = from_form<S, C>(to_form<S, C>(x, c, hw, false), c, hw, false);
    dy = from_form<S, C>(to_form<S, C>(dy, c, hw, false), c, hw, false);
    auto& train = g.plan(n, Layout::kNCHW, true, true);
    train.forward(test::batch_view(x, g, n, Layout::kNCHW), {}, 5, {});
    std::vector<float> cpu_y(x.size()), cpu_dx(x.size());
    train.read(out, test::batch_view(cpu_y, g, n, Layout::kNCHW, out));
    train.backward(test::batch_view(dy, g, n, Layout::kNCHW, out), [](int, const Event&) {}, {});
    train.read_input_grad(test::batch_view(cpu_dx, g, n, Layout::kNCHW));
    auto host = [](const Tensor& t) { return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel()); };
    const std::vector<float> cpu_dgamma = host(g.params()[0].grad), cpu_dbeta = host(g.params()[1].grad);
    const std::vector<float> cpu_mean = host(g.states()[0].value), cpu_var = host(g.states()[1].value);

    const std::vector<S> xs = to_form<S, C>(x, c, hw, true), dys = to_form<S, C>(dy, c, hw, true);
    const S* z = fold == Fold::kAddRelu ? xs.data() : nullptr;
    std::vector<double> sums(static_cast<size_t>(2 * c), 0.0);
    std::vector<float> coef(static_cast<size_t>(4 * c)), saved_mean(c), saved_inv(c), mean = mean0, var = var0;
    std::vector<float> dgamma(c), dbeta(c);
    std::vector<S> y(x.size()), dx(x.size()), dz(x.size());
    // Through the entries the plan calls (5 channels: value by value); the host leaves
    // the GPU's ticket count alone.
    uint32_t tickets = 0;
    kernels::bn_forward_statistics<S, C>(Stream::host(1),
                                         {sums.data(), xs.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                                          saved_mean.data(), saved_inv.data(), coef.data(), rows, c, eps, momentum},
                                         &tickets);
    kernels::bn_affine<S, C>(Stream::host(1), count, c, fold != Fold::kNone, y.data(), xs.data(), coef.data(), z);
    // y + z reaches 10 (tolerances are for values ~2)
    expect_near(from_form<S, C>(y, c, hw, true), cpu_y, z ? tol * 4 : tol, "batch norm forward");
    expect_near(mean, cpu_mean, tol * offset, "running mean");  // relative to the mean
    expect_near(var, cpu_var, tol * 4, "running variance");
    EXPECT_EQ(sums, std::vector<double>(sums.size(), 0.0)) << "the finalize leaves the sums at zero";

    const S* relu_out = fold == Fold::kNone ? nullptr : y.data();
    kernels::bn_backward_statistics<S, C>(Stream::host(1), xs.data(), dys.data(), relu_out,
                                          {sums.data(), gamma.data(), saved_mean.data(), saved_inv.data(),
                                           dgamma.data(), dbeta.data(), coef.data(), rows, c},
                                          &tickets);
    EXPECT_EQ(sums, std::vector<double>(sums.size(), 0.0)) << "the backward finalize leaves the sums at zero";
    EXPECT_EQ(tickets, 0u);
    kernels::bn_backward_data<S, C>(Stream::host(1), count, {c, false, false}, dx.data(), dys.data(), xs.data(),
                                    coef.data(), relu_out, z ? dz.data() : nullptr);
    std::vector<float> input_grad = from_form<S, C>(dx, c, hw, true);
    if (z) {
      const std::vector<float> zg = from_form<S, C>(dz, c, hw, true);
      for (size_t i = 0; i < input_grad.size(); ++i) input_grad[i] += zg[i];
    }
    expect_near(input_grad, cpu_dx, tol, "batch norm backward");
    // sums over 84 rows of values ~2: their error grows with the count
    expect_near(dgamma, cpu_dgamma, tol * 40, "scale gradient");
    expect_near(dbeta, cpu_dbeta, tol * 40, "shift gradient");
    // The plan's aliased case: the batch norm's input is z too (relu(bn(x) + x)), so dx is
    // written and z's gradient added to it in one pass.
    if (z) {
      std::vector<S> one(x.size());
      kernels::host_for_each(1, count, kernels::BnBackwardData<S, C>{c, false, true}, one.data(), dys.data(), xs.data(),
                             static_cast<const float*>(coef.data()), relu_out, one.data());
      expect_near(from_form<S, C>(one, c, hw, true), cpu_dx, tol * 2, "input and z's gradient in one buffer");
    }
    // accumulate adds the same gradients to what is there (here, into one buffer)
    std::vector<S> both = dx;
    kernels::host_for_each(1, count, kernels::BnBackwardData<S, C>{c, true, true}, both.data(), dys.data(), xs.data(),
                           static_cast<const float*>(coef.data()), relu_out, z ? both.data() : nullptr);
    std::vector<float> expect = from_form<S, C>(dx, c, hw, true);
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += input_grad[i];
    expect_near(from_form<S, C>(both, c, hw, true), expect, tol * 2, "accumulated backward");

    // Inference: the running statistics this step left (a relu or add is its own layer there).
    if (fold != Fold::kNone) return;
    auto& infer = g.plan(n, Layout::kNCHW, false);
    infer.forward(test::batch_view(x, g, n, Layout::kNCHW), {}, 6, {});
    infer.read(out, test::batch_view(cpu_y, g, n, Layout::kNCHW, out));
    kernels::host_for_each(
        1, c, kernels::BnInferenceFinalize{gamma.data(), beta.data(), mean.data(), var.data(), coef.data(), c, eps});
    kernels::host_for_each(1, count, kernels::BnAffine<S, C>{c}, y.data(), xs.data(),
                           static_cast<const float*>(coef.data()), static_cast<const S*>(nullptr));
    expect_near(from_form<S, C>(y, c, hw, true), cpu_y, tol, "batch norm inference");
  }
};
TEST(CudaFunctors, NhwcBatchNormMatchesTheCpuBackendInEveryType) { for_every_form<BatchNormTest>(); }

// The packed passes give the scalar ones' bits in every form: with and without the relu,
// z, dx and dz, written and accumulated.
template <typename S, typename C>
void expect_packed_batch_norm_is_scalar() {
  constexpr int kVec = kernels::kPack<S>;
  const int64_t c = 2 * kVec, rows = 13, count = rows * c;
  auto values = [&](float scale, float shift) {
    std::vector<S> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[static_cast<size_t>(i)] = C::store(scale * std::sin(0.37f * static_cast<float>(i)) + shift);
    return v;
  };
  const std::vector<S> x = values(2.f, 0.5f), dy = values(1.f, 0.f), y = values(1.5f, 0.2f), z = values(0.7f, -0.1f);
  std::vector<float> coef(static_cast<size_t>(4 * c));
  for (size_t k = 0; k < coef.size(); ++k) coef[k] = 0.3f + 0.11f * static_cast<float>(k % 17) - 0.05f * (k % 3);
  auto same = [](const std::vector<S>& a, const std::vector<S>& b, const char* what) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(S)), 0) << what;
  };
  for (bool relu : {false, true})
    for (const S* zp : {static_cast<const S*>(nullptr), z.data()}) {
      SCOPED_TRACE(std::string(relu ? "relu" : "no relu") + (zp ? ", z" : ""));
      std::vector<S> a(x.size()), b(x.size());
      kernels::host_for_each(1, count, kernels::BnAffine<S, C>{c, relu}, a.data(), x.data(), coef.data(), zp);
      kernels::host_for_each(1, count / kVec, kernels::BnAffinePacked<S, C>{c, relu}, b.data(), x.data(), coef.data(),
                             zp);
      same(a, b, "affine");
      std::vector<S> chosen(x.size());  // the entry the plan calls: packed here
      kernels::bn_affine<S, C>(Stream::host(1), count, c, relu, chosen.data(), x.data(), coef.data(), zp);
      same(a, chosen, "bn_affine");
    }
  for (const S* yp : {static_cast<const S*>(nullptr), y.data()})
    for (bool want_dx : {false, true})
      for (bool want_dz : {false, true})
        for (bool acc : {false, true}) {
          SCOPED_TRACE(std::string(yp ? "relu" : "no relu") + (want_dx ? ", dx" : "") + (want_dz ? ", dz" : "") +
                       (acc ? ", accumulated" : ""));
          std::vector<S> dx_a = values(0.4f, 0.1f), dz_a = values(0.3f, -0.2f), dx_b = dx_a, dz_b = dz_a;
          kernels::host_for_each(1, count, kernels::BnBackwardData<S, C>{c, acc, !acc}, want_dx ? dx_a.data() : nullptr,
                                 dy.data(), x.data(), coef.data(), yp, want_dz ? dz_a.data() : nullptr);
          kernels::host_for_each(1, count / kVec, kernels::BnBackwardDataPacked<S, C>{c, acc, !acc},
                                 want_dx ? dx_b.data() : nullptr, dy.data(), x.data(), coef.data(), yp,
                                 want_dz ? dz_b.data() : nullptr);
          same(dx_a, dx_b, "input gradient");
          std::vector<S> dx_c = values(0.4f, 0.1f), dz_c = values(0.3f, -0.2f);
          kernels::bn_backward_data<S, C>(Stream::host(1), count, {c, acc, !acc}, want_dx ? dx_c.data() : nullptr,
                                          dy.data(), x.data(), coef.data(), yp, want_dz ? dz_c.data() : nullptr);
          same(dx_a, dx_c, "bn_backward_data's input gradient");
          same(dz_a, dz_c, "bn_backward_data's z gradient");
          same(dz_a, dz_b, "z's gradient");
        }
  // Where packs do not fit: channels not a multiple of the pack, a pointer off 16 bytes.
  EXPECT_TRUE(kernels::packs_fit<S>(c, {x.data(), coef.data(), nullptr}));
  EXPECT_FALSE(kernels::packs_fit<S>(c + kVec / 2, {x.data()}));
  EXPECT_FALSE(kernels::packs_fit<S>(c, {x.data(), x.data() + 1}));
}

// Which batch norms cuDNN's BN-Ex form takes under each choice of cuda_batch_norm.
TEST(Fusion, BnExOnlyForF16ImagesInTrainingAsTheOptionChooses) {
  using backend::CudaBatchNorm;
  using backend::cuda::uses_bn_ex;
  const Shape image = {64, 7, 7}, odd = {6, 7, 7}, features = {64};
  for (bool fused : {false, true}) {
    EXPECT_EQ(uses_bn_ex(CudaBatchNorm::kAuto, fused, true, DType::kF16, image), fused);
    EXPECT_FALSE(uses_bn_ex(CudaBatchNorm::kKernels, fused, true, DType::kF16, image));
    EXPECT_TRUE(uses_bn_ex(CudaBatchNorm::kCudnn, fused, true, DType::kF16, image));
    for (CudaBatchNorm c : {CudaBatchNorm::kAuto, CudaBatchNorm::kCudnn}) {
      EXPECT_FALSE(uses_bn_ex(c, true, false, DType::kF16, image)) << "inference";
      EXPECT_FALSE(uses_bn_ex(c, true, true, DType::kBF16, image)) << "bf16";
      EXPECT_FALSE(uses_bn_ex(c, true, true, DType::kF32, image)) << "f32";
      EXPECT_FALSE(uses_bn_ex(c, true, true, DType::kF16, odd)) << "6 channels";
      EXPECT_FALSE(uses_bn_ex(c, true, true, DType::kF16, features)) << "features";
    }
  }
}

// The packed channel sums' maps give the scalar maps' values bit for bit, and their host
// sums equal host_channel_sums'.
// bn_forward_statistics and bn_backward_statistics (packed here) give what the scalar
// sums and a finalize per channel give, to the bit, and leave the sums at zero.
template <typename S, typename C>
void expect_statistics_entries_are_sums_then_finalize(int64_t rows, int64_t c, const std::vector<S>& x,
                                                      const std::vector<S>& dy, const std::vector<float>& mean,
                                                      const S* y) {
  struct Out {
    std::vector<double> sums;
    std::vector<float> run_mean, run_var, saved_mean, saved_inv, coef, dgamma, dbeta;
  };
  const size_t n = static_cast<size_t>(c);
  const std::vector<float> gamma(n, 1.5f), beta(n, -0.25f);
  auto fresh = [&] {
    return Out{std::vector<double>(2 * n, 0.0), std::vector<float>(n, 0.1f), std::vector<float>(n, 1.f),
               std::vector<float>(n),           std::vector<float>(n),       std::vector<float>(4 * n),
               std::vector<float>(n),           std::vector<float>(n)};
  };
  auto forward = [&](Out& o) {
    return kernels::BnForwardFinalize<S, C>{o.sums.data(),
                                            x.data(),
                                            gamma.data(),
                                            beta.data(),
                                            o.run_mean.data(),
                                            o.run_var.data(),
                                            o.saved_mean.data(),
                                            o.saved_inv.data(),
                                            o.coef.data(),
                                            rows,
                                            c,
                                            1e-5f,
                                            0.1f};
  };
  auto backward = [&](Out& o) {
    return kernels::BnBackwardFinalize{o.sums.data(),
                                       gamma.data(),
                                       mean.data(),
                                       o.saved_inv.data(),
                                       o.dgamma.data(),
                                       o.dbeta.data(),
                                       o.coef.data(),
                                       rows,
                                       c};
  };
  Out want = fresh(), got = fresh();
  kernels::host_channel_sums(1, rows, c, kernels::BnStats<S, C>{x.data(), c}, want.sums.data());
  kernels::host_for_each(1, c, forward(want));
  uint32_t tickets = 0;
  kernels::bn_forward_statistics<S, C>(Stream::host(2), forward(got), &tickets);
  EXPECT_EQ(got.coef, want.coef);
  EXPECT_EQ(got.saved_inv, want.saved_inv);
  EXPECT_EQ(got.run_var, want.run_var);
  kernels::host_channel_sums(1, rows, c, kernels::BnGradStats<S, C>{x.data(), dy.data(), mean.data(), c, y},
                             want.sums.data());
  kernels::host_for_each(1, c, backward(want));
  kernels::bn_backward_statistics<S, C>(Stream::host(2), x.data(), dy.data(), y, backward(got), &tickets);
  EXPECT_EQ(got.coef, want.coef);
  EXPECT_EQ(got.dgamma, want.dgamma);
  EXPECT_EQ(got.dbeta, want.dbeta);
  EXPECT_EQ(got.sums, std::vector<double>(2 * n, 0.0));
  EXPECT_EQ(tickets, 0u);
}

template <typename S, typename C>
void expect_packed_sums_are_scalar() {
  constexpr int kVec = kernels::kPack<S>;
  const int64_t c = 3 * kVec, rows = 150, count = rows * c;
  std::vector<S> x(static_cast<size_t>(count)), dy(x.size()), y(x.size());
  for (int64_t i = 0; i < count; ++i) {
    const float f = static_cast<float>(i);
    x[static_cast<size_t>(i)] = C::store(3.f + std::sin(0.13f * f));
    dy[static_cast<size_t>(i)] = C::store(std::cos(0.29f * f));
    y[static_cast<size_t>(i)] = C::store(std::sin(0.41f * f));
  }
  std::vector<float> mean(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) mean[static_cast<size_t>(k)] = 3.f + 0.01f * static_cast<float>(k);
  for (const S* yp : {static_cast<const S*>(nullptr), static_cast<const S*>(y.data())}) {
    SCOPED_TRACE(yp ? "relu folded" : "alone");
    const kernels::BnStats<S, C> stats{x.data(), c};
    const kernels::BnStatsPacked<S, C> stats_p{x.data(), c};
    const kernels::BnGradStats<S, C> grads{x.data(), dy.data(), mean.data(), c, yp};
    const kernels::BnGradStatsPacked<S, C> grads_p{x.data(), dy.data(), mean.data(), c, yp};
    for (int64_t r : {int64_t{0}, int64_t{1}, rows - 1})
      for (int64_t p = 0; p < c / kVec; ++p) {
        float a[kVec], b[kVec], ga[kVec], gb[kVec];
        stats_p(r, p * kVec, a, b);
        grads_p(r, p * kVec, ga, gb);
        for (int j = 0; j < kVec; ++j) {
          float u, v, gu, gv;
          stats(r, p * kVec + j, u, v);
          grads(r, p * kVec + j, gu, gv);
          EXPECT_EQ(std::memcmp(&u, &a[j], 4) | std::memcmp(&v, &b[j], 4), 0) << "stats, row " << r;
          EXPECT_EQ(std::memcmp(&gu, &ga[j], 4) | std::memcmp(&gv, &gb[j], 4), 0) << "gradient stats, row " << r;
        }
      }
    kernels::BnSumsLayout l;
    ASSERT_TRUE(kernels::bn_sums_layout(rows, c, kVec, l));
    std::vector<double> want(static_cast<size_t>(2 * c), 0.5), got = want;  // sums add to what is there
    kernels::host_channel_sums(2, rows, c, grads, want.data());
    kernels::channel_sums_packed<kVec>(Stream::host(2), rows, c, l, grads_p, got.data());
    EXPECT_EQ(got, want);
    got.assign(got.size(), 0.5);  // the entries the plan calls: packed here
    kernels::bn_grad_sums<S, C>(Stream::host(2), rows, c, x.data(), dy.data(), mean.data(), yp, got.data());
    EXPECT_EQ(got, want);
    want.assign(want.size(), 0.0);
    got.assign(got.size(), 0.0);
    kernels::host_channel_sums(2, rows, c, stats, want.data());
    kernels::bn_stats_sums<S, C>(Stream::host(2), rows, c, x.data(), got.data());
    EXPECT_EQ(got, want);
    expect_statistics_entries_are_sums_then_finalize<S, C>(rows, c, x, dy, mean, yp);
  }
}

TEST(CudaFunctors, PackedChannelSumsGiveTheScalarSums) {
  expect_packed_sums_are_scalar<float, F32>();
  expect_packed_sums_are_scalar<uint16_t, kernels::F16Codec>();
  expect_packed_sums_are_scalar<uint16_t, kernels::BF16Codec>();
}

// Walks every block and thread of the packed channel sums' layout as the CUDA kernel runs
// them: each (row, pack) is summed by exactly one thread, and each thread's sums are
// totalled once per value of its pack by the thread that owns that channel.
TEST(CudaFunctors, PackedChannelSumsLayoutCoversEveryValueOnce) {
  struct Case {
    int64_t rows, channels;
    int vec;
  };
  for (Case k :
       {Case{1000, 64, 8}, Case{77, 256, 8}, Case{3, 2048, 8}, Case{513, 16, 4}, Case{130, 96, 4}, Case{5, 8, 8}}) {
    SCOPED_TRACE(::testing::Message() << k.rows << " rows, " << k.channels << " channels, packs of " << k.vec);
    kernels::BnSumsLayout l;
    ASSERT_TRUE(kernels::bn_sums_layout(k.rows, k.channels, k.vec, l));
    EXPECT_EQ(l.row_lanes * l.q, 256);
    std::vector<int> seen(static_cast<size_t>(k.rows * l.packs), 0);
    for (unsigned bx = 0; bx < l.grid_x; ++bx)
      for (unsigned by = 0; by < l.grid_y; ++by) {
        std::vector<int64_t> pack_of(256, -1);
        for (unsigned ty = 0; ty < 8; ++ty)
          for (unsigned tx = 0; tx < 32; ++tx) {
            const kernels::BnSumsShare s = kernels::bn_sums_share(l, k.rows, bx, by, tx, ty);
            pack_of[ty * 32 + tx] = s.pack;
            if (s.pack < 0) continue;
            EXPECT_EQ(s.stride, l.row_lanes);
            for (int64_t r = s.first; r < s.end; r += s.stride) ++seen[static_cast<size_t>(r * l.packs + s.pack)];
          }
        // The kernel's totals: thread t < q·vec reads lanes t / vec + m·q of each warp.
        for (int t = 0; t < l.q * k.vec; ++t) {
          const int pq = t / k.vec;
          const int64_t pack = static_cast<int64_t>(bx) * l.q + pq;
          for (int y = 0; y < 8; ++y)
            for (int x = pq; x < 32; x += l.q)
              EXPECT_EQ(pack_of[static_cast<size_t>(y * 32 + x)], pack < l.packs ? pack : -1)
                  << "a total reads a thread of another pack";
        }
      }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "row " << i / l.packs << ", pack " << i % l.packs;
  }
  kernels::BnSumsLayout l;
  EXPECT_FALSE(kernels::bn_sums_layout(10, 6, 8, l));  // not whole packs
  ASSERT_TRUE(kernels::bn_sums_layout(10, 24, 8, l));  // 3 packs a row: 2 lanes of packs, 16 of rows
  EXPECT_EQ(l.q, 2);
  EXPECT_EQ(l.grid_x, 2u);
  // Rows beyond 65535 blocks of rows: longer runs per thread, still every row.
  ASSERT_TRUE(kernels::bn_sums_layout(int64_t{1} << 31, 64, 8, l));
  EXPECT_LE(l.grid_y, 65535u);
  EXPECT_GE(static_cast<int64_t>(l.grid_y) * l.rows_per_block, int64_t{1} << 31);
  EXPECT_EQ(l.rows_per_block % l.row_lanes, 0);
}

TEST(CudaFunctors, PackedBatchNormPassesGiveTheScalarPassesBits) {
  expect_packed_batch_norm_is_scalar<float, F32>();
  expect_packed_batch_norm_is_scalar<uint16_t, kernels::F16Codec>();
  expect_packed_batch_norm_is_scalar<uint16_t, kernels::BF16Codec>();
  EXPECT_TRUE(kernels::packs_fit<float>(12, {}));      // 3 packs of 4 f32
  EXPECT_FALSE(kernels::packs_fit<uint16_t>(12, {}));  // 8 f16 to a pack
}

// The packed pooling passes give the value-by-value ones' bits (maxima among ties,
// first-maximum records, averages, gradients written and accumulated) for NHWC windows
// of every kind: 3×3 stride 2 with padding, in floor and ceil mode, 2×2 stride 2, and a
// global average; pool_forward and pool_backward take the packed path there.
template <typename S, typename C>
void expect_packed_pooling_is_scalar() {
  constexpr int kVec = kernels::kPack<S>;
  const int64_t n = 2, c = 2 * kVec;
  struct Win {
    int64_t h, w, oh, ow;
    int k, s, p;
  };
  for (const Win& v :
       {Win{9, 8, 5, 4, 3, 2, 1}, Win{8, 8, 5, 5, 3, 2, 1}, Win{8, 8, 4, 4, 2, 2, 0}, Win{7, 7, 1, 1, 7, 7, 0}})
    for (bool max : {true, false}) {
      SCOPED_TRACE(::testing::Message() << v.h << "x" << v.w << " window " << v.k << " stride " << v.s
                                        << (max ? " max" : " avg"));
      const kernels::PoolGeometry geo{n, c, v.h, v.w, v.oh, v.ow, v.k, v.k, v.s, v.s, v.p, v.p, true};
      const int64_t nx = n * c * v.h * v.w, ny = n * c * v.oh * v.ow;
      std::vector<S> x(static_cast<size_t>(nx)), dy(static_cast<size_t>(ny));
      for (int64_t i = 0; i < nx; ++i) x[static_cast<size_t>(i)] = C::store(static_cast<float>(i * 7 % 5) - 2.f);
      for (int64_t i = 0; i < ny; ++i) dy[static_cast<size_t>(i)] = C::store(0.25f * static_cast<float>(i % 9) - 1.f);
      std::vector<S> y1(dy.size()), y2(dy.size()), y3(dy.size());
      std::vector<int32_t> arg1(dy.size(), -1), arg2(dy.size(), -1), arg3(dy.size(), -1);
      int32_t* a1 = max ? arg1.data() : nullptr;
      int32_t* a2 = max ? arg2.data() : nullptr;
      kernels::host_for_each(1, ny, kernels::PoolForward<S, C>{geo, max}, y1.data(), static_cast<const S*>(x.data()),
                             a1);
      kernels::host_for_each(1, ny / kVec, kernels::PoolForward<S, C, kVec>{geo, max}, y2.data(),
                             static_cast<const S*>(x.data()), a2);
      ASSERT_TRUE(kernels::packs_fit<S>(c, {y3.data(), x.data(), arg3.data()}));  // the entries' packed path
      kernels::pool_forward<S, C>(Stream::host(2), geo, max, y3.data(), x.data(), max ? arg3.data() : nullptr);
      EXPECT_EQ(y1, y2);
      EXPECT_EQ(y1, y3);
      EXPECT_EQ(arg1, arg2);
      EXPECT_EQ(arg1, arg3);
      for (bool accumulate : {false, true}) {
        std::vector<S> dx1(x.size(), C::store(0.5f)), dx2 = dx1, dx3 = dx1;
        kernels::host_for_each(1, nx, kernels::PoolBackward<S, C>{geo, max, accumulate}, dx1.data(),
                               static_cast<const S*>(dy.data()), static_cast<const int32_t*>(a1));
        kernels::host_for_each(1, nx / kVec, kernels::PoolBackward<S, C, kVec>{geo, max, accumulate}, dx2.data(),
                               static_cast<const S*>(dy.data()), static_cast<const int32_t*>(a1));
        kernels::pool_backward<S, C>(Stream::host(2), geo, max, accumulate, dx3.data(), dy.data(), a1);
        EXPECT_EQ(dx1, dx2) << (accumulate ? "accumulated" : "written");
        EXPECT_EQ(dx1, dx3) << (accumulate ? "accumulated" : "written");
      }
    }
}

TEST(CudaFunctors, PackedPoolingGivesTheScalarPoolingsBits) {
  expect_packed_pooling_is_scalar<float, F32>();
  expect_packed_pooling_is_scalar<uint16_t, kernels::F16Codec>();
  expect_packed_pooling_is_scalar<uint16_t, kernels::BF16Codec>();
}

// A channel in 32 bits below 2^32 and in 64 above, the same either way.
TEST(CudaFunctors, ChannelOfAnElementInEitherWidth) {
  for (int64_t i : {int64_t{0}, int64_t{63}, (int64_t{1} << 32) - 1, int64_t{1} << 32, (int64_t{1} << 33) + 5})
    for (int64_t c : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{2048}}) EXPECT_EQ(kernels::channel_of(i, c), i % c);
}

// Split across a host team, the channel sums count each channel once, as one thread does.
TEST(CudaFunctors, ChannelSumsOnATeamAddEveryChannelOnce) {
  // c · kBnRowsPerThread units: enough for a team of 2, whose halves split channel 150
  const int64_t rows = 130, c = 301;
  ASSERT_GE(c * kernels::kBnRowsPerThread, kernels::kSerialBelow);
  const std::vector<float> x = ramp(rows * c);
  std::vector<double> one(static_cast<size_t>(2 * c), 1.0), team = one;
  kernels::host_channel_sums(1, rows, c, kernels::BnStats<float, F32>{x.data(), c}, one.data());
  kernels::host_channel_sums(2, rows, c, kernels::BnStats<float, F32>{x.data(), c}, team.data());
  EXPECT_EQ(one, team);
  double first = 1;  // channel 0: Σ (x − x[0]) over the rows, added to the 1 there
  for (int64_t r = 0; r < rows; ++r) first += static_cast<double>(x[static_cast<size_t>(r * c)] - x[0]);
  EXPECT_NEAR(one[0], first, 1e-3);
}

TEST(CudaFunctors, EveryActivationMatchesTheCpuBackend) {
  const int64_t n = 3, f = 100;
  struct Case {
    ActKind kind;
    kernels::Act act;
    float alpha;
  };
  for (const Case& k :
       {Case{ActKind::kRelu, kernels::Act::kRelu, 0.f}, Case{ActKind::kLeakyRelu, kernels::Act::kRelu, 0.1f},
        Case{ActKind::kElu, kernels::Act::kElu, 0.7f}, Case{ActKind::kTanh, kernels::Act::kTanh, 0.f},
        Case{ActKind::kSigmoid, kernels::Act::kSigmoid, 0.f}}) {
    SCOPED_TRACE(static_cast<int>(k.kind));
    Graph g({f});
    g.activation(g.input(), "act", k.kind, k.alpha);
    std::vector<float> x = ramp(n * f), dy = ramp(n * f, 0.7f);
    const CpuRun cpu = run_cpu(g, n, x, dy);
    std::vector<float> y(x.size()), dx(x.size(), 1.f);
    kernels::host_for_each(1, n * f, kernels::ActForward<float, F32>{k.act, k.alpha}, y.data(),
                           static_cast<const float*>(x.data()));
    expect_near(y, cpu.y, 2e-6f, "activation forward");
    kernels::host_for_each(1, n * f, kernels::ActBackward<float, F32>{k.act, k.alpha, false}, dx.data(),
                           static_cast<const float*>(dy.data()), static_cast<const float*>(x.data()),
                           static_cast<const float*>(y.data()));
    expect_near(dx, cpu.dx, 2e-6f, "activation backward");
    // bf16 storage: the same math on rounded values.
    const std::vector<uint16_t> xb = to_form<uint16_t, kernels::BF16Codec>(x, f, 1, false);
    std::vector<uint16_t> yb(x.size());
    kernels::host_for_each(1, n * f, kernels::ActForward<uint16_t, kernels::BF16Codec>{k.act, k.alpha}, yb.data(),
                           static_cast<const uint16_t*>(xb.data()));
    expect_near(from_form<uint16_t, kernels::BF16Codec>(yb, f, 1, false), cpu.y, 3e-2f, "bf16 activation");
  }
}

TEST(CudaFunctors, ConcatRowsPlaceEveryElementInEitherLayout) {
  // Two inputs of 2 and 3 channels into 5. NCHW: rows of C_i·H·W with pitch 5·H·W;
  // NHWC: rows of C_i with pitch 5.
  const int64_t n = 2, hw = 6;
  const std::vector<float> a = ramp(n * 2 * hw), b = ramp(n * 3 * hw, 0.9f);
  auto want = [&](int64_t s, int64_t c, int64_t i) {
    return c < 2 ? a[static_cast<size_t>((s * 2 + c) * hw + i)] : b[static_cast<size_t>((s * 3 + c - 2) * hw + i)];
  };
  std::vector<float> y(static_cast<size_t>(n * 5 * hw), -1.f);
  kernels::host_for_each(1, n * 2 * hw, kernels::CopyRows<float, F32>{2 * hw, 5 * hw, 2 * hw, false}, y.data(),
                         static_cast<const float*>(a.data()));
  kernels::host_for_each(1, n * 3 * hw, kernels::CopyRows<float, F32>{3 * hw, 5 * hw, 3 * hw, false}, y.data() + 2 * hw,
                         static_cast<const float*>(b.data()));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t c = 0; c < 5; ++c)
      for (int64_t i = 0; i < hw; ++i) ASSERT_EQ(y[static_cast<size_t>((s * 5 + c) * hw + i)], want(s, c, i));
  const std::vector<float> an = to_form<float, F32>(a, 2, hw, true), bn = to_form<float, F32>(b, 3, hw, true);
  std::vector<float> yn(y.size(), -1.f);
  kernels::host_for_each(1, n * 2 * hw, kernels::CopyRows<float, F32>{2, 5, 2, false}, yn.data(),
                         static_cast<const float*>(an.data()));
  kernels::host_for_each(1, n * 3 * hw, kernels::CopyRows<float, F32>{3, 5, 3, false}, yn.data() + 2,
                         static_cast<const float*>(bn.data()));
  EXPECT_EQ((from_form<float, F32>(yn, 5, hw, true)), y);
}

TEST(CudaFunctors, WeightCopiesAndBiasesPlaceEveryElement) {
  // OIHW → KRSC (OHWI) and the gradient back: element (o, c, r) of the master lands at
  // (o, r, c) of the copy, and the round trip is the identity.
  const int64_t k = 4, c = 3, rs = 9;
  const std::vector<float> w = ramp(k * c * rs);
  std::vector<float> krsc(w.size()), back(w.size());
  kernels::host_for_each(1, k * c * rs, kernels::WeightsFromOihw<float, F32>{k, c, rs, true}, krsc.data(),
                         static_cast<const float*>(w.data()));
  EXPECT_EQ(krsc[static_cast<size_t>((2 * rs + 5) * c + 1)], w[static_cast<size_t>((2 * c + 1) * rs + 5)]);
  kernels::host_for_each(1, k * c * rs, kernels::GradToOihw<float, F32>{k, c, rs, true}, back.data(),
                         static_cast<const float*>(krsc.data()));
  EXPECT_EQ(back, w);
  std::vector<uint16_t> half(w.size());
  kernels::host_for_each(1, k * c * rs, kernels::WeightsFromOihw<uint16_t, kernels::F16Codec>{k, c, rs, false},
                         half.data(), static_cast<const float*>(w.data()));
  EXPECT_EQ(half[7], kernels::float_to_half(w[7]));
  // Per-channel bias: channel of element i in NCHW (pixels 6) and NHWC.
  const std::vector<float> bias{10.f, 20.f, 30.f};
  std::vector<float> nchw(2 * 3 * 6, 0.f), nhwc(nchw.size(), 0.f);
  kernels::host_for_each(1, 36, kernels::AddBias<float, F32>{3, 6}, nchw.data(),
                         static_cast<const float*>(bias.data()));
  kernels::host_for_each(1, 36, kernels::AddBias<float, F32>{3, 0}, nhwc.data(),
                         static_cast<const float*>(bias.data()));
  EXPECT_EQ(nchw[7], 20.f);   // (n0, c1, p1)
  EXPECT_EQ(nchw[20], 10.f);  // (n1, c0, p2)
  EXPECT_EQ(nhwc[7], 20.f);   // (n0, p2, c1)
  EXPECT_EQ((to_form<float, F32>(nchw, 3, 6, true)), nhwc);
}

// The layout indexes divide in 32 bits where the operands fit and in 64 bits beyond:
// both give the same quotients, and the NCHW and NHWC indexes undo each other on either
// side of 2^32 (weights' OIHW ↔ OHWI orders are the same with the kernel pixels as hw).
TEST(CudaFunctors, LayoutIndexesAgreeOnEitherSideOf32Bits) {
  const int64_t k32 = int64_t{1} << 32;
  for (int64_t a : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{123456789}, k32 - 1, k32, k32 + 5, 3 * k32 + 17})
    for (int64_t b : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{4093}, k32 - 1, k32 + 3}) {
      const kernels::DivMod d = kernels::div_mod(a, b);
      EXPECT_EQ(d.q, a / b) << a << " / " << b;
      EXPECT_EQ(d.r, a % b) << a << " % " << b;
    }
  for (const auto& [c, hw] : {std::pair<int64_t, int64_t>{3, 9}, {64, 3136}, {2048, 1}, {5, k32 / 4 + 1}}) {
    const int64_t n = 4, total = n * c * hw;
    for (int64_t i : {int64_t{0}, int64_t{1}, c * hw - 1, total / 2 + 3, total - 1, k32 - 1, k32, k32 + 11}) {
      if (i >= total) continue;
      const int64_t j = kernels::nchw_index(i, c, hw);
      ASSERT_TRUE(j >= 0 && j < total) << i;
      EXPECT_EQ(kernels::nhwc_index(j, c, hw), i) << "c " << c << ", hw " << hw << ", i " << i;
      // The 64-bit formula: channel i % c, pixel (i / c) % hw, sample i / (c·hw).
      EXPECT_EQ(j, (i / (c * hw) * c + i % c) * hw + (i / c) % hw) << i;
    }
  }
  // The option-A shortcut's coordinates: in range, and back to the same flat index.
  for (bool nhwc : {false, true}) {
    kernels::ShortcutGeometry g{};
    g.nhwc = nhwc;
    for (const auto& [c_, h_, w_] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {64, 56, 56}, {5, 65537, 65537}})
      for (int64_t i : {int64_t{0}, int64_t{1}, c_ * h_ * w_ - 1, c_ * h_ * w_ + 2, k32 - 1, k32, k32 + 12345}) {
        int64_t n = -1, c = -1, h = -1, w = -1;
        g.coords(i, c_, h_, w_, n, c, h, w);
        EXPECT_TRUE(n >= 0 && c >= 0 && c < c_ && h >= 0 && h < h_ && w >= 0 && w < w_) << i;
        EXPECT_EQ(g.at(n, c, h, w, c_, h_, w_), i) << (nhwc ? "NHWC " : "NCHW ") << c_ << "x" << h_ << "x" << w_;
      }
  }
}

// The loss kernels' work on the host: each row over `lanes` lanes, the parts combined as
// the warps combine them (the max, then lane 0's sums); the rows' losses summed in order.
double lane_losses(const kernels::SoftmaxXentLanes& f, int64_t n, int lanes) {
  double total = 0;
  for (int64_t row = 0; row < n; ++row) {
    float mx = -INFINITY;
    for (int l = 0; l < lanes; ++l) mx = std::max(mx, f.max_part(row, l, lanes));
    double sum = 0, loss = 0;
    for (int l = 0; l < lanes; ++l) sum += f.sum_part(row, l, lanes, mx);
    for (int l = 0; l < lanes; ++l) loss += f.loss_part(row, l, lanes, mx, std::log(sum));
    total += loss;
  }
  return total;
}

TEST(CudaFunctors, TheLossLanesMatchTheCpuBackendsLossAndGradient) {
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
  std::vector<float> dz(z.size());
  const kernels::SoftmaxXentLanes f{z.data(), labels.data(), k, 0.1f, dz.data(), 1.f / n, &bad};
  EXPECT_NEAR(lane_losses(f, n, 32) / n, cpu_loss, 1e-5);
  expect_near(dz, cpu_dz, 1e-6f, "loss gradient");
  EXPECT_EQ(bad, 0);
  labels[2] = 9;  // outside [0, 7)
  lane_losses(f, n, 32);
  EXPECT_EQ(bad, 1);
}

// However a row is spread over lanes (more than its classes, or fewer), the parts give
// the row's loss and gradient; a bad label gives a row of zeros.
TEST(CudaFunctors, TheLossLanesCombineIntoEachRowsLossAndGradient) {
  for (const int64_t k : {int64_t{7}, int64_t{70}, int64_t{1000}}) {
    const int64_t n = 5;
    std::vector<float> z(static_cast<size_t>(n * k));
    for (size_t i = 0; i < z.size(); ++i) z[i] = std::sin(0.37f * static_cast<float>(i)) * 4.f;
    const std::vector<int32_t> labels{0, static_cast<int32_t>(k - 1), 3, -1, static_cast<int32_t>(k)};  // two bad
    std::vector<float> want(z.size(), 0.f);
    double want_loss = 0;
    for (int64_t row = 0; row < 3; ++row)
      want_loss += kernels::softmax_xent_row(z.data() + row * k, k, labels[static_cast<size_t>(row)], 0.1f,
                                             want.data() + row * k, 0.25f);
    for (const int lanes : {32, 3}) {
      int32_t bad = 0;
      std::vector<float> dz(z.size(), 99.f);
      const kernels::SoftmaxXentLanes f{z.data(), labels.data(), k, 0.1f, dz.data(), 0.25f, &bad};
      EXPECT_NEAR(lane_losses(f, n, lanes), want_loss, 1e-5 * want_loss) << "k " << k << ", " << lanes << " lanes";
      expect_near(dz, want, 1e-7f, "loss gradient over lanes");
      EXPECT_EQ(bad, 1);
    }
  }
}

// The CUDA plan folds a relu into the batch norm before it where both compute NHWC
// images in training and the relu is the batch norm's only consumer (the batch norm runs
// cuDNN's fused form for f16 with C % 4 == 0, kernels/batch_norm.h's otherwise).
TEST(CudaFusion, AReluFoldsIntoItsBatchNormWhereBothComputeNhwcImagesInTraining) {
  Graph g({8, 6, 6});
  const int conv = g.conv(g.input(), "conv", 8, ConvOptions{3, 3, 1, 1, 1, 1, false});
  const int bn1 = g.batch_norm(conv, "bn1");
  const int relu1 = g.relu(bn1, "relu1");  // fuses
  const int bn2 = g.batch_norm(relu1, "bn2");
  const int relu2 = g.relu(bn2, "relu2");  // bn2 also feeds the add: no fusion
  const int sum = g.add({bn2, relu2}, "add");
  const int narrow = g.conv(sum, "narrow", 6, ConvOptions{1, 1, 1, 0, 1, 1, false});
  const int bn3 = g.batch_norm(narrow, "bn3");
  const int relu3 = g.relu(bn3, "relu3");  // 6 channels: kernels/batch_norm.h's fused form (cuDNN's needs 4k)
  g.relu(g.batch_norm(g.flatten(relu3, "flat"), "bn4"), "relu4");  // [N, F]: not an NHWC image
  const size_t n = g.spec().layers.size();
  auto fused = [&](backend::Precision p, bool training, Layout layout = Layout::kNCHW) {
    const backend::cuda::Fusion f = backend::cuda::plan_fusion(
        g.spec(), backend::PlanOptions{.batch = 4, .layout = layout, .training = training, .precision = p});
    EXPECT_EQ(f.bn_relu.size(), n);
    EXPECT_EQ(f.bn_add.size(), n);
    EXPECT_EQ(f.folded.size(), n);
    std::vector<int> pairs;
    for (size_t i = 0; i < n; ++i) {
      if (f.bn_relu[i]) pairs.push_back(static_cast<int>(i));
      if (f.folded[i] >= 0) pairs.push_back(static_cast<int>(i));
      EXPECT_EQ(f.bn_add[i], -1) << i;
    }
    return pairs;
  };
  const std::vector<int> both{bn1, relu1, bn3, relu3};
  EXPECT_EQ(fused(backend::Precision::kF16, true), both);  // reduced precision computes NHWC
  EXPECT_EQ(fused(backend::Precision::kBF16, true), both);
  EXPECT_EQ(fused(backend::Precision::kF32, true, Layout::kNHWC), both);
  EXPECT_TRUE(fused(backend::Precision::kF32, true).empty());   // NCHW: cuDNN's batch norm, a relu of its own
  EXPECT_TRUE(fused(backend::Precision::kF16, false).empty());  // inference: one affine pass, then the relu
}

// relu(bn(x) + z), a residual block's end, folds into the batch norm that is the add's
// later input: in an identity block the main branch's, with the block's input as z; in
// a downsampling block the shortcut's own batch norm, with the main branch as z.
TEST(CudaFusion, AResidualAddAndReluFoldIntoTheLaterBatchNorm) {
  Graph g({8, 6, 6});
  const ConvOptions same{3, 3, 1, 1, 1, 1, false};
  const int stem = g.relu(g.batch_norm(g.conv(g.input(), "stem", 8, same), "stem_bn"), "stem_relu");
  // identity block
  const int bn_a = g.batch_norm(g.conv(stem, "a", 8, same), "a_bn");
  const int add_a = g.add({bn_a, stem}, "a_add");
  const int out_a = g.relu(add_a, "a_relu");
  // downsampling block: the main branch first, the shortcut's batch norm after it
  const int bn_b = g.batch_norm(g.conv(out_a, "b", 16, same), "b_bn");
  const int bn_sc = g.batch_norm(g.conv(out_a, "b_sc", 16, same), "b_sc_bn");
  const int add_b = g.add({bn_b, bn_sc}, "b_add");
  const int out_b = g.relu(add_b, "b_relu");
  // not fused: the add's value has a second consumer; three inputs
  const int bn_c = g.batch_norm(g.conv(out_b, "c", 16, same), "c_bn");
  const int add_c = g.add({bn_c, out_b}, "c_add");
  const int out_c = g.relu(add_c, "c_relu");
  const int bn_d = g.batch_norm(g.conv(g.add({out_c, add_c}, "c_sum"), "d", 16, same), "d_bn");
  g.relu(g.add({bn_d, out_c, out_b}, "d_add"), "d_relu");
  const backend::cuda::Fusion f = backend::cuda::plan_fusion(
      g.spec(), backend::PlanOptions{.batch = 4, .training = true, .precision = backend::Precision::kF16});
  auto at = [](const std::vector<int>& v, int i) { return v.at(static_cast<size_t>(i)); };
  EXPECT_TRUE(f.bn_relu.at(static_cast<size_t>(bn_a)));
  EXPECT_EQ(at(f.bn_add, bn_a), stem);
  EXPECT_EQ(at(f.folded, add_a), bn_a);
  EXPECT_EQ(at(f.folded, out_a), add_a);
  EXPECT_FALSE(f.bn_relu.at(static_cast<size_t>(bn_b)));  // the earlier input: z
  EXPECT_TRUE(f.bn_relu.at(static_cast<size_t>(bn_sc)));
  EXPECT_EQ(at(f.bn_add, bn_sc), bn_b);
  EXPECT_EQ(at(f.folded, add_b), bn_sc);
  EXPECT_EQ(at(f.folded, out_b), add_b);
  for (int i : {bn_c, bn_d}) {
    EXPECT_FALSE(f.bn_relu.at(static_cast<size_t>(i))) << i;
    EXPECT_EQ(at(f.bn_add, i), -1) << i;
  }
  EXPECT_EQ(at(f.folded, add_c), -1);
  EXPECT_EQ(at(f.folded, out_c), -1);
  int folded = 0;
  for (int v : f.folded) folded += v >= 0 ? 1 : 0;
  EXPECT_EQ(folded, 5);  // stem_relu, a_add, a_relu, b_add, b_relu
  const backend::cuda::Fusion f32 = backend::cuda::plan_fusion(
      g.spec(), backend::PlanOptions{.batch = 4, .training = true, .precision = backend::Precision::kF32});
  for (int v : f32.folded) EXPECT_EQ(v, -1);  // NCHW
  const backend::cuda::Fusion f32_nhwc = backend::cuda::plan_fusion(
      g.spec(), backend::PlanOptions{
                    .batch = 4, .layout = Layout::kNHWC, .training = true, .precision = backend::Precision::kF32});
  EXPECT_EQ(f32_nhwc.folded, f.folded);
  EXPECT_EQ(f32_nhwc.bn_add, f.bn_add);
}

// A device as StepGraphs sees it: what a capture holds, what each launch replays. A
// step run while capturing is recorded into the open graph instead of running.
class FakeGraphs final : public backend::cuda::GraphOps {
 public:
  std::vector<std::string> log;  // "run i", "replay i" for each step's work done
  bool capturing = false;
  int fail_capture_at = -1;  // the capture of the segment starting at this step fails
  std::vector<size_t> open;

  void run_step(size_t i) {
    if (capturing)
      open.push_back(i);
    else
      log.push_back("run " + std::to_string(i));
  }
  void begin_capture() override {
    EXPECT_FALSE(capturing);
    capturing = true;
    open.clear();
  }
  std::shared_ptr<void> end_capture() override {
    capturing = false;
    if (!open.empty() && static_cast<int>(open.front()) == fail_capture_at)
      fail(Code::kCuda, "cudaStreamEndCapture: operation not permitted when stream is capturing");
    ++captures;
    if (open.empty()) return nullptr;  // nothing enqueued: nothing to launch
    return std::make_shared<std::vector<size_t>>(open);
  }
  void abandon_capture() noexcept override {
    capturing = false;
    ++abandoned;
  }
  void launch(const std::shared_ptr<void>& graph) override {
    EXPECT_NE(graph, nullptr);
    for (size_t i : *static_cast<const std::vector<size_t>*>(graph.get())) log.push_back("replay " + std::to_string(i));
  }
  int captures = 0, abandoned = 0;
};

std::vector<std::string> one_pass(backend::cuda::StepGraphs& g, FakeGraphs& dev, size_t steps) {
  dev.log.clear();
  g.pass([&](size_t i) { dev.run_step(i); }, dev);
  EXPECT_EQ(dev.log.size(), steps) << "every step's work is done exactly once per pass";
  return dev.log;
}

TEST(CudaGraphs, DeviceRunsAreCapturedAfterTheWarmUpAndHostStepsRunEveryPass) {
  using backend::cuda::StepKind;
  const StepKind D = StepKind::kDevice, H = StepKind::kHost;
  // A backward pass: device work, a gradient-ready notification, more work, a
  // per-step-argument step, then work again.
  backend::cuda::StepGraphs g({D, D, H, D, D, D, H, H, D}, 2);
  ASSERT_EQ(g.segments().size(), 5u);
  EXPECT_TRUE(g.segments()[0].device);
  EXPECT_EQ(g.segments()[0].end, 2u);
  EXPECT_FALSE(g.segments()[1].device);
  EXPECT_EQ(g.segments()[3].begin, 6u);  // the two host steps make one segment
  EXPECT_EQ(g.segments()[3].end, 8u);

  FakeGraphs dev;
  const std::vector<std::string> eager = {"run 0", "run 1", "run 2", "run 3", "run 4",
                                          "run 5", "run 6", "run 7", "run 8"};
  EXPECT_EQ(one_pass(g, dev, 9), eager);  // warm-up passes: everything as it is
  EXPECT_EQ(one_pass(g, dev, 9), eager);
  EXPECT_FALSE(g.captured());
  EXPECT_EQ(dev.captures, 0);
  // The capture pass records the device runs and launches them, in order with the host steps.
  const std::vector<std::string> replayed = {"replay 0", "replay 1", "run 2", "replay 3", "replay 4",
                                             "replay 5", "run 6",    "run 7", "replay 8"};
  EXPECT_EQ(one_pass(g, dev, 9), replayed);
  EXPECT_TRUE(g.captured());
  EXPECT_EQ(dev.captures, 3);
  for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(one_pass(g, dev, 9), replayed);
  EXPECT_EQ(dev.captures, 3) << "captured once, replayed after";

  // Dropping the graphs (profiling): eager again for the warm-up, then a new capture.
  g.reset();
  EXPECT_EQ(one_pass(g, dev, 9), eager);
  EXPECT_EQ(one_pass(g, dev, 9), eager);
  EXPECT_EQ(one_pass(g, dev, 9), replayed);
  EXPECT_EQ(dev.captures, 6);
  EXPECT_THROW(backend::cuda::StepGraphs({D}, 0), Error);  // the warm-up makes what a capture must not
}

// One pass whose notify steps log "notify i" when their host part runs.
std::vector<std::string> pass_logging_notify(backend::cuda::StepGraphs& g, FakeGraphs& dev) {
  dev.log.clear();
  g.pass([&](size_t i) { dev.run_step(i); }, dev, [&](size_t i) { dev.log.push_back("notify " + std::to_string(i)); });
  return dev.log;
}

TEST(CudaGraphs, ANotifyStepIsCapturedAndItsHostPartFollowsTheLaunchEachPass) {
  using backend::cuda::StepKind;
  const StepKind D = StepKind::kDevice, H = StepKind::kHost, N = StepKind::kNotify;
  // A backward pass: two gradient-ready notifications among the device steps (one
  // segment with them), a per-pass-argument step, then device work again.
  backend::cuda::StepGraphs g({D, N, D, N, H, D}, 1);
  ASSERT_EQ(g.segments().size(), 3u);
  EXPECT_TRUE(g.segments()[0].device);
  EXPECT_EQ(g.segments()[0].end, 4u) << "a notify step does not split a device run";
  FakeGraphs dev;
  auto pass = [&] { return pass_logging_notify(g, dev); };
  EXPECT_EQ(pass(),
            (std::vector<std::string>{"run 0", "run 1", "notify 1", "run 2", "run 3", "notify 3", "run 4", "run 5"}))
      << "eagerly each host part right after its step";
  const std::vector<std::string> replayed = {"replay 0", "replay 1", "replay 2", "replay 3",
                                             "notify 1", "notify 3", "run 4",    "replay 5"};
  EXPECT_EQ(pass(), replayed) << "the capture pass hands out only after the launch";
  EXPECT_EQ(dev.captures, 2);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(pass(), replayed);
  EXPECT_EQ(dev.captures, 2);

  // A capture that fails hands nothing out for it: the segment runs eagerly, each host
  // part once, after its own step.
  backend::cuda::StepGraphs f({D, N, D}, 1);
  FakeGraphs dev2;
  dev2.fail_capture_at = 0;
  int notified = 0;
  auto run = [&](size_t i) { dev2.run_step(i); };
  auto notify = [&](size_t i) {
    ++notified;
    dev2.log.push_back("notify " + std::to_string(i));
  };
  f.pass(run, dev2, notify);
  dev2.log.clear();
  f.pass(run, dev2, notify);
  EXPECT_EQ(dev2.log, (std::vector<std::string>{"run 0", "run 1", "notify 1", "run 2"}));
  EXPECT_EQ(notified, 2) << "once per pass";
  EXPECT_TRUE(f.disabled());
  // Without a notify function the host parts are skipped, not an error.
  dev2.log.clear();
  f.pass(run, dev2);
  EXPECT_EQ(dev2.log, (std::vector<std::string>{"run 0", "run 1", "run 2"}));
}

TEST(CudaGraphs, NotifyStepsRunBetweenTheGraphsWhereTheListenerEnqueuesWork) {
  using backend::cuda::StepKind;
  const StepKind D = StepKind::kDevice, H = StepKind::kHost, N = StepKind::kNotify;
  backend::cuda::StepGraphs g({D, N, D, N, H, D}, 1, true);
  ASSERT_EQ(g.segments().size(), 5u) << "each notify step ends a device run";
  EXPECT_FALSE(g.segments()[1].device);
  FakeGraphs dev;
  auto pass = [&] { return pass_logging_notify(g, dev); };
  EXPECT_EQ(pass(),
            (std::vector<std::string>{"run 0", "run 1", "notify 1", "run 2", "run 3", "notify 3", "run 4", "run 5"}));
  const std::vector<std::string> replayed = {"replay 0", "run 1",    "notify 1", "replay 2",
                                             "run 3",    "notify 3", "run 4",    "replay 5"};
  for (int k = 0; k < 3; ++k) EXPECT_EQ(pass(), replayed) << "each event handed out as its layer's graph ends";
  EXPECT_EQ(dev.captures, 3);
}

TEST(CudaGraphs, AWarmUpCountsOnlyWhenWholeAndAnEmptyCaptureIsNeverLaunched) {
  using backend::cuda::StepKind;
  const StepKind D = StepKind::kDevice, H = StepKind::kHost;
  backend::cuda::StepGraphs g({D, H, D}, 1);
  FakeGraphs dev;
  bool throw_in_host_step = true;
  // Step 0 only makes memory once (it enqueues nothing after its first pass).
  bool made = false;
  auto run = [&](size_t i) {
    if (i == 0) {
      if (!made) dev.log.push_back("run 0");
      made = true;
      return;
    }
    if (i == 1 && throw_in_host_step) fail(Code::kInvalidArgument, "bad labels");
    dev.run_step(i);
  };
  EXPECT_THROW(g.pass(run, dev), Error);  // a warm-up cut short: step 2 never ran
  throw_in_host_step = false;
  dev.log.clear();
  g.pass(run, dev);
  EXPECT_EQ(dev.log, (std::vector<std::string>{"run 1", "run 2"})) << "still the warm-up: it runs eagerly";
  EXPECT_EQ(dev.captures, 0);
  dev.log.clear();
  g.pass(run, dev);
  EXPECT_EQ(dev.log, (std::vector<std::string>{"run 1", "replay 2"})) << "the empty capture of step 0 is not launched";
  EXPECT_EQ(dev.captures, 2);
  EXPECT_TRUE(g.captured());
  dev.log.clear();
  g.pass(run, dev);
  EXPECT_EQ(dev.log, (std::vector<std::string>{"run 1", "replay 2"}));
  EXPECT_EQ(dev.captures, 2) << "an empty capture is kept, not redone";
}

TEST(CudaGraphs, AFailedCaptureRunsItsSegmentEagerlyAndTurnsGraphsOff) {
  using backend::cuda::StepKind;
  const StepKind D = StepKind::kDevice, H = StepKind::kHost;
  backend::cuda::StepGraphs g({D, H, D, D, H, D}, 1);
  FakeGraphs dev;
  dev.fail_capture_at = 2;  // the second device run holds something a graph cannot
  one_pass(g, dev, 6);
  // The first run was captured and launched; the failing one runs for real, the rest too.
  EXPECT_EQ(one_pass(g, dev, 6), (std::vector<std::string>{"replay 0", "run 1", "run 2", "run 3", "run 4", "run 5"}));
  EXPECT_EQ(dev.abandoned, 1) << "every failed capture is abandoned (a no-op where the stream has left capture mode)";
  EXPECT_TRUE(g.disabled());
  EXPECT_NE(g.why_disabled().find("not permitted"), std::string::npos) << g.why_disabled();
  EXPECT_FALSE(g.captured());
  const std::vector<std::string> eager = {"run 0", "run 1", "run 2", "run 3", "run 4", "run 5"};
  EXPECT_EQ(one_pass(g, dev, 6), eager);
  g.reset();  // off for good
  one_pass(g, dev, 6);
  EXPECT_EQ(one_pass(g, dev, 6), eager);

  // A step that throws while capturing: the capture is abandoned and the step runs
  // eagerly, where its own error reaches the caller.
  backend::cuda::StepGraphs h({D, D}, 1);
  FakeGraphs dev2;
  bool throw_now = false;
  auto run = [&](size_t i) {
    if (i == 1 && throw_now) fail(Code::kInvalidArgument, "step 1 failed");
    dev2.run_step(i);
  };
  h.pass(run, dev2);
  throw_now = true;
  EXPECT_THROW(h.pass(run, dev2), Error);
  EXPECT_EQ(dev2.abandoned, 1);
  EXPECT_FALSE(dev2.capturing);
  EXPECT_TRUE(h.disabled());
}

}  // namespace
}  // namespace cohort
