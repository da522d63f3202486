// The runtime's device choice, with GPUs faked in the device probe: in a build with
// CUDA models compute on the local rank's GPU, which also serves collectives of CUDA
// tensors; a build without it computes on the CPU and refuses device=cuda saying why;
// holding reductions during compute follows where compute runs.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/backend.h"
#include "runtime/device_probe.h"
#include "core/config.h"
#include "core/status.h"
#include "runtime/runtime.h"

namespace cohort {
namespace {

class DeviceChoice : public ::testing::Test {
 protected:
  void SetUp() override { fake_cuda_devices_for_testing(2); }
  void TearDown() override { fake_cuda_devices_for_testing(-1); }

  static Config with(const char* key, const char* value) {
    Config c;
    c.set(key, value);
    return c;
  }
};

TEST_F(DeviceChoice, TheFakeProbeReportsItsDevices) {
  EXPECT_EQ(probe_cuda().device_count, 2);
  fake_cuda_devices_for_testing(0);
  EXPECT_EQ(probe_cuda().why, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
}

TEST_F(DeviceChoice, AutoComputesOnTheLocalRanksGpuWhereTheBuildCan) {
  Runtime rt(Config{});
  EXPECT_EQ(rt.cuda_device_count(), 2);
  EXPECT_EQ(rt.collective_gpu(), rt.layout().local_rank % 2);
  std::string s = rt.device_summary();
  if (backend::cuda_backend_trains()) {
    EXPECT_EQ(rt.device(), Device::cuda(rt.collective_gpu()));
    EXPECT_EQ(s, "compute on cuda:0; 2 CUDA devices seen, cuda:0 serves collectives of CUDA tensors") << s;
  } else {
    EXPECT_EQ(rt.device().kind, Device::Kind::kCpu);
    EXPECT_EQ(s.rfind("compute on cpu (this build of cohort has no CUDA backend", 0), 0u) << s;
  }
}

TEST_F(DeviceChoice, CudaNeedsAGpuAndABuildThatComputesThere) {
  if (backend::cuda_backend_trains()) {
    Runtime rt(with("device", "cuda"));
    EXPECT_EQ(rt.device(), Device::cuda(0));
  } else {
    try {
      Runtime rt(with("device", "cuda"));
      FAIL() << "device=cuda created a runtime that would compute on the CPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kUnsupported);
      std::string m = e.what();
      EXPECT_NE(m.find("device=cuda was requested but this build of cohort has no CUDA backend"), std::string::npos)
          << m;
      EXPECT_NE(m.find("use --device=cpu, or a cohort built with the CUDA toolkit"), std::string::npos) << m;
    }
  }
  fake_cuda_devices_for_testing(0);
  try {
    Runtime rt(with("device", "cuda"));
    FAIL() << "device=cuda without a GPU created a runtime";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU is usable"), std::string::npos) << e.what();
  }
}

TEST_F(DeviceChoice, CpuLeavesTheGpusAlone) {
  Runtime rt(with("device", "cpu"));
  EXPECT_EQ(rt.device().kind, Device::Kind::kCpu);
  EXPECT_EQ(rt.collective_gpu(), -1);
  EXPECT_EQ(rt.cuda_device_count(), 0);
  EXPECT_EQ(rt.device_summary(), "compute on cpu; 0 CUDA devices (not probed: device=cpu)");
}

TEST_F(DeviceChoice, WithoutAGpuTheSummarySaysWhy) {
  fake_cuda_devices_for_testing(0);
  Runtime rt(Config{});
  EXPECT_EQ(rt.collective_gpu(), -1);
  EXPECT_EQ(rt.device_summary(),
            "compute on cpu; 0 CUDA devices (no CUDA device is visible (check CUDA_VISIBLE_DEVICES))");
}

// Whether an allreduce submitted inside a compute bracket waits for the bracket to end.
bool held_during_compute(Runtime& rt) {
  comm::Engine& engine = rt.engine();
  Tensor t = Tensor::empty({4}, DType::kF32);
  comm::TensorEntry e;
  e.name = "held.probe";
  e.input = t;
  engine.compute_begin();
  auto req = engine.submit(e);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // many engine cycles
  bool held = !req->test();
  engine.compute_end();
  EXPECT_TRUE(req->wait().is_ok());
  return held;
}

TEST_F(DeviceChoice, AutoHoldsReductionsWhileACpuComputesOnly) {
  Runtime autodetect(Config{});
  EXPECT_EQ(held_during_compute(autodetect), autodetect.device().is_host())
      << "comm_during_compute=auto on " << autodetect.device().to_string();
  Runtime cpu(with("device", "cpu"));
  EXPECT_TRUE(held_during_compute(cpu)) << "comm_during_compute=auto ran a reduction during CPU compute";
  Runtime hold(with("comm_during_compute", "hold"));
  EXPECT_TRUE(held_during_compute(hold));
  Runtime run(with("comm_during_compute", "run"));
  EXPECT_FALSE(held_during_compute(run));
}

}  // namespace
}  // namespace cohort
