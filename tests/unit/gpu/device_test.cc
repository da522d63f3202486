// The runtime's device choice on a machine with GPUs. Without a usable GPU every test
// here is reported as SKIPPED.
#include <gtest/gtest.h>

#include "runtime/device_probe.h"
#include "core/config.h"
#include "core/status.h"
#include "runtime/runtime.h"

namespace cohort {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_ = probe_cuda();
    if (probe_.device_count == 0) GTEST_SKIP() << "no usable GPU: " << probe_.why;
  }
  CudaProbe probe_;
};

TEST_F(GpuTest, AutoComputesAndReducesOnTheLocalRanksGpu) {
  Config config;
  Runtime rt(config);
  EXPECT_EQ(rt.collective_gpu(), rt.layout().local_rank % probe_.device_count);
  EXPECT_EQ(rt.device(), Device::cuda(rt.collective_gpu()));
  EXPECT_EQ(rt.cuda_device_count(), probe_.device_count);
}

TEST_F(GpuTest, CpuCanStillBeChosen) {
  Config config;
  config.set("device", "cpu");
  Runtime rt(config);
  EXPECT_EQ(rt.device().kind, Device::Kind::kCpu);
}

TEST_F(GpuTest, SelectingAMissingDeviceFailsWithAHint) {
  try {
    select_cuda_device(probe_.device_count + 7);
    FAIL() << "selecting a device that does not exist succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCuda);
    EXPECT_NE(std::string(e.what()).find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
