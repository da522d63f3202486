// Where memory lives and where work runs: a device, the streams work is ordered on,
// and the events that say when work recorded on a stream is done. Small value types
// that every layer passes around (as PyTorch's c10 Device, Stream and Event do).
//
// On the host a stream runs its work inline, on the calling thread, and every event is
// complete when it is made: code written against streams and events costs nothing
// there. On a GPU a stream is a CUDA stream and work enqueued on it runs later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cohort {

struct Device {
  // kCudaHost: page-locked host memory (the CPU reads and writes it directly).
  // kTest: the test device (tensor/test_device.h): host memory behind the device
  // interface, so that code which follows a tensor's device runs in CPU tests.
  enum class Kind : uint8_t { kCpu, kCuda, kCudaHost, kTest };
  Kind kind = Kind::kCpu;
  int id = 0;

  static Device cpu() { return {}; }
  static Device cuda(int id) { return {Kind::kCuda, id}; }
  // Memory the CPU may read and write (kCpu, kCudaHost).
  bool is_host() const { return kind == Kind::kCpu || kind == Kind::kCudaHost; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:0", "cuda_host", "test:0"
};

// An ordered queue of work on a device (borrowed: OwnedStream or a device's owner
// destroys it). The default stream is the host's, one thread wide.
class Stream {
 public:
  Stream() = default;
  // The host, running element-wise work (kernels::for_each) on a team of `threads`.
  static Stream host(int threads);
  // A device stream; `native` is the device's handle (cudaStream_t; nullptr is CUDA's
  // default stream), or a number the test device gives out.
  Stream(Device device, void* native) : device_(device), native_(native) {}

  Device device() const { return device_; }
  void* native() const { return native_; }
  int threads() const { return threads_; }
  bool is_host() const { return device_.is_host(); }
  bool operator==(const Stream& o) const { return device_ == o.device_ && native_ == o.native_; }

 private:
  Device device_;
  void* native_ = nullptr;
  int threads_ = 1;
};

// The point in a stream's work where it was recorded; copies share it. A default
// Event is complete, as every event recorded on a host stream is.
class Event {
 public:
  // What a device's event does (tensor/device_api.h makes them).
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool query() = 0;                      // complete?
    virtual void synchronize() = 0;                // the calling thread waits
    virtual void block(const Stream& stream) = 0;  // later work on `stream` waits
  };

  Event() = default;
  explicit Event(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // Whether the work before the event is done (never blocks).
  bool ready() const { return !impl_ || impl_->query(); }
  // Blocks the calling thread until it is.
  void synchronize() const {
    if (impl_) impl_->synchronize();
  }
  // Makes work enqueued on `stream` from now on wait for it, without blocking the
  // host where the device can wait by itself (a host stream waits here).
  void block(const Stream& stream) const {
    if (impl_) impl_->block(stream);
  }
  // False for events made complete (host streams, default-constructed).
  bool recorded() const { return impl_ != nullptr; }
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort
