// Every layer kind of the CUDA backend against the CPU backend, forward and backward,
// NCHW and NHWC, with the f32 math policy off (full f32 on both): outputs, input
// gradients, parameter gradients and batch-norm statistics agree within f32 tolerances;
// and the same at f16 and bf16 on the GPU (NHWC, f32 master weights) against the CPU's
// f32, within those types' tolerances or as close as the CPU's own bf16 result comes
// (expect_close); and with CUDA graphs, three passes on changing
// inputs (eager, captured, replayed) agree at each; and batch-norm statistics at
// ResNet-50's sizes (up to hundreds of blocks) agree with the host's, pass after pass. SKIPPED
// where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/precision.h"
#include "runtime/device_probe.h"
#include "core/status.h"
#include "graph/graph.h"
#include "kernels/batch_norm.h"
#include "support/host_views.h"
#include "support/temp_dir.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"

namespace cohort {
namespace {

using backend::Layout;

struct OpCase {
  std::string name;
  Shape input;
  std::function<void(Graph&)> build;
};

std::vector<OpCase> cases() {
  ConvOptions same;
  same.pad = 1;
  // A convolution before a batch norm has no bias (as in ResNets): the batch norm
  // subtracts it again, so its gradient is 0 and any comparison would weigh rounding noise.
  ConvOptions same_unbiased = same;
  same_unbiased.bias = false;
  ConvOptions grouped;
  grouped.stride = 2;
  grouped.dilation = 2;
  grouped.pad = 2;
  grouped.groups = 2;
  grouped.bias = false;
  auto conv = [](Graph& g, int in, const char* name, int k, const ConvOptions& o) { return g.conv(in, name, k, o); };
  return {
      {"conv", {3, 9, 9}, [=](Graph& g) { conv(g, g.input(), "conv", 8, same); }},
      {"conv_grouped_strided_dilated", {4, 11, 11}, [=](Graph& g) { conv(g, g.input(), "conv", 6, grouped); }},
      {"dense", {37}, [](Graph& g) { g.dense(g.input(), "fc", 11); }},
      {"batch_norm_4d", {5, 6, 6}, [](Graph& g) { g.batch_norm(g.input(), "bn"); }},
      {"batch_norm_2d", {9}, [](Graph& g) { g.batch_norm(g.input(), "bn"); }},
      // In training on NHWC values the relu folds into the batch norm (backend/cuda/fusion.h:
      // kernels/batch_norm.h, or cuDNN's fused form in f16).
      {"batch_norm_relu", {8, 6, 6}, [](Graph& g) { g.relu(g.batch_norm(g.input(), "bn"), "relu"); }},
      // ... where the batch norm's input has another consumer (its gradient adds to it), the
      // relu has two, and a convolution shares the plan's workspace.
      {"conv_batch_norm_relu_shared",
       {4, 6, 6},
       [=](Graph& g) {
         const int a = conv(g, g.input(), "conv", 8, same);
         const int r = g.relu(g.batch_norm(a, "bn"), "relu");
         g.add({g.add({r, a}, "sum"), r}, "out");
       }},
      // relu(bn(x) + z) folds into the batch norm too, with z the block's input...
      {"batch_norm_add_relu",
       {8, 6, 6},
       [=](Graph& g) {
         const int bn = g.batch_norm(conv(g, g.input(), "conv", 8, same_unbiased), "bn");
         g.relu(g.add({bn, g.input()}, "add"), "relu");
       }},
      // ... with z the batch norm's own input (its gradient and z's go to one buffer)
      {"batch_norm_of_input_add_relu",
       {8, 6, 6},
       [](Graph& g) {
         g.relu(g.add({g.batch_norm(g.input(), "bn"), g.input()}, "add"), "relu");
       }},
      // 6 channels: in f16 kernels/batch_norm.h's fused form (cuDNN's needs a multiple of 4)
      {"batch_norm_relu_6_channels", {6, 6, 6}, [](Graph& g) { g.relu(g.batch_norm(g.input(), "bn"), "relu"); }},
      // 40 channels of 4 × 24 × 24 rows: the device sums span several blocks each way
      {"batch_norm_relu_wide", {40, 24, 24}, [](Graph& g) { g.relu(g.batch_norm(g.input(), "bn"), "relu"); }},
      // ... or the main branch, when the shortcut's batch norm comes later; here z has another
      // consumer after the add (cuDNN's gradient of z adds to what that one wrote).
      {"residual_downsample_shared",
       {4, 6, 6},
       [=](Graph& g) {
         const int a = conv(g, g.input(), "a", 8, same);
         const int main = g.batch_norm(conv(g, a, "main", 8, same_unbiased), "bn_main");
         const int sc = g.batch_norm(conv(g, a, "sc", 8, same_unbiased), "bn_sc");
         const int r = g.relu(g.add({main, sc}, "add"), "relu");
         g.add({r, main}, "out");
       }},
      {"max_pool",
       {3, 8, 8},
       [](Graph& g) {
         g.max_pool(g.input(), "pool", {3, 2, 1, false});
       }},
      {"max_pool_ceil",
       {3, 8, 9},
       [](Graph& g) {
         g.max_pool(g.input(), "pool", {3, 2, 0, true});
       }},
      {"avg_pool_ceil",
       {3, 8, 9},
       [](Graph& g) {
         g.avg_pool(g.input(), "pool", {3, 2, 1, true});
       }},
      {"global_avg_pool", {6, 5, 7}, [](Graph& g) { g.global_avg_pool(g.input(), "gap"); }},
      {"lrn", {7, 5, 5}, [](Graph& g) { g.lrn(g.input(), "lrn", 5, 1e-2f, 0.75f, 2.f); }},
      {"relu", {4, 5, 5}, [](Graph& g) { g.relu(g.input(), "relu"); }},
      {"leaky_relu", {4, 5, 5}, [](Graph& g) { g.activation(g.input(), "act", ActKind::kLeakyRelu, 0.2f); }},
      {"elu", {4, 5, 5}, [](Graph& g) { g.activation(g.input(), "act", ActKind::kElu, 0.7f); }},
      {"tanh", {4, 5, 5}, [](Graph& g) { g.activation(g.input(), "act", ActKind::kTanh); }},
      {"sigmoid", {4, 5, 5}, [](Graph& g) { g.activation(g.input(), "act", ActKind::kSigmoid); }},
      // after a layer the graphs can capture (a dropout's kernels run outside them: their
      // arguments change every pass)
      {"dropout", {300}, [](Graph& g) { g.dropout(g.activation(g.input(), "act", ActKind::kTanh), "drop", 0.4f); }},
      {"concat",
       {3, 6, 6},
       [=](Graph& g) {
         const int a = conv(g, g.input(), "a", 4, same);
         g.concat({a, g.input()}, "cat");
       }},
      {"add_and_shared_input",
       {3, 6, 6},
       [=](Graph& g) {
         const int a = conv(g, g.input(), "a", 3, same);
         g.add({a, g.input(), a}, "sum");
       }},
      {"flatten_dense",
       {3, 4, 5},
       [](Graph& g) {
         const int f = g.flatten(g.input(), "flat");
         g.dense(f, "fc", 6);
       }},
      {"shortcut_a", {4, 7, 6}, [](Graph& g) { g.shortcut_a(g.input(), "short", 8, 2); }},
      {"softmax_xent",
       {10},
       [](Graph& g) {
         const int f = g.dense(g.input(), "fc", 5);
         g.softmax_xent(f, "loss", 0.1f);
       }},
  };
}

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * scale + 0.3f) * 1.5f;
  return v;
}

// Inputs exact in f16 and bf16 and distinct within any small window (a max pooling's
// first maximum is the same one in every type), of magnitude up to 2.
std::vector<float> exact_inputs(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i * 37 % 251 - 128) / 64.f;
  return v;
}

struct Form {
  Layout layout;
  backend::Precision precision;
  bool graphs = false;  // cuda_graphs=on: three passes (eager, captured, replayed), each on new inputs
  backend::CudaBatchNorm batch_norm = backend::CudaBatchNorm::kAuto;  // cuda_batch_norm
};

// The relative error allowed of a GPU result against the CPU's f32 one.
double tolerance(backend::Precision p) {
  return p == backend::Precision::kF32 ? 2e-3 : p == backend::Precision::kF16 ? 2e-2 : 6e-2;
}

struct Deviation {
  double worst = 0;  // the largest relative error
  int64_t at = 0;    // where
  int64_t over = 0;  // elements off by more than the tolerance
};

// How far `got` is from `want`, element by element, relative to |want|; values much
// smaller than the tensor's typical ones (its root mean square) are judged by their
// error against that scale: a sum that cancels to near 0 (a gradient over many
// positions) keeps the rounding error of its terms, which are of the tensor's size.
Deviation deviation(const Tensor& got, const Tensor& want, double tol) {
  const Tensor g = to_host(got), c = to_host(want);
  EXPECT_EQ(g.numel(), c.numel());
  double rms = 0;
  for (int64_t i = 0; i < c.numel(); ++i) rms += static_cast<double>(c.data_as<float>()[i]) * c.data_as<float>()[i];
  rms = c.numel() > 0 ? std::sqrt(rms / static_cast<double>(c.numel())) : 0;
  const double floor = (tol > 2e-3 ? 0.5 : 0.05) * (rms > 0 ? rms : 1);
  Deviation d;
  for (int64_t i = 0; i < std::min(c.numel(), g.numel()); ++i) {
    const double a = g.data_as<float>()[i], b = c.data_as<float>()[i];
    const double err = std::abs(a - b) / (floor + std::abs(b));
    if (err > tol) ++d.over;
    if (err > d.worst) {
      d.worst = err;
      d.at = i;
    }
  }
  return d;
}

// The GPU's result against the CPU's f32 one, within `tol`. At reduced precision the
// CPU's own bf16 result (`reduced`, where the CPU has bf16) says how far rounding alone
// takes the same net from f32: a relu whose input rounds across 0 sends another
// gradient back, and sums of hundreds of rounded terms keep their rounding. The GPU may
// then be off by more than `tol` at as many elements as twice the CPU's are, plus two,
// and by at most twice the CPU's worst error plus half of `tol`.
void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what, double tol = 2e-3,
                  const Tensor* reduced = nullptr) {
  const Deviation d = deviation(gpu, cpu, tol);
  double allowed = tol;
  int64_t allowed_over = 0;
  std::string why;
  if (reduced) {
    const Deviation r = deviation(*reduced, cpu, tol);
    if (r.over > 0) {
      allowed = std::max(tol, 2 * r.worst + tol / 2);
      allowed_over = 2 * r.over + 2;
      why = cat(" (the CPU's own bf16 result is ", r.worst, " off, at ", r.over, " elements)");
    }
  }
  const Tensor g = to_host(gpu), c = to_host(cpu);
  EXPECT_TRUE(d.worst < allowed && d.over <= allowed_over)
      << what << why << ": " << d.over << " elements off by more than " << tol << "; the worst, " << d.worst
      << ", is element " << d.at << ": " << g.data_as<float>()[d.at] << " on the GPU, " << c.data_as<float>()[d.at]
      << " on the CPU";
}

class CudaOps : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    const CudaProbe probe = probe_cuda();
    if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  }
};

TEST_P(CudaOps, EveryLayerAgreesWithTheCpuBackend) {
  const Layout layout = GetParam().layout;
  const backend::Precision precision = GetParam().precision;
  const bool reduced = precision != backend::Precision::kF32;
  const double tol = tolerance(precision);
  Memory memory;
  backend::BackendOptions o;
  o.memory = memory.on(Device::cuda(0));
  o.tf32 = backend::Tf32::kOff;
  o.cuda_graphs = GetParam().graphs;
  o.batch_norm = GetParam().batch_norm;
  const int passes = GetParam().graphs ? 3 : 1;
  const bool with_cpu_bf16 = reduced && backend::probe_cpu_isa().bf16;
  auto gpu_backend = backend::make_backend(Device::cuda(0), 1, o);
  const int64_t n = 4;
  for (const OpCase& c : cases()) {
    SCOPED_TRACE(c.name + (layout == Layout::kNHWC ? " NHWC " : " NCHW ") + backend::precision_name(precision));
    // At reduced precision, also the CPU's own bf16 result where the CPU has bf16.
    Graph cpu(c.input), gpu(c.input), cpu_bf16(c.input);
    c.build(cpu);
    c.build(gpu);
    c.build(cpu_bf16);
    gpu.set_backend(gpu_backend, o.memory);
    gpu.set_precision(precision);
    cpu_bf16.set_precision(backend::Precision::kBF16);
    for (Graph* g : {&cpu, &gpu, &cpu_bf16}) {
      g->set_dropout_seed(7);
      g->materialize(11);
    }
    auto& cp = cpu.plan(n, layout, true, true);
    auto& gp = gpu.plan(n, layout, true, true);
    backend::Plan* rp = with_cpu_bf16 ? &cpu_bf16.plan(n, layout, true, true) : nullptr;
    const bool loss = cpu.has_loss();
    const int out = cpu.output_layer();
    std::vector<float> x, ycpu(static_cast<size_t>(n * shape_numel(cpu.shape(out)))), ygpu(ycpu.size());
    for (int pass = 0; pass < passes; ++pass) {
      // Each pass new values in new device tensors (with graphs the plan copies them in),
      // its own dropout draws, and labels that change.
      x = reduced ? exact_inputs(n * shape_numel(c.input)) : ramp(n * shape_numel(c.input), 0.41f);
      for (float& v : x) v *= 1.f + 0.5f * static_cast<float>(pass);
      std::vector<int32_t> labels;
      for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>((i * 3 + pass) % 5));
      const Tensor hx = test::batch_view(x, cpu, n, layout);
      const Tensor dx_host = clone_to(hx, *o.memory);
      const Tensor hy = test::labels_view(labels, n);
      const Tensor dy_labels = clone_to(hy, *o.memory);
      const uint64_t step = 3 + static_cast<uint64_t>(pass);
      cp.forward(hx, loss ? hy : Tensor(), step, cpu.stream());
      gp.forward(dx_host, loss ? dy_labels : Tensor(), step, gpu.stream());
      if (rp) rp->forward(hx, loss ? hy : Tensor(), step, cpu_bf16.stream());
      cp.read(out, test::batch_view(ycpu, cpu, n, layout, out));
      gp.read(out, test::batch_view(ygpu, gpu, n, layout, out));
      expect_close(test::batch_view(ygpu, gpu, n, layout, out), test::batch_view(ycpu, cpu, n, layout, out),
                   "output of pass " + std::to_string(pass), tol);
      std::vector<float> grad = ramp(static_cast<int64_t>(ycpu.size()), 0.17f * static_cast<float>(pass + 1));
      const Tensor gy = test::batch_view(grad, cpu, n, layout, out);
      if (loss) {
        EXPECT_NEAR(gp.loss(), cp.loss(), (reduced ? tol : 1e-4) * std::abs(cp.loss()) + 1e-5);
        cp.backward(
            {}, [](int, const Event&) {}, cpu.stream());
        gp.backward(
            {}, [](int, const Event&) {}, gpu.stream());
        if (rp)
          rp->backward(
              {}, [](int, const Event&) {}, cpu_bf16.stream());
      } else {
        cp.backward(
            gy, [](int, const Event&) {}, cpu.stream());
        gp.backward(
            clone_to(gy, *o.memory), [](int, const Event&) {}, gpu.stream());
        if (rp)
          rp->backward(
              gy, [](int, const Event&) {}, cpu_bf16.stream());
      }
    }
    // Every layer kind here can be captured: the last pass replayed graphs.
    EXPECT_EQ(gp.replays_graphs(), GetParam().graphs);
    std::vector<float> dxc(x.size()), dxg(x.size()), dxr(x.size());
    cp.read_input_grad(test::batch_view(dxc, cpu, n, layout));
    gp.read_input_grad(test::batch_view(dxg, gpu, n, layout));
    if (rp) rp->read_input_grad(test::batch_view(dxr, cpu_bf16, n, layout));
    const Tensor dxr_view = test::batch_view(dxr, cpu_bf16, n, layout);
    expect_close(test::batch_view(dxg, gpu, n, layout), test::batch_view(dxc, cpu, n, layout), "input gradient", tol,
                 rp ? &dxr_view : nullptr);
    synchronize(gpu.stream());
    for (size_t i = 0; i < cpu.params().size(); ++i)
      expect_close(gpu.params()[i].grad, cpu.params()[i].grad, "gradient of " + cpu.params()[i].name, tol,
                   rp ? &cpu_bf16.params()[i].grad : nullptr);
    for (size_t i = 0; i < cpu.states().size(); ++i)
      expect_close(gpu.states()[i].value, cpu.states()[i].value, cpu.states()[i].name, tol,
                   rp ? &cpu_bf16.states()[i].value : nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CudaOps,
    ::testing::Values(Form{Layout::kNCHW, backend::Precision::kF32}, Form{Layout::kNHWC, backend::Precision::kF32},
                      Form{Layout::kNCHW, backend::Precision::kF16}, Form{Layout::kNHWC, backend::Precision::kBF16},
                      Form{Layout::kNCHW, backend::Precision::kF32, true},
                      Form{Layout::kNHWC, backend::Precision::kF16, true},
                      // f16 batch norms all through kernels/, or all through BN-Ex
                      Form{Layout::kNHWC, backend::Precision::kF16, false, backend::CudaBatchNorm::kKernels},
                      Form{Layout::kNHWC, backend::Precision::kF16, false, backend::CudaBatchNorm::kCudnn}),
    [](const auto& info) {
      return std::string(info.param.layout == Layout::kNHWC ? "NHWC_" : "NCHW_") +
             backend::precision_name(info.param.precision) + (info.param.graphs ? "_graphs" : "") +
             (info.param.batch_norm == backend::CudaBatchNorm::kKernels ? "_bn_kernels"
              : info.param.batch_norm == backend::CudaBatchNorm::kCudnn ? "_bn_cudnn"
                                                                        : "");
    });

TEST(CudaBackend, DescribesTheGpuAndItsMathPolicy) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  auto b = backend::make_cuda_backend(0);
  EXPECT_EQ(b->name(), "cuda:0");
  EXPECT_EQ(b->device(), Device::cuda(0));
  EXPECT_FALSE(b->stream().is_host());
  EXPECT_NE(b->describe().find("tf32=auto"), std::string::npos) << b->describe();
}

// A CUDA backend that replays graphs, and the convolution options of a 3x3 kernel that
// keeps the image size.
struct GraphsBackend {
  Memory memory;
  backend::BackendOptions o;
  std::shared_ptr<backend::Backend> b;
  ConvOptions same;
  GraphsBackend() {
    o.memory = memory.on(Device::cuda(0));
    o.cuda_graphs = true;
    b = backend::make_backend(Device::cuda(0), 1, o);
    same.pad = 1;
  }
};

// A training forward of pass `pass` on a new batch of n 3x8x8 images in new device memory
// (with graphs the plan copies it in), its values scaled by `scale` and its labels shifted
// by `shift` each pass.
void forward_new_batch(backend::Plan& plan, Graph& g, const GraphsBackend& gb, int64_t n, int pass, float scale,
                       int shift) {
  std::vector<float> x = ramp(n * 3 * 8 * 8, scale * static_cast<float>(pass + 1));
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>((shift * i + pass) % 5));
  plan.forward(clone_to(test::batch_view(x, g, n, Layout::kNHWC), *gb.o.memory),
               clone_to(test::labels_view(labels, n), *gb.o.memory), static_cast<uint64_t>(pass), g.stream());
}

// With graphs the gradient-ready notifications are recorded inside the captured
// backward (one graph for it here) and handed out after its launch: each gradient is
// reported once a pass, and another stream that waits for its event copies the
// gradient as the pass leaves it, in the eager, the capture and the replayed passes.
TEST(CudaBackend, WithGraphsEachGradientIsReadyOncePerPassAfterItsLastWrite) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  GraphsBackend gb;
  Graph g({3, 8, 8});
  const int c = g.conv(g.input(), "a", 8, gb.same);
  const int r = g.relu(g.batch_norm(c, "bn"), "relu");
  const int f = g.dense(g.flatten(g.conv(r, "b", 4, gb.same), "flat"), "fc", 5);
  g.softmax_xent(f, "loss", 0.f);
  g.set_backend(gb.b, gb.o.memory);
  g.materialize(5);
  const int64_t n = 4;
  auto& plan = g.plan(n, Layout::kNHWC, true, false);
  OwnedStream side(Device::cuda(0));
  std::vector<Tensor> copies;
  for (const Parameter& p : g.params()) copies.push_back(clone_to(p.grad, *gb.o.memory));
  for (int pass = 0; pass < 5; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    forward_new_batch(plan, g, gb, n, pass, 0.29f, 1);
    std::vector<int> reported(g.params().size(), 0);
    plan.backward(
        {},
        [&](int i, const Event& e) {
          ASSERT_TRUE(i >= 0 && i < static_cast<int>(reported.size()));
          ++reported[static_cast<size_t>(i)];
          EXPECT_TRUE(e.recorded());
          e.block(side);  // the copy waits for the gradient's last write, nothing more
          copy(copies[static_cast<size_t>(i)], g.params()[static_cast<size_t>(i)].grad, side);
        },
        g.stream());
    synchronize(side);
    synchronize(g.stream());
    for (size_t i = 0; i < reported.size(); ++i) {
      EXPECT_EQ(reported[i], 1) << g.params()[i].name;
      const Tensor want = to_host(g.params()[i].grad), got = to_host(copies[i]);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.numel() * sizeof(float)), 0)
          << g.params()[i].name << ": the copy after its event differs from the final gradient";
    }
  }
  EXPECT_TRUE(plan.replays_graphs());
}

// A listener that enqueues work of its own on the pass's stream (set_ready_enqueues)
// gets each event between the graphs, where its layer ends: what it enqueues for the
// last layer's gradient runs before the first layer's backward. Its copy of the first
// layer's gradient, made then, still holds the last pass's, in every pass (eager,
// captured, replayed).
TEST(CudaBackend, WithGraphsAListenerThatEnqueuesWorkGetsEachEventWhereItsLayerEnds) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  GraphsBackend gb;
  Graph g({3, 8, 8});
  const int f = g.dense(g.flatten(g.conv(g.input(), "a", 4, gb.same), "flat"), "fc", 5, false);
  g.softmax_xent(f, "loss", 0.f);
  g.set_backend(gb.b, gb.o.memory);
  g.materialize(5);
  const int64_t n = 4;
  auto& plan = g.plan(n, Layout::kNHWC, true, false);
  plan.set_ready_enqueues(true);
  int conv = -1, dense = -1;
  for (size_t i = 0; i < g.params().size(); ++i) {
    if (g.params()[i].name == "a.weight") conv = static_cast<int>(i);
    if (g.params()[i].name == "fc.weight") dense = static_cast<int>(i);
  }
  ASSERT_TRUE(conv >= 0 && dense >= 0);
  const Tensor& first = g.params()[static_cast<size_t>(conv)].grad;  // the pass's last gradient
  Tensor early = clone_to(first, *gb.o.memory), before = to_host(first);
  for (int pass = 0; pass < 4; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    forward_new_batch(plan, g, gb, n, pass, 0.37f, 2);
    plan.backward(
        {},
        [&](int i, const Event&) {
          if (i == dense) copy(early, first, g.stream());  // at the dense layer's end: "a" is still to come
        },
        g.stream());
    synchronize(g.stream());
    const Tensor got = to_host(early), now = to_host(first);
    EXPECT_EQ(std::memcmp(got.data(), before.data(), before.numel() * sizeof(float)), 0)
        << "the copy enqueued at the dense layer's end ran after the convolution's backward";
    EXPECT_NE(std::memcmp(now.data(), before.data(), before.numel() * sizeof(float)), 0) << "a new gradient each pass";
    before = now;
  }
}

// Batch-norm statistics at ResNet-50's sizes, far beyond the layer cases' one to four
// blocks: tens to hundreds of blocks, each thread up to kBnRowsPerThread rows, and the
// finalize run by the block that finishes last (kernels/batch_norm.h). The GPU's forward and backward
// statistics agree with the host's, pass after pass: each leaves its sums and its count
// of finished blocks at zero for the next.
enum BnSlot { kRunMean, kRunVar, kMean, kInvStd, kFwdCoef, kGradGamma, kGradBeta, kBwdCoef, kBnSlots };
struct BnBuffers {  // the inputs, the f64 sums, the u32 count, and every result (f32)
  Tensor x, dy, y, gamma, beta, sums, tickets, f[kBnSlots];
};

// x with a mean of 2 to 3 per channel, well off zero, as a convolution's output has; dy
// partly along x, so that neither Σdy nor Σdy·(x − mean) cancels to a rounding-sized
// total (the host and the GPU add rows in different groups); with relu_masked, a relu's
// output y that masks a third of dy.
template <typename S, typename C>
void bn_test_inputs(int64_t rows, int64_t channels, bool relu_masked, std::vector<S>& x, std::vector<S>& dy,
                    std::vector<S>& y) {
  const int64_t n = rows * channels;
  x.resize(static_cast<size_t>(n));
  dy.resize(x.size());
  y.resize(relu_masked ? x.size() : 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / channels, c = i % channels;
    const auto k = static_cast<size_t>(i);
    const float xv = 2.f + 0.25f * static_cast<float>(c % 5) + std::sin(0.37f * static_cast<float>(r) + 0.11f * c);
    x[k] = C::store(xv);
    dy[k] = C::store(0.1f * (xv - 2.5f) + 0.05f * std::cos(0.23f * static_cast<float>(r) + 0.7f * c) + 0.02f);
    if (relu_masked) y[k] = C::store((r + c) % 3 ? 1.f : 0.f);
  }
}

template <typename S, typename C>
void check_bn_statistics_at_scale(int64_t rows, int64_t channels, DType dtype, bool relu_masked) {
  SCOPED_TRACE(cat(rows, " rows x ", channels, " channels, ", dtype_name(dtype), relu_masked ? ", relu-masked" : ""));
  const int64_t n = rows * channels;
  std::vector<S> x, dy, y;
  bn_test_inputs<S, C>(rows, channels, relu_masked, x, dy, y);
  std::vector<float> gamma(static_cast<size_t>(channels)), beta(gamma.size(), 0.1f);
  for (int64_t c = 0; c < channels; ++c) gamma[static_cast<size_t>(c)] = 1.f + 0.01f * static_cast<float>(c);
  const int64_t sizes[kBnSlots] = {channels,     channels, channels, channels,
                                   3 * channels, channels, channels, 4 * channels};
  Memory memory;
  const auto gpu = memory.on(Device::cuda(0));
  OwnedStream owned(Device::cuda(0));
  const Stream& stream = owned.get();
  const Stream host = Stream::host(4);
  auto make = [&](Allocator& a, const Stream& on) {
    BnBuffers b;
    auto put = [&](const void* data, int64_t count, DType t) {
      return clone_to(Tensor::wrap(const_cast<void*>(data), {count}, t), a, on);
    };
    b.x = put(x.data(), n, dtype);
    b.dy = put(dy.data(), n, dtype);
    if (relu_masked) b.y = put(y.data(), n, dtype);
    b.gamma = put(gamma.data(), channels, DType::kF32);
    b.beta = put(beta.data(), channels, DType::kF32);
    b.sums = Tensor::empty({2 * channels}, DType::kF64, a, on);
    b.tickets = Tensor::empty({1}, DType::kI32, a, on);
    zero(b.sums, on);
    zero(b.tickets, on);
    for (int k = 0; k < kBnSlots; ++k) {
      b.f[k] = Tensor::empty({sizes[k]}, DType::kF32, a, on);
      zero(b.f[k], on);
    }
    std::vector<float> one(static_cast<size_t>(channels), 1.f);
    copy(b.f[kRunVar], Tensor::wrap(one.data(), {channels}, DType::kF32), on);
    synchronize(on);
    return b;
  };
  auto pass = [&](BnBuffers& b, const Stream& on) {
    auto* tickets = reinterpret_cast<uint32_t*>(b.tickets.data_as<int32_t>());
    const kernels::BnForwardFinalize<S, C> fwd{b.sums.data_as<double>(),
                                               b.x.data_as<S>(),
                                               b.gamma.data_as<float>(),
                                               b.beta.data_as<float>(),
                                               b.f[kRunMean].data_as<float>(),
                                               b.f[kRunVar].data_as<float>(),
                                               b.f[kMean].data_as<float>(),
                                               b.f[kInvStd].data_as<float>(),
                                               b.f[kFwdCoef].data_as<float>(),
                                               rows,
                                               channels,
                                               1e-5f,
                                               0.1f};
    kernels::bn_forward_statistics(on, fwd, tickets);
    const kernels::BnBackwardFinalize bwd{b.sums.data_as<double>(),
                                          b.gamma.data_as<float>(),
                                          b.f[kMean].data_as<float>(),
                                          b.f[kInvStd].data_as<float>(),
                                          b.f[kGradGamma].data_as<float>(),
                                          b.f[kGradBeta].data_as<float>(),
                                          b.f[kBwdCoef].data_as<float>(),
                                          rows,
                                          channels};
    kernels::bn_backward_statistics<S, C>(on, b.x.data_as<S>(), b.dy.data_as<S>(),
                                          relu_masked ? b.y.data_as<S>() : nullptr, bwd, tickets);
    synchronize(on);
  };
  BnBuffers want = make(*memory.host(), host), got = make(*gpu, stream);
  const char* names[kBnSlots] = {"running mean",    "running variance",     "saved mean",
                                 "saved 1/std",     "forward coefficients", "gamma's gradient",
                                 "beta's gradient", "backward coefficients"};
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(cat("pass ", p + 1));
    pass(want, host);
    pass(got, stream);
    for (int k = 0; k < kBnSlots; ++k) expect_close(got.f[k], want.f[k], names[k], 1e-3);
    const Tensor sums = to_host(got.sums), tickets = to_host(got.tickets);
    for (int64_t c = 0; c < 2 * channels; ++c) ASSERT_EQ(sums.data_as<double>()[c], 0.0) << "sum " << c << " left";
    EXPECT_EQ(tickets.data_as<int32_t>()[0], 0) << "the count of finished blocks was left at non-zero";
  }
}

TEST(CudaBackend, BatchNormStatisticsOverManyBlocksAgreeWithTheHost) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  // ResNet-50's first stage at batch 16 (packed: 64 channels; 25 to 49 blocks), its last
  // (2048 channels, 7x7), a channel count that no pack divides (scalar sums), a million
  // rows of one or two packs (a warp over 16 or 32 rows; 64 to 128 blocks), and 4096
  // channels of 8192 rows (256 to 512 blocks).
  const std::pair<int64_t, int64_t> shapes[] = {
      {16 * 56 * 56, 64}, {16 * 7 * 7, 2048}, {8 * 28 * 28, 6}, {1 << 20, 8}, {8192, 4096}};
  for (const auto& [rows, channels] : shapes) {
    check_bn_statistics_at_scale<float, kernels::F32>(rows, channels, DType::kF32, false);
    check_bn_statistics_at_scale<uint16_t, kernels::F16Codec>(rows, channels, DType::kF16, true);
    check_bn_statistics_at_scale<uint16_t, kernels::BF16Codec>(rows, channels, DType::kBF16, false);
  }
}

// A training plan's convolution searches land in the cache file, one line per pass and
// shape, for this GPU; a second backend on the same file reads them and searches
// nothing, so it leaves the file as it was.
TEST(CudaBackend, KeepsItsConvolutionChoicesInAFileForTheNextRun) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  testing::TempDir dir;
  Memory memory;
  backend::BackendOptions o;
  o.memory = memory.on(Device::cuda(0));
  o.algorithm_cache = (dir.path() / "algorithms.tsv").string();
  auto read = [&] {
    std::ifstream in(o.algorithm_cache);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  std::string described;  // "cuda:0 (GPU NAME, cuDNN ...), ..."
  auto train_plan = [&] {
    ConvOptions same;
    same.pad = 1;
    Graph g({3, 9, 9});
    g.conv(g.conv(g.input(), "a", 8, same), "b", 4, same);
    auto b = backend::make_backend(Device::cuda(0), 1, o);
    described = b->describe();
    g.set_backend(b, o.memory);
    g.materialize(3);
    g.plan(2, Layout::kNHWC, true, true);
  };
  train_plan();
  const std::string first = read();
  const size_t open = described.find('('), name_end = described.find(", cuDNN");
  ASSERT_TRUE(open != std::string::npos && name_end != std::string::npos) << described;
  const std::string gpu = described.substr(open + 1, name_end - open - 1);
  size_t lines = 0;
  for (size_t at = first.find('\n'); at != std::string::npos; at = first.find('\n', at + 1)) ++lines;
  EXPECT_EQ(lines, 1u + 5u) << first;  // the header; fwd and bwd_filter of each, bwd_data of b
  EXPECT_NE(first.find("\n" + gpu + " sm_"), std::string::npos) << first;
  EXPECT_NE(first.find("\tbwd_filter in[2, 3, 9, 9]"), std::string::npos) << first;
  train_plan();
  EXPECT_EQ(read(), first);
}

}  // namespace
}  // namespace cohort
