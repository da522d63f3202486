// The NCCL transport on one rank: allreduce and broadcast of device memory, the device
// scale kernel against the host kernels, and a runtime's engine choosing NCCL for CUDA
// tensors (every op, scales, f16) while host tensors stay on MPI. Needs a GPU; reports
// SKIPPED without one.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/nccl/nccl_transport.h"
#include "kernels/reduce.h"
#include "runtime/mpi_process.h"
#include "runtime/runtime.h"

namespace cohort::comm {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CommNccl, AllreduceAndBroadcastOnDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  mpi_process::ensure_initialized();
  NcclTransport t(MPI_COMM_WORLD, 0, make_caching_allocator(Device::cuda(0)));
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

// Device memory holding `host`, freed with the object.
struct DeviceCopy {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceCopy(const Tensor& host) : bytes(host.nbytes()) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(ptr); }
  DeviceCopy(const DeviceCopy&) = delete;
  Tensor view(const Tensor& like) const {
    return Tensor::wrap(ptr, like.shape(), like.dtype(), {Device::Kind::kCuda, 0});
  }
};

Tensor iota(DType t, const Shape& shape, double scale = 1.0) {
  Tensor x = Tensor::empty(shape, t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = (static_cast<double>(i % 7) - 2.0) * scale;
    switch (t) {
      case DType::kF32:
        x.data_as<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF64:
        x.data_as<double>()[i] = v;
        break;
      case DType::kI32:
        x.data_as<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kI64:
        x.data_as<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      case DType::kU8:
        x.data_as<uint8_t>()[i] = static_cast<uint8_t>(i % 7);
        break;
      case DType::kF16:
        x.data_as<uint16_t>()[i] = kernels::float_to_half(static_cast<float>(v));
        break;
      case DType::kBF16:
        x.data_as<uint16_t>()[i] = kernels::float_to_bf16(static_cast<float>(v));
        break;
    }
  }
  return x;
}

TEST(CommNccl, DeviceScaleMatchesTheHostKernelsForEveryDtype) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  mpi_process::ensure_initialized();
  NcclTransport t(MPI_COMM_WORLD, 0, make_caching_allocator(Device::cuda(0)));
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kU8}) {
    Tensor host = iota(type, {1000});
    DeviceCopy dev(host);
    t.scale(dev.ptr, 1000, type, 0.37);
    kernels::scale(host.data(), 1000, type, 0.37);
    Tensor back = to_host(dev.view(host));
    EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0) << dtype_name(type);
  }
}

TEST(CommNccl, RuntimeRunsDeviceTensorsOnNcclAndHostTensorsOnMpi) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  Config config;  // device=auto: a visible GPU serves collectives of CUDA tensors
  Runtime rt(config);
  ASSERT_EQ(rt.collective_gpu(), 0);  // DeviceCopy::view labels tensors cuda:0
  Engine& engine = rt.engine();
  const int n = rt.size();
  // Allreduce with average and scales in f32 and f16, out of place.
  for (DType type : {DType::kF32, DType::kF16}) {
    Tensor host = iota(type, {33, 3});
    DeviceCopy in(host), out(host);
    TensorEntry e;
    e.name = cat("avg.", dtype_name(type));
    e.op = ReduceOp::kAverage;
    e.prescale = 4.0;
    e.postscale = 0.25;
    e.input = in.view(host);
    e.output = out.view(host);
    Status s = engine.submit(e)->wait();
    ASSERT_TRUE(s.is_ok()) << s.message();
    Tensor back = to_host(e.output);
    for (int64_t i = 0; i < host.numel(); ++i) {
      double x = type == DType::kF32 ? host.data_as<float>()[i] : kernels::half_to_float(host.data_as<uint16_t>()[i]);
      double got = type == DType::kF32 ? back.data_as<float>()[i] : kernels::half_to_float(back.data_as<uint16_t>()[i]);
      ASSERT_NEAR(got, x, 1e-3) << dtype_name(type) << " element " << i << " over " << n << " ranks";
    }
  }
  // Broadcast, allgather, reducescatter and alltoall of device tensors; results on the device.
  Tensor host = iota(DType::kF32, {static_cast<int64_t>(n) * 2, 2});
  DeviceCopy dev(host);
  TensorEntry b;
  b.name = "bcast";
  b.type = OpType::kBroadcast;
  b.input = dev.view(host);
  ASSERT_TRUE(engine.submit(b)->wait().is_ok());
  for (OpType type : {OpType::kAllgather, OpType::kReducescatter, OpType::kAlltoall}) {
    TensorEntry e;
    e.name = op_type_name(type);
    e.type = type;
    e.input = dev.view(host);
    auto req = engine.submit(e);
    Status s = req->wait();
    ASSERT_TRUE(s.is_ok()) << op_type_name(type) << ": " << s.message();
    Tensor out = req->output();
    EXPECT_EQ(out.device().kind, Device::Kind::kCuda) << op_type_name(type);
    if (n == 1) {
      Tensor back = to_host(out);
      EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0) << op_type_name(type);
    }
  }
  // Host tensors in the same runtime still reduce over MPI.
  Tensor h = iota(DType::kF32, {5});
  TensorEntry he;
  he.name = "host";
  he.input = h;
  ASSERT_TRUE(engine.submit(he)->wait().is_ok());
  EXPECT_EQ(h.data_as<float>()[0], -2.0f * static_cast<float>(n));
}

}  // namespace
}  // namespace cohort::comm
