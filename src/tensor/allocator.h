// Allocators: where tensors get their memory. A runtime owns one set (tensor/memory.h):
// aligned host memory, pinned host memory, and a caching allocator per device. Nothing
// here is process-global, so two runtimes (or a test) keep their memory apart.
//
// Memory from an allocator is not zeroed; Tensor::empty(shape, dtype) (host, zeroed) is
// the exception and says so. A Storage keeps its allocator alive, so memory handed out
// before a runtime is destroyed stays valid and is returned when its last tensor goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/device.h"

namespace cohort {

class DeviceApi;
class Storage;

// What an allocator has done; bytes are counted as the allocator rounds them.
struct MemoryStats {
  size_t in_use = 0;    // bytes handed out and not yet returned
  size_t reserved = 0;  // bytes held from the device: in use, cached, or waiting on streams
  size_t peak_in_use = 0;
  size_t peak_reserved = 0;
  uint64_t requests = 0;            // allocate() calls
  uint64_t cache_hits = 0;          // served from the cache
  uint64_t device_allocations = 0;  // served by the device (cudaMalloc)
  uint64_t device_frees = 0;        // blocks given back to the device (empty_cache, retries)
};

class Allocator : public std::enable_shared_from_this<Allocator> {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` of memory on device(), first used in the order of `stream` (a stream of
  // device(); ignored on the host). Not zeroed. Throws kOutOfMemory naming the size,
  // the device and what the allocator holds.
  virtual std::shared_ptr<Storage> allocate(size_t bytes, const Stream& stream = {}) = 0;
  // `storage` is also used by work on `stream` (another stream than the one it was
  // allocated on): once freed, it is not handed out again before that work is done.
  virtual void record_stream(const Storage& storage, const Stream& stream) {}
  virtual MemoryStats stats() const { return {}; }
  // Gives cached memory that no stream still uses back to the device.
  virtual void empty_cache() {}
  // One line for logs and errors: "host (aligned)", "pinned host (cudaHostAlloc)", ...
  virtual std::string describe() const = 0;
};

// 64-byte aligned host memory (plain malloc-family memory, freed at once).
std::shared_ptr<Allocator> make_host_allocator();

// Page-locked host memory, for batches that are copied to a GPU: cudaHostAlloc where a
// CUDA driver is present, plain aligned host memory otherwise (pinned() says which,
// and describe() says why). Its storage's device is kCudaHost when pinned, else kCpu.
class PinnedHostAllocator : public Allocator {
 public:
  virtual bool pinned() const = 0;
};
std::shared_ptr<PinnedHostAllocator> make_pinned_host_allocator();

// Rounding of the caching allocator: requests up to 1 MiB round up to a multiple of
// 512 bytes; larger ones to the next of four sizes per power of two (2^k, 1.25·2^k,
// 1.5·2^k, 1.75·2^k), so a block is at most 25 % larger than asked. Blocks are reused
// only for requests of the same bin.
size_t caching_bin(size_t bytes);

// A caching allocator over a device's raw memory (device_api(device.kind), or `api`
// for tests): freed blocks stay cached per stream and are reused by requests of their
// bin on that stream at once (work on one stream runs in order); a block that
// record_stream() says another stream uses waits until events recorded on those
// streams at free time complete. When the device runs out of memory, the cache is
// emptied and the request retried once. Thread-safe.
std::shared_ptr<Allocator> make_caching_allocator(Device device);
std::shared_ptr<Allocator> make_caching_allocator(Device device, DeviceApi& api);

}  // namespace cohort
