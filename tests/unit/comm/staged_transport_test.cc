// Collectives of device tensors through host memory, for ranks that share a device:
// the staged transport over ranks as threads, with tensors on the test device (host
// memory behind the device interface); and which ranks of a node share a device.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "comm/local/local_transport.h"
#include "comm/staged/staged_transport.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"
#include "tensor/test_device.h"

namespace cohort::comm {
namespace {

constexpr Device kTest{Device::Kind::kTest, 0};

// Runs fn(transport, memory) on `ranks` threads, each with a staged transport over a
// local one.
template <typename Fn>
void on_ranks(int ranks, Fn fn) {
  auto world = std::make_shared<LocalWorld>(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Memory memory;
      StagedTransport t(std::make_unique<LocalTransport>(world, r), kTest, memory.pinned(), memory.on(kTest));
      fn(t, memory);
    });
  for (auto& th : threads) th.join();
}

Tensor on_device(Memory& m, const std::vector<float>& v) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::copy(v.begin(), v.end(), host.data_as<float>());
  return clone_to(host, *m.on(kTest));
}

// Runs one call of the transport, which must give no copy or fill to the device's
// default stream: on a GPU that waits for the whole device, which fails while the
// compute thread captures a CUDA graph.
template <typename Fn>
void own_stream(Fn fn) {
  const uint64_t before = TestDevice::default_stream_work_here();
  fn();
  EXPECT_EQ(TestDevice::default_stream_work_here(), before) << "the staged transport used the default stream";
}

std::vector<float> values(const Tensor& device) {
  const Tensor h = to_host(device);
  return {h.data_as<float>(), h.data_as<float>() + h.numel()};
}

TEST(StagedTransport, ReducesAndMovesDeviceTensorsThroughHostMemory) {
  on_ranks(3, [](StagedTransport& t, Memory& m) {
    const int r = t.rank();
    EXPECT_TRUE(t.supports(kTest));
    EXPECT_FALSE(t.supports(Device::cpu()));
    // allreduce, alone and several at once
    Tensor a = on_device(m, {1.f * r, 2.f, 3.f}), b = on_device(m, {10.f, 20.f * r});
    own_stream([&] { t.allreduce(a.data(), 3, DType::kF32, kernels::Reduce::kSum); });
    EXPECT_EQ(values(a), (std::vector<float>{3.f, 6.f, 9.f}));
    Tensor c = on_device(m, {1.f, 1.f});
    own_stream([&] { t.allreduce_many({{b.data(), 2}, {c.data(), 2}}, DType::kF32, kernels::Reduce::kMax); });
    EXPECT_EQ(values(b), (std::vector<float>{10.f, 40.f}));
    EXPECT_EQ(values(c), (std::vector<float>{1.f, 1.f}));
    // broadcast from rank 1
    Tensor d = on_device(m, {static_cast<float>(r), -1.f});
    own_stream([&] { t.broadcast(d.data(), d.nbytes(), 1); });
    EXPECT_EQ(values(d), (std::vector<float>{1.f, -1.f}));
    // allgatherv: rank r contributes r + 1 floats
    std::vector<float> mine(static_cast<size_t>(r + 1), static_cast<float>(r));
    Tensor send = on_device(m, mine);
    Tensor recv = t.allocate({6}, DType::kF32);
    own_stream([&] { t.allgatherv(send.data(), recv.data(), {4, 8, 12}); });
    EXPECT_EQ(values(recv), (std::vector<float>{0.f, 1.f, 1.f, 2.f, 2.f, 2.f}));
    // reduce_scatter: every rank gets its block of the sum
    Tensor full = on_device(m, {1.f, 2.f, 3.f});
    Tensor block = t.allocate({1}, DType::kF32);
    own_stream([&] { t.reduce_scatter(full.data(), block.data(), {1, 1, 1}, DType::kF32, kernels::Reduce::kSum); });
    EXPECT_EQ(values(block), (std::vector<float>{3.f * static_cast<float>(r + 1)}));
    // scale and zero on the device's memory
    own_stream([&] { t.scale(full.data(), 3, DType::kF32, 2.0); });
    EXPECT_EQ(values(full), (std::vector<float>{2.f, 4.f, 6.f}));
    own_stream([&] { t.zero(full.data(), full.nbytes()); });
    EXPECT_EQ(values(full), (std::vector<float>{0.f, 0.f, 0.f}));
  });
}

TEST(DeviceSharing, RanksOfANodeOnOneDeviceAreFoundAndNamed) {
  EXPECT_FALSE(device_sharing({"0000:3b:00.0", "0000:5e:00.0"}).shared);
  EXPECT_FALSE(device_sharing({"0000:3b:00.0"}).shared);
  const DeviceSharing two = device_sharing({"0000:3b:00.0", "0000:3b:00.0"});
  EXPECT_TRUE(two.shared);
  EXPECT_EQ(two.detail, "local ranks 0, 1 share device 0000:3b:00.0");
  const DeviceSharing mixed = device_sharing({"a", "b", "a", "b", "c"});
  EXPECT_EQ(mixed.detail, "local ranks 0, 2 share device a; local ranks 1, 3 share device b");
  EXPECT_FALSE(device_sharing({"no-gpu:0", "no-gpu:1"}).shared);
}

}  // namespace
}  // namespace cohort::comm
