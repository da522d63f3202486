// The NCCL transport on one rank: allreduce and broadcast of device memory. Needs a
// GPU; reports SKIPPED without one.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "comm/nccl/nccl_transport.h"
#include "runtime/mpi_process.h"

namespace cohort::comm {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CommNccl, AllreduceAndBroadcastOnDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  mpi_process::ensure_initialized();
  NcclTransport t(MPI_COMM_WORLD, 0);
  std::vector<float> host = {1, 2, 3, 4};
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, sizeof(float) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), sizeof(float) * 4, cudaMemcpyHostToDevice), cudaSuccess);
  t.allreduce(dev, 4, DType::kF32, kernels::Reduce::kSum);
  t.broadcast(dev, sizeof(float) * 4, 0);
  std::vector<float> back(4);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[static_cast<size_t>(i)], host[static_cast<size_t>(i)] * t.size());
  cudaFree(dev);
}

}  // namespace
}  // namespace cohort::comm
