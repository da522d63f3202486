// The pieces of execution on their own: the post-scale of averages, what a rank that
// has joined contributes, and the device transport created once every rank agrees and
// reached by an abort from any thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "comm/device_transport.h"
#include "comm/executor.h"
#include "comm/local/local_transport.h"

namespace cohort::comm {
namespace {

Meta reduction(ReduceOp op, double postscale, Shape shape = {4}, DType t = DType::kF32) {
  Meta m;
  m.op = op;
  m.postscale = postscale;
  m.shape = std::move(shape);
  m.dtype = t;
  return m;
}

TEST(CommExecution, AnAverageDividesByEveryRankAfterThePostscale) {
  EXPECT_DOUBLE_EQ(postscale_factor(reduction(ReduceOp::kAverage, 1.0), 4), 0.25);
  EXPECT_DOUBLE_EQ(postscale_factor(reduction(ReduceOp::kAverage, 3.0), 2), 1.5);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct})
    EXPECT_DOUBLE_EQ(postscale_factor(reduction(op, 3.0), 8), 3.0) << reduce_op_name(op);
  EXPECT_EQ(to_kernel(ReduceOp::kAverage), kernels::Reduce::kSum);
  EXPECT_EQ(to_kernel(ReduceOp::kProduct), kernels::Reduce::kProd);
}

// A host transport whose memory operations are observable.
class CountingTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "counting"; }
  bool supports(Device d) const override { return d.is_host(); }
  void and_words(std::vector<uint64_t>&) override {}
  std::vector<std::string> allgather_bytes(const std::string& mine) override { return {mine}; }
  void allreduce(void*, size_t, DType, kernels::Reduce) override {}
  void allgatherv(const void*, void*, const std::vector<size_t>&) override {}
  void broadcast(void*, size_t, int) override {}
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override {}
  void reduce_scatter(const void*, void*, const std::vector<size_t>&, DType, kernels::Reduce) override {}
  void barrier() override {}
  Tensor allocate(const Shape& shape, DType t) override {
    ++allocations;
    Tensor x = Tensor::empty(shape, t);
    std::memset(x.data(), 0xAB, x.nbytes());  // garbage that zero() must clear
    return x;
  }
  void zero(void* buf, size_t bytes) override {
    zeroed += bytes;
    Transport::zero(buf, bytes);
  }
  void abort_waits() override { ++aborts; }
  int allocations = 0;
  size_t zeroed = 0;
  std::atomic<int> aborts{0};
};

TEST(CommExecution, AJoinedRankContributesZerosInTheTransportsMemory) {
  CountingTransport t;
  Tensor z = joined_contribution(t, reduction(ReduceOp::kSum, 1.0, {3, 5}, DType::kF64));
  EXPECT_EQ(z.shape(), (Shape{3, 5}));
  EXPECT_EQ(z.dtype(), DType::kF64);
  EXPECT_EQ(t.allocations, 1);
  EXPECT_EQ(t.zeroed, 15 * sizeof(double));
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.data_as<double>()[i], 0.0);
  Tensor empty = joined_contribution(t, reduction(ReduceOp::kSum, 1.0, {0, 5}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST(CommExecution, TheDeviceTransportIsCreatedOnceAndOnlyWhenEveryRankCan) {
  CountingTransport control;
  int created = 0;
  DeviceTransportFactory f;
  f.device = {Device::Kind::kCuda, 0};
  f.create = [&] {
    ++created;
    return std::make_unique<CountingTransport>();
  };
  LazyDeviceTransport device(f);
  std::string error;
  Transport* t = device.get(control, &error);
  ASSERT_NE(t, nullptr) << error;
  EXPECT_EQ(device.get(control, &error), t);
  EXPECT_EQ(created, 1);

  DeviceTransportFactory none;
  none.unavailable = "no GPU is usable";
  LazyDeviceTransport missing(none);
  EXPECT_EQ(missing.get(control, &error), nullptr);
  EXPECT_EQ(error,
            "collectives of CUDA tensors need a device transport (NCCL) on every rank, but rank 0: no GPU is "
            "usable");
  std::string again;
  EXPECT_EQ(missing.get(control, &again), nullptr);
  EXPECT_EQ(again, error) << "every later device collective fails the same way";
}

TEST(CommExecution, AbortReachesTheDeviceTransportWhetherItExistsYetOrNot) {
  CountingTransport control;
  CountingTransport* made = nullptr;
  DeviceTransportFactory f;
  f.device = {Device::Kind::kCuda, 0};
  f.create = [&] {
    auto t = std::make_unique<CountingTransport>();
    made = t.get();
    return t;
  };
  LazyDeviceTransport before(f);
  before.abort();  // nothing created yet: nothing to stop
  std::string error;
  ASSERT_NE(before.get(control, &error), nullptr);
  EXPECT_EQ(made->aborts, 1) << "a device transport created after an abort starts aborted";

  LazyDeviceTransport after(f);
  ASSERT_NE(after.get(control, &error), nullptr);
  EXPECT_EQ(made->aborts, 0);
  std::thread other([&] { after.abort(); });  // from another thread, as Runtime does
  other.join();
  EXPECT_EQ(made->aborts, 1);
}

}  // namespace
}  // namespace cohort::comm
