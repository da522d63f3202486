#include "tensor/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/strings.h"
#include "tensor/device_api.h"
#include "tensor/tensor.h"

#if COHORT_HAVE_CUDA
#  include <cuda_runtime_api.h>
#endif

namespace cohort {
namespace {

std::string bytes_text(size_t n) { return format_bytes(static_cast<double>(n)); }

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes, const Stream&) override {
    return allocate_host(bytes, false, shared_from_this());
  }
  std::string describe() const override { return "host (64-byte aligned)"; }
};

class PinnedAllocator final : public PinnedHostAllocator {
 public:
  PinnedAllocator() { probe(); }
  Device device() const override { return pinned_ ? Device{Device::Kind::kCudaHost, 0} : Device::cpu(); }
  bool pinned() const override { return pinned_; }
  std::shared_ptr<Storage> allocate(size_t bytes, const Stream&) override {
#if COHORT_HAVE_CUDA
    if (pinned_) {
      void* p = nullptr;
      cudaError_t rc = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
      if (rc != cudaSuccess) {
        cudaGetLastError();
        fail(Code::kOutOfMemory, "cannot allocate ", bytes_text(bytes),
             " of pinned host memory (cudaHostAlloc: ", cudaGetErrorString(rc),
             "); lower prefetch or batch_size, or check the memlock limit (ulimit -l)");
      }
      return std::make_shared<Storage>(
          p, bytes, device(), [](void* q) { cudaFreeHost(q); }, shared_from_this());
    }
#endif
    return allocate_host(bytes, false, shared_from_this());
  }
  std::string describe() const override {
    return pinned_ ? "pinned host (cudaHostAlloc)" : cat("plain host memory, not pinned (", why_, ")");
  }

 private:
  void probe() {
#if COHORT_HAVE_CUDA
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      why_ = cat("no CUDA driver: ", cudaGetErrorString(rc));
      return;
    }
    if (count == 0) {
      why_ = "no CUDA device";
      return;
    }
    pinned_ = true;
#else
    why_ = "this build of cohort has no CUDA";
#endif
  }
  bool pinned_ = false;
  std::string why_;
};

// ---- the caching allocator ----

struct Block {
  void* ptr = nullptr;
  size_t size = 0;           // the bin size
  void* stream = nullptr;    // the stream it was allocated on (native handle)
  std::vector<Stream> uses;  // other streams that use it (record_stream)
};

// Everything the allocator knows; shared with the storages it hands out, so a block
// freed after the allocator itself is gone still returns here.
struct CacheState {
  CacheState(Device d, DeviceApi& a) : device(d), api(a) {}
  ~CacheState() {
    for (Pending& p : pending)
      for (const Event& e : p.events) e.synchronize();
    for (auto& [stream, blocks] : free)
      for (const auto& [size, b] : blocks) release(b);
    for (Pending& p : pending) release(p.block);
  }
  CacheState(const CacheState&) = delete;
  CacheState& operator=(const CacheState&) = delete;

  struct Pending {
    Block* block;
    std::vector<Event> events;
  };
  using FreeSet = std::set<std::pair<size_t, Block*>>;

  Device device;
  DeviceApi& api;
  std::mutex mu;
  std::map<void*, FreeSet> free;  // by stream
  std::unordered_map<void*, Block*> active;
  std::vector<Pending> pending;  // freed, waiting for other streams
  MemoryStats stats;

  void release(Block* b) {
    api.deallocate(device.id, b->ptr);
    stats.reserved -= b->size;
    ++stats.device_frees;
    delete b;
  }
  // Pending blocks whose streams are done join their stream's free set.
  void collect() {
    std::erase_if(pending, [&](Pending& p) {
      for (const Event& e : p.events)
        if (!e.ready()) return false;
      p.block->uses.clear();
      free[p.block->stream].insert({p.block->size, p.block});
      return true;
    });
  }
  // Gives every cached block no stream uses back to the device.
  void release_free() {
    collect();
    for (auto& [stream, blocks] : free)
      for (const auto& [size, b] : blocks) release(b);
    free.clear();
  }
  void give_back(void* ptr) {
    std::lock_guard lock(mu);
    auto it = active.find(ptr);
    if (it == active.end()) return;  // cannot happen: storages free once
    Block* b = it->second;
    active.erase(it);
    stats.in_use -= b->size;
    if (b->uses.empty()) {
      free[b->stream].insert({b->size, b});
      return;
    }
    Pending p{b, {}};
    try {
      for (const Stream& s : b->uses) p.events.push_back(api.record(s));
    } catch (const Error&) {
      return;  // the device failed: keep the block out of the cache (it stays reserved)
    }
    pending.push_back(std::move(p));
  }
};

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(Device device, DeviceApi& api) : state_(std::make_shared<CacheState>(device, api)) {}
  Device device() const override { return state_->device; }

  std::shared_ptr<Storage> allocate(size_t bytes, const Stream& stream) override {
    const size_t size = caching_bin(bytes);
    CacheState& s = *state_;
    Block* b = nullptr;
    {
      std::lock_guard lock(s.mu);
      ++s.stats.requests;
      s.collect();
      auto fit = s.free.find(stream.native());
      if (fit != s.free.end()) {
        auto it = fit->second.lower_bound({size, nullptr});
        if (it != fit->second.end() && it->first == size) {
          b = it->second;
          fit->second.erase(it);
          ++s.stats.cache_hits;
        }
      }
      if (!b) b = fresh_block(size, bytes, stream);
      s.active[b->ptr] = b;
      s.stats.in_use += b->size;
      s.stats.peak_in_use = std::max(s.stats.peak_in_use, s.stats.in_use);
    }
    std::shared_ptr<CacheState> keep = state_;
    return std::make_shared<Storage>(
        b->ptr, bytes, s.device, [keep](void* p) { keep->give_back(p); }, shared_from_this());
  }

  void record_stream(const Storage& storage, const Stream& stream) override {
    std::lock_guard lock(state_->mu);
    auto it = state_->active.find(storage.data());
    require(it != state_->active.end(), "record_stream: the storage does not come from this allocator");
    Block* b = it->second;
    if (stream.native() == b->stream) return;
    for (const Stream& s : b->uses)
      if (s == stream) return;
    b->uses.push_back(stream);
  }

  MemoryStats stats() const override {
    std::lock_guard lock(state_->mu);
    return state_->stats;
  }

  void empty_cache() override {
    std::lock_guard lock(state_->mu);
    state_->release_free();
  }

  std::string describe() const override { return cat("caching allocator on ", state_->device.to_string()); }

 private:
  // A block from the device (caller holds the lock); on failure the cache is emptied
  // and the device asked once more.
  Block* fresh_block(size_t size, size_t bytes, const Stream& stream) {
    CacheState& s = *state_;
    void* p = s.api.allocate(s.device.id, size);
    if (!p) {
      s.release_free();
      p = s.api.allocate(s.device.id, size);
    }
    if (!p) {
      size_t free = 0, total = 0;
      const std::string device_has = s.api.memory_info(s.device.id, free, total)
                                         ? cat("; the device has ", bytes_text(total), " in all, ", bytes_text(free),
                                               " of it free (other processes' memory counts)")
                                         : std::string();
      fail(Code::kOutOfMemory, "cannot allocate ", bytes_text(bytes), " on ", s.device.to_string(),
           ": out of device memory (this process's cache holds ", bytes_text(s.stats.reserved), ", of which ",
           bytes_text(s.stats.in_use), " in use, at most ", bytes_text(s.stats.peak_in_use), " so far", device_has,
           "); lower batch_size or use a smaller model");
    }
    auto* b = new Block{p, size, stream.native(), {}};
    s.stats.reserved += size;
    s.stats.peak_reserved = std::max(s.stats.peak_reserved, s.stats.reserved);
    ++s.stats.device_allocations;
    return b;
  }

  std::shared_ptr<CacheState> state_;
};

}  // namespace

size_t caching_bin(size_t bytes) {
  constexpr size_t kSmall = size_t{1} << 20, kRound = 512;
  bytes = std::max<size_t>(bytes, 1);
  if (bytes <= kSmall) return (bytes + kRound - 1) / kRound * kRound;
  const size_t pow = std::bit_floor(bytes);  // 2^k <= bytes < 2^(k+1)
  const size_t step = pow / 4;
  return (bytes + step - 1) / step * step;
}

std::shared_ptr<Allocator> make_host_allocator() { return std::make_shared<HostAllocator>(); }

std::shared_ptr<PinnedHostAllocator> make_pinned_host_allocator() { return std::make_shared<PinnedAllocator>(); }

std::shared_ptr<Allocator> make_caching_allocator(Device device) {
  require(!device.is_host(), "the caching allocator is for device memory, not ", device.to_string());
  return std::make_shared<CachingAllocator>(device, device_api(device.kind));
}

std::shared_ptr<Allocator> make_caching_allocator(Device device, DeviceApi& api) {
  return std::make_shared<CachingAllocator>(device, api);
}

}  // namespace cohort
