// The runtime's device choice on a machine with GPUs. Without a usable GPU every test
// here is reported as SKIPPED.
#include <gtest/gtest.h>

#include "runtime/device_probe.h"
#include "core/config.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/runtime.h"
#include "tensor/allocator.h"
#include "tensor/device_api.h"
#include "tensor/tensor.h"

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

// The runtime's memory on its GPU: a tensor comes from the compute device's cache,
// which counts it; more than the GPU has fails naming the cache's figures and the GPU's.
TEST_F(GpuTest, TheComputeDevicesMemoryIsCountedAndAnAllocationBeyondItNamesWhatTheGpuHas) {
  Config config;
  Runtime rt(config);
  std::shared_ptr<Allocator> cache = rt.memory().on(rt.device());
  size_t free = 0, total = 0;
  ASSERT_TRUE(device_api(Device::Kind::kCuda).memory_info(rt.device().id, free, total));
  EXPECT_GT(total, 0u);
  EXPECT_LE(free, total);
  const size_t before = rt.memory().stats_of(rt.device()).in_use;
  {
    Tensor x = Tensor::empty({1 << 20}, DType::kF32, *cache);  // 4 MiB
    const MemoryStats m = rt.memory().stats_of(rt.device());
    EXPECT_GE(m.in_use, before + (size_t{4} << 20));
    EXPECT_GE(m.peak_in_use, m.in_use);
    EXPECT_GE(m.device_allocations, 1u);
  }
  try {
    Tensor huge = Tensor::empty({static_cast<int64_t>(total / 4 + (int64_t{1} << 28))}, DType::kF32, *cache);
    FAIL() << "allocated more than the GPU has";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kOutOfMemory);
    const std::string what = e.what();
    EXPECT_NE(what.find("this process's cache holds"), std::string::npos) << what;
    EXPECT_NE(what.find("the device has " + format_bytes(static_cast<double>(total)) + " in all"), std::string::npos)
        << what;
  }
  EXPECT_EQ(rt.memory().stats_of(rt.device()).in_use, before);
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
