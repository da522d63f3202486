// The test device (Device::Kind::kTest): host memory behind the DeviceApi, so that the
// code which follows a tensor's device — the caching allocator, copies, the
// optimizer's, the loss scaler's and the trainer's device paths — runs in CPU tests
// exactly as it would on a GPU, and a test can look into that memory. Work runs
// inline; streams are numbered. Events complete at once unless a test holds them
// (hold_events), which is how stream-ordered reuse is tested without a GPU.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/device_api.h"

namespace cohort {

class TestDevice final : public DeviceApi {
 public:
  static TestDevice& instance();

  const char* name() const override { return "test"; }
  void* allocate(int id, size_t bytes) override;
  void deallocate(int id, void* p) override;
  // With a capacity set: the capacity in all, and what is not live of it.
  bool memory_info(int id, size_t& free, size_t& total) override;
  void copy(void* dst, const void* src, size_t bytes, const Stream& stream) override;
  void zero(void* dst, size_t bytes, const Stream& stream) override;
  Stream create_stream(int id) override;
  void destroy_stream(const Stream&) override {}
  Event record(const Stream& stream) override;
  void synchronize(const Stream& stream) override;

  // ---- for tests ----
  // While on, events recorded from now on stay incomplete until release_events()
  // (or a synchronize of their stream).
  void hold_events(bool on);
  void release_events();
  // Allocations fail (return nullptr) while more than `bytes` would be live; 0: never.
  void set_capacity(size_t bytes);
  size_t live_bytes() const { return live_bytes_.load(); }
  uint64_t allocations() const { return allocations_.load(); }
  // Copies and fills that the calling thread gave the device's default stream (a null
  // handle), which on a GPU wait for the whole device first.
  static uint64_t default_stream_work_here();

 private:
  struct Flag;
  class TestEvent;
  TestDevice() = default;

  std::mutex mu_;
  bool hold_ = false;
  std::vector<std::shared_ptr<Flag>> held_;  // events not complete yet
  std::map<void*, size_t> sizes_;            // live allocations
  size_t capacity_ = 0;
  std::atomic<size_t> live_bytes_{0};
  std::atomic<uint64_t> allocations_{0};
  std::atomic<uintptr_t> next_stream_{1};
};

}  // namespace cohort
