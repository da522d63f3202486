// The CUDA backend where a GPU is present; SKIPPED where none is.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/device_probe.h"
#include "core/status.h"

namespace {

TEST(CudaBackend, CreatesHandlesAndReportsNetworksUnsupported) {
  const cohort::CudaProbe probe = cohort::probe_cuda();
  if (probe.device_count == 0) GTEST_SKIP() << "no GPU: " << probe.why;
  auto backend = cohort::backend::make_cuda_backend(0);
  EXPECT_EQ(backend->name(), "cuda:0");
  try {
    backend->compile({}, {}, {});
    FAIL() << "no error";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.code(), cohort::Code::kUnsupported);
  }
}

}  // namespace
