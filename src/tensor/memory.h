// The allocators of one runtime: aligned host memory, pinned host memory (created on
// first use, since probing for a CUDA driver costs), and one caching allocator per
// device that is used. Owned by the runtime (or by a test); nothing process-wide.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "tensor/allocator.h"

namespace cohort {

class Memory {
 public:
  Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  const std::shared_ptr<Allocator>& host() const { return host_; }
  std::shared_ptr<PinnedHostAllocator> pinned();
  // The allocator for memory on `d`: host() for kCpu, pinned() for kCudaHost, the
  // device's caching allocator otherwise (kCuda, kTest).
  std::shared_ptr<Allocator> on(Device d);
  // The caching allocators made so far, with their statistics.
  std::vector<std::pair<Device, MemoryStats>> device_stats() const;
  // The statistics of `d`'s caching allocator: zeros where there is none (the host, whose
  // memory is neither cached nor counted, or a device nothing has allocated on yet).
  MemoryStats stats_of(Device d) const;
  // Gives the memory every caching allocator holds and no stream still uses back to its
  // device (Allocator::empty_cache).
  void empty_caches();

 private:
  std::shared_ptr<Allocator> host_;
  mutable std::mutex mu_;
  std::shared_ptr<PinnedHostAllocator> pinned_;
  std::map<std::pair<int, int>, std::shared_ptr<Allocator>> devices_;  // (kind, id)
};

}  // namespace cohort
