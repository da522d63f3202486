// Devices, streams, events, allocators and copies on a machine without a GPU: the
// caching allocator runs over the test device (host memory behind the device
// interface, events a test can hold open), pinned memory falls back to plain host
// memory and says so.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/status.h"
#include "core/strings.h"
#include "tensor/allocator.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"
#include "tensor/test_device.h"
#include "tensor/tensor.h"

namespace cohort {
namespace {

constexpr Device kTestDevice{Device::Kind::kTest, 0};

// Each test starts with the test device in its default state.
class TestDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
  static void reset() {
    TestDevice& d = TestDevice::instance();
    d.release_events();
    d.hold_events(false);
    d.set_capacity(0);
  }
  TestDevice& dev = TestDevice::instance();
};

TEST(Caching, BinsRoundSmallRequestsTo512BytesAndLargeOnesToQuarterPowersOfTwo) {
  EXPECT_EQ(caching_bin(0), 512u);
  EXPECT_EQ(caching_bin(1), 512u);
  EXPECT_EQ(caching_bin(512), 512u);
  EXPECT_EQ(caching_bin(513), 1024u);
  EXPECT_EQ(caching_bin(size_t{1} << 20), size_t{1} << 20);
  const size_t mib = size_t{1} << 20;
  EXPECT_EQ(caching_bin(mib + 1), mib + mib / 4);
  EXPECT_EQ(caching_bin(5 * mib), 5 * mib);
  EXPECT_EQ(caching_bin(5 * mib + 1), 6 * mib);
  EXPECT_EQ(caching_bin(7 * mib + 1), 8 * mib);
  for (size_t b : {size_t{3}, size_t{70000}, 3 * mib + 7, 100 * mib + 1}) {
    EXPECT_GE(caching_bin(b), b);
    EXPECT_LE(caching_bin(b), b + b / 4 + 512) << b;
  }
}

TEST_F(TestDeviceTest, AFreedBlockIsReusedByItsBinOnItsStreamWithoutAskingTheDevice) {
  auto a = make_caching_allocator(kTestDevice, dev);
  OwnedStream s1(kTestDevice), s2(kTestDevice);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, DType::kF32, *a, s1);
    EXPECT_EQ(t.device(), kTestDevice);
    first = t.data();
  }
  MemoryStats st = a->stats();
  EXPECT_EQ(st.device_allocations, 1u);
  EXPECT_EQ(st.in_use, 0u);
  EXPECT_EQ(st.reserved, 4096u);
  // Same bin (4000 and 3900 bytes both round to 4096), same stream: the cached block.
  Tensor again = Tensor::empty({975}, DType::kF32, *a, s1);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(a->stats().cache_hits, 1u);
  EXPECT_EQ(a->stats().device_allocations, 1u);
  // Another stream does not take a block whose work it is not ordered after.
  Tensor other = Tensor::empty({1000}, DType::kF32, *a, s2);
  EXPECT_NE(other.data(), first);
  EXPECT_EQ(a->stats().device_allocations, 2u);
  // Another bin does not take it either.
  again = Tensor();
  Tensor bigger = Tensor::empty({2000}, DType::kF32, *a, s1);
  EXPECT_NE(bigger.data(), first);
  EXPECT_EQ(a->stats().device_allocations, 3u);
}

TEST_F(TestDeviceTest, ABlockUsedOnAnotherStreamWaitsForThatStreamBeforeReuse) {
  auto a = make_caching_allocator(kTestDevice, dev);
  OwnedStream compute(kTestDevice), comm(kTestDevice);
  Tensor t = Tensor::empty({256}, DType::kF32, *a, compute);
  void* block = t.data();
  a->record_stream(*t.storage(), comm);
  dev.hold_events(true);  // the work enqueued on `comm` is still running
  t = Tensor();
  Tensor next = Tensor::empty({256}, DType::kF32, *a, compute);
  EXPECT_NE(next.data(), block) << "reused while another stream may still read it";
  next = Tensor();
  dev.release_events();  // that work is done
  Tensor later = Tensor::empty({256}, DType::kF32, *a, compute);
  // The pending block joined the free blocks; either cached block of this bin serves.
  EXPECT_EQ(a->stats().device_allocations, 2u);
  EXPECT_EQ(a->stats().cache_hits, 1u);
  (void)later;
}

TEST_F(TestDeviceTest, StatisticsCountInUseReservedAndPeaksAndEmptyCacheGivesMemoryBack) {
  auto a = make_caching_allocator(kTestDevice, dev);
  const size_t before = dev.live_bytes();
  {
    Tensor x = Tensor::empty({128}, DType::kF32, *a);   // 512 B
    Tensor y = Tensor::empty({1024}, DType::kF32, *a);  // 4 KiB
    EXPECT_EQ(a->stats().in_use, 512u + 4096u);
    EXPECT_EQ(a->stats().peak_in_use, 512u + 4096u);
  }
  MemoryStats st = a->stats();
  EXPECT_EQ(st.in_use, 0u);
  EXPECT_EQ(st.reserved, 512u + 4096u);
  EXPECT_EQ(st.peak_in_use, 512u + 4096u);
  EXPECT_EQ(dev.live_bytes(), before + 512u + 4096u);
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved, 0u);
  EXPECT_EQ(a->stats().device_frees, 2u);
  EXPECT_EQ(dev.live_bytes(), before);
  EXPECT_EQ(a->stats().peak_reserved, 512u + 4096u);
}

TEST_F(TestDeviceTest, ARuntimesMemoryReportsEachDevicesCacheAndEmptiesThemAll) {
  Memory m;
  EXPECT_EQ(m.stats_of(Device::cpu()).requests, 0u) << "host memory is not counted";
  EXPECT_EQ(m.stats_of(kTestDevice).requests, 0u) << "nothing allocated there yet";
  const size_t before = dev.live_bytes();
  {
    Tensor x = Tensor::empty({256}, DType::kF32, *m.on(kTestDevice));  // 1 KiB
    EXPECT_EQ(m.stats_of(kTestDevice).in_use, 1024u);
    Tensor h = Tensor::empty({256}, DType::kF32, *m.on(Device::cpu()));
    EXPECT_EQ(m.stats_of(Device::cpu()).requests, 0u);
  }
  const MemoryStats st = m.stats_of(kTestDevice);
  EXPECT_EQ(st.in_use, 0u);
  EXPECT_EQ(st.reserved, 1024u);
  EXPECT_EQ(st.peak_in_use, 1024u);
  EXPECT_EQ(st.requests, 1u);
  EXPECT_EQ(st.device_allocations, 1u);
  m.empty_caches();
  EXPECT_EQ(m.stats_of(kTestDevice).reserved, 0u);
  EXPECT_EQ(m.stats_of(kTestDevice).device_frees, 1u);
  EXPECT_EQ(m.stats_of(kTestDevice).peak_reserved, 1024u) << "peaks stay";
  EXPECT_EQ(dev.live_bytes(), before);
}

TEST_F(TestDeviceTest, OutOfMemoryEmptiesTheCacheAndRetriesThenNamesTheSizeAndDevice) {
  auto a = make_caching_allocator(kTestDevice, dev);
  dev.set_capacity(dev.live_bytes() + 8192);
  { Tensor cached = Tensor::empty({1024}, DType::kF32, *a); }  // 4 KiB stay cached
  // 6 KiB does not fit beside the cached 4 KiB, but fits once they are given back.
  Tensor big = Tensor::empty({1536}, DType::kF32, *a);
  EXPECT_EQ(a->stats().device_frees, 1u);
  try {
    Tensor huge = Tensor::empty({4096}, DType::kF32, *a);
    FAIL() << "allocated beyond the device's capacity";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kOutOfMemory);
    const std::string what = e.what();
    EXPECT_NE(what.find("16.0 KiB"), std::string::npos) << what;
    EXPECT_NE(what.find("test:0"), std::string::npos) << what;
    // What the cache holds, and what the device says it has: the capacity, and what is
    // free of it beside the 6 KiB in use.
    size_t free = 0, total = 0;
    ASSERT_TRUE(dev.memory_info(0, free, total));
    EXPECT_EQ(total, dev.live_bytes() + 2048);
    EXPECT_EQ(free, 2048u);
    EXPECT_NE(what.find("cache holds 6.0 KiB, of which 6.0 KiB in use, at most 6.0 KiB so far"), std::string::npos)
        << what;
    EXPECT_NE(
        what.find(cat("the device has ", format_bytes(static_cast<double>(total)), " in all, 2.0 KiB of it free")),
        std::string::npos)
        << what;
  }
  dev.set_capacity(0);
  size_t free = 0, total = 0;
  EXPECT_FALSE(dev.memory_info(0, free, total)) << "without a capacity the test device cannot say";
}

TEST_F(TestDeviceTest, MemoryOutlivesItsAllocatorAndReturnsWhenTheLastTensorGoes) {
  const size_t before = dev.live_bytes();
  Tensor survivor;
  {
    auto a = make_caching_allocator(kTestDevice, dev);
    survivor = Tensor::empty({64}, DType::kF32, *a);
  }
  std::memset(survivor.data(), 1, survivor.nbytes());  // still valid memory
  EXPECT_GT(dev.live_bytes(), before);
  survivor = Tensor();
  EXPECT_EQ(dev.live_bytes(), before);
}

TEST_F(TestDeviceTest, EventsAreCompleteOnTheHostAndHeldOnTheTestDeviceUntilItsStreamIsWaitedFor) {
  EXPECT_TRUE(Event().ready());
  EXPECT_FALSE(Event().recorded());
  EXPECT_TRUE(record_event(Stream::host(4)).ready());
  OwnedStream s(kTestDevice), other(kTestDevice);
  EXPECT_TRUE(record_event(s).ready());
  dev.hold_events(true);
  Event e = record_event(s), f = record_event(other);
  EXPECT_TRUE(e.recorded());
  EXPECT_FALSE(e.ready());
  synchronize(s);  // completes what was recorded on s, not on other
  EXPECT_TRUE(e.ready());
  EXPECT_FALSE(f.ready());
  f.block(Stream());  // a host stream waits on the host
  EXPECT_TRUE(f.ready());
}

TEST(Pinned, WithoutADriverItIsPlainHostMemoryAndSaysWhy) {
  auto pinned = make_pinned_host_allocator();
  Tensor t = Tensor::empty({16}, DType::kF32, *pinned);
  ASSERT_NE(t.data(), nullptr);
  EXPECT_TRUE(t.device().is_host());
  if (pinned->pinned()) {
    EXPECT_EQ(t.device().kind, Device::Kind::kCudaHost);
    EXPECT_EQ(pinned->describe(), "pinned host (cudaHostAlloc)");
  } else {
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_NE(pinned->describe().find("not pinned ("), std::string::npos) << pinned->describe();
  }
  // Copies between host and pinned memory, both ways.
  Tensor host = Tensor::empty({16}, DType::kF32);
  for (int i = 0; i < 16; ++i) host.data_as<float>()[i] = static_cast<float>(i) * 0.5f;
  copy(t, host);
  Tensor back = Tensor::empty({16}, DType::kF32);
  copy(back, t);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back.data_as<float>()[i], static_cast<float>(i) * 0.5f);
}

TEST_F(TestDeviceTest, CopiesZeroAndAllocationsFollowTheTensorsDevice) {
  Memory memory;
  auto a = memory.on(kTestDevice);
  EXPECT_EQ(a->device(), kTestDevice);
  EXPECT_EQ(memory.on(kTestDevice), a);  // one cache per device
  EXPECT_EQ(memory.on(Device::cpu()), memory.host());
  Tensor host = Tensor::empty({2, 3}, DType::kI32);
  for (int i = 0; i < 6; ++i) host.data_as<int32_t>()[i] = i + 1;
  Tensor dev_t = clone_to(host, *a);
  EXPECT_EQ(dev_t.device(), kTestDevice);
  EXPECT_EQ(dev_t.shape(), host.shape());
  Tensor like = Tensor::empty_like(dev_t);  // from the same cache
  EXPECT_EQ(like.device(), kTestDevice);
  copy(like, dev_t);
  Tensor round = to_host(like);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(round.data_as<int32_t>()[i], i + 1);
  zero(like);
  EXPECT_EQ(to_host(like).data_as<int32_t>()[5], 0);
  EXPECT_EQ(memory.device_stats().size(), 1u);
  // Mismatched copies and borrowed device memory are refused with what was wrong.
  EXPECT_THROW(copy(Tensor::empty({5}, DType::kI32), dev_t), Error);
  EXPECT_THROW(copy(Tensor::empty({6}, DType::kF32), dev_t), Error);
  int32_t raw[6];
  Tensor borrowed = Tensor::wrap(raw, {6}, DType::kI32, kTestDevice);
  try {
    Tensor::empty_like(borrowed);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no allocator for test:0"), std::string::npos) << e.what();
  }
  // Host tensors with borrowed memory get host memory.
  float x[3];
  EXPECT_TRUE(Tensor::empty_like(Tensor::wrap(x, {3}, DType::kF32)).device().is_host());
}

TEST(Devices, NamesAndKinds) {
  EXPECT_EQ(Device::cpu().to_string(), "cpu");
  EXPECT_EQ(Device::cuda(1).to_string(), "cuda:1");
  EXPECT_EQ(kTestDevice.to_string(), "test:0");
  EXPECT_TRUE((Device{Device::Kind::kCudaHost, 0}).is_host());
  EXPECT_FALSE(kTestDevice.is_host());
  EXPECT_FALSE(Device::cuda(0).is_host());
  EXPECT_TRUE(Stream().is_host());
  EXPECT_EQ(Stream::host(3).threads(), 3);
  EXPECT_EQ(Stream::host(0).threads(), 1);
#if !COHORT_HAVE_CUDA
  EXPECT_THROW(device_api(Device::Kind::kCuda), Error);
#endif
}

}  // namespace
}  // namespace cohort
