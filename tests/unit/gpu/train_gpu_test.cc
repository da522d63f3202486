// Training on a GPU against the CPU: the same steps from the same parameters end at
// the same parameters (the step, the optimizer and the loss on the device), in f32 and,
// within their tolerances, in f16 with dynamic loss scaling and in bf16 (NHWC inside the
// plan, f32 master weights); and a checkpoint written by a GPU run loads into a CPU run and the
// other way round. SKIPPED where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device_probe.h"
#include "core/config.h"
#include "core/status.h"
#include "runtime/runtime.h"
#include "support/temp_dir.h"
#include "train/model.h"
#include "train/trainer.h"

namespace cohort::train {
namespace {

class GpuTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = probe_cuda();
    if (probe.device_count == 0) GTEST_SKIP() << "no usable GPU: " << probe.why;
  }
};

// Learning rates small enough that these steps do not amplify rounding: at lr 0.05 the
// loss on this data jumps to 17 (momentum) or 900 (Adam) in one step, and the CPU's own
// bf16 run then ends 8 % from its f32 run, so no tolerance could tell a fault from chaos.
Config config(const char* device, const char* optimizer) {
  Config c;
  c.set("device", device);
  c.set("tf32", "off");
  c.set("optimizer", optimizer);
  c.set("lr", std::string(optimizer) == "adam" ? "0.0001" : "0.01");
  c.set("compute_threads", "1");
  c.set("model", "mnist_cnn");
  c.set("num_classes", "10");
  return c;
}

struct Batch {
  Tensor images = Tensor::empty({16, 1, 28, 28}, DType::kF32);
  Tensor labels = Tensor::empty({16}, DType::kI32);
  explicit Batch(int step) {
    for (int64_t i = 0; i < images.numel(); ++i)
      images.data_as<float>()[i] = static_cast<float>(std::sin(0.013 * static_cast<double>(i) + step));
    for (int64_t i = 0; i < 16; ++i) labels.data_as<int32_t>()[i] = static_cast<int32_t>((i + step) % 10);
  }
};

// Parameters as host vectors.
std::vector<std::vector<float>> params(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Parameter& p : m.graph().params()) {
    const Tensor h = to_host(p.value);
    out.emplace_back(h.data_as<float>(), h.data_as<float>() + h.numel());
  }
  return out;
}

void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j)
      ASSERT_NEAR(a[i][j], b[i][j], tol * (1 + std::abs(b[i][j]))) << "parameter " << i << " element " << j;
}

std::vector<std::vector<float>> train(const char* device, const char* optimizer, int steps, std::vector<double>* losses,
                                      const std::string& save = "", const std::string& load = "",
                                      const std::vector<std::pair<std::string, std::string>>& extra = {},
                                      bool* replayed = nullptr) {
  Config c = config(device, optimizer);
  for (const auto& [key, value] : extra) c.set(key, value);
  auto rt = std::make_shared<Runtime>(c);
  auto model = Model::from_zoo(rt, "mnist_cnn", c);
  Trainer trainer(model, c);
  if (!load.empty()) {
    EXPECT_TRUE(trainer.load_checkpoint(load).has_value());
  }
  for (int s = 0; s < steps; ++s) {
    Batch b(s);
    const StepStats st = trainer.train_step(b.images, b.labels, 16);
    EXPECT_TRUE(st.updated) << "step " << s << " was skipped (loss scale " << trainer.loss_scale() << ")";
    if (losses) losses->push_back(st.loss);
  }
  if (!save.empty()) trainer.save_checkpoint(save, {});
  // With cuda_graphs=on the passes and the optimizer's update both replay graphs.
  if (replayed)
    *replayed =
        model->graph().plan(16, backend::Layout::kNCHW, true).replays_graphs() && trainer.optimizer().replays_update();
  auto out = params(*model);
  rt->shutdown();
  return out;
}

TEST_F(GpuTraining, StepsOnTheGpuEndWhereTheCpuDoes) {
  for (const char* optimizer : {"momentum", "adam", "lars"}) {
    SCOPED_TRACE(optimizer);
    std::vector<double> gpu_losses, cpu_losses;
    const auto gpu = train("cuda", optimizer, 5, &gpu_losses);
    const auto cpu = train("cpu", optimizer, 5, &cpu_losses);
    for (size_t i = 0; i < cpu_losses.size(); ++i) EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 2e-3) << "step " << i;
    expect_close(gpu, cpu, 2e-3);
  }
}

// `steps` momentum steps on the GPU with the options `extra`, against the CPU's f32 ones:
// losses and parameters within `tol`. Returns whether the GPU's passes replayed graphs.
bool follows_the_cpu(int steps, const std::vector<std::pair<std::string, std::string>>& extra, double tol,
                     const char* optimizer = "momentum") {
  std::vector<double> cpu_losses, losses;
  const auto cpu = train("cpu", optimizer, steps, &cpu_losses);
  bool replayed = false;
  const auto gpu = train("cuda", optimizer, steps, &losses, "", "", extra, &replayed);
  for (size_t i = 0; i < cpu_losses.size(); ++i)
    EXPECT_NEAR(losses[i], cpu_losses[i], tol * (1 + cpu_losses[i])) << "step " << i;
  expect_close(gpu, cpu, tol);
  return replayed;
}

TEST_F(GpuTraining, MixedPrecisionFollowsTheCpusF32Steps) {
  // f16 scales its loss (from 1024: no step of these overflows); bf16 needs no scaling
  SCOPED_TRACE("f16");
  follows_the_cpu(5, {{"precision", "f16"}, {"loss_scale_init", "1024"}}, 1e-2);
  SCOPED_TRACE("bf16");
  follows_the_cpu(5, {{"precision", "bf16"}, {"loss_scale_init", "1024"}}, 4e-2);
}

TEST_F(GpuTraining, StepsReplayedFromCudaGraphsFollowTheCpu) {
  // The first step runs eagerly, the second captures, the others replay; each step's
  // batch is new memory (the plan copies it in), and f16 scales its loss, its unscale
  // and overflow check inside the update's graph.
  for (const auto& [precision, tol] : {std::pair{"f32", 2e-3}, std::pair{"f16", 1e-2}}) {
    SCOPED_TRACE(precision);
    EXPECT_TRUE(follows_the_cpu(6, {{"precision", precision}, {"loss_scale_init", "1024"}, {"cuda_graphs", "on"}}, tol))
        << "a capture failed: the log says why";
  }
  // Adam's update graph reads its bias corrections, which change every step, from memory.
  SCOPED_TRACE("adam");
  EXPECT_TRUE(follows_the_cpu(6, {{"cuda_graphs", "on"}}, 2e-3, "adam")) << "a capture failed: the log says why";
}

TEST_F(GpuTraining, ACheckpointOfOneDeviceResumesOnTheOther) {
  testing::TempDir dir;
  const std::string from_gpu = (dir.path() / "gpu").string(), from_cpu = (dir.path() / "cpu").string();
  const auto gpu_saved = train("cuda", "momentum", 3, nullptr, from_gpu);
  const auto cpu_loaded = train("cpu", "momentum", 0, nullptr, "", from_gpu);
  expect_close(cpu_loaded, gpu_saved, 0);  // bit for bit: copies only
  const auto cpu_saved = train("cpu", "momentum", 2, nullptr, from_cpu, from_gpu);
  const auto gpu_loaded = train("cuda", "momentum", 0, nullptr, "", from_cpu);
  expect_close(gpu_loaded, cpu_saved, 0);
}

}  // namespace
}  // namespace cohort::train
