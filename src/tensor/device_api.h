// What cohort asks of a device: raw memory, copies and fills ordered on a stream,
// streams and events. One DeviceApi per device kind, stateless apart from the device
// itself (the CUDA runtime) or, for the test device, what a test set up. Allocators
// (tensor/allocator.h) and tensor copies (tensor/tensor.h) are written against it, so
// the same code serves the host, CUDA and the test device.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace cohort {

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual const char* name() const = 0;

  // Raw memory on device ordinal `id`; nullptr when the device is out of memory (other
  // failures throw). Freed memory may still be in use by work already enqueued:
  // callers (the caching allocator) free only what no stream still uses.
  virtual void* allocate(int id, size_t bytes) = 0;
  virtual void deallocate(int id, void* p) = 0;
  // The memory of device ordinal `id` in all and free now, as the device counts it (what
  // other processes hold included); false where the device cannot say.
  virtual bool memory_info(int id, size_t& free, size_t& total) { return false; }

  // `bytes` from src to dst, ordered on `stream` (a stream of this device). Either side
  // may be host memory. With the device's default stream the copy is complete when
  // the call returns.
  virtual void copy(void* dst, const void* src, size_t bytes, const Stream& stream) = 0;
  // Sets `bytes` bytes at dst (this device's memory) to zero, ordered on `stream`.
  virtual void zero(void* dst, size_t bytes, const Stream& stream) = 0;

  virtual Stream create_stream(int id) = 0;
  virtual void destroy_stream(const Stream& stream) = 0;
  // An event marking the work enqueued on `stream` so far.
  virtual Event record(const Stream& stream) = 0;
  // The same, also marking the time the stream reaches it; elapsed() gives the seconds
  // between two such events once both are complete (0 where the device keeps no times).
  virtual Event record_timed(const Stream& stream) { return record(stream); }
  virtual double elapsed(const Event& start, const Event& stop) { return 0; }
  // Waits until the work enqueued on `stream` is done.
  virtual void synchronize(const Stream& stream) = 0;

  // Graphs (CUDA): the work `enqueue` puts on `stream`, captured instead of run, as a
  // graph that launch_graph() replays on a stream, each launch with the arguments and
  // pointers of the capture. Null where the device keeps no graphs (the caller then
  // enqueues the work itself) or where the work enqueued nothing. Throws when the
  // capture fails (work a graph cannot hold); the stream has left capture mode then.
  virtual std::shared_ptr<void> capture_graph(const Stream& stream, const std::function<void()>& enqueue) {
    return nullptr;
  }
  virtual void launch_graph(const std::shared_ptr<void>& graph, const Stream& stream) {}
};

// The API of a device kind: kCpu and kCudaHost share the host's (inline, complete
// events), kCuda is the CUDA runtime's, kTest the test device's. Throws kUnsupported
// for kCuda in a build without CUDA.
DeviceApi& device_api(Device::Kind kind);

// An event marking the work enqueued on `stream` so far (complete for a host stream).
inline Event record_event(const Stream& stream) {
  return stream.is_host() ? Event() : device_api(stream.device().kind).record(stream);
}

// DeviceApi::capture_graph and launch_graph for the stream's device (null on the host).
inline std::shared_ptr<void> capture_graph(const Stream& stream, const std::function<void()>& enqueue) {
  return stream.is_host() ? nullptr : device_api(stream.device().kind).capture_graph(stream, enqueue);
}
inline void launch_graph(const std::shared_ptr<void>& graph, const Stream& stream) {
  device_api(stream.device().kind).launch_graph(graph, stream);
}

// Waits until the work enqueued on `stream` is done (nothing to wait for on the host).
inline void synchronize(const Stream& stream) {
  if (!stream.is_host()) device_api(stream.device().kind).synchronize(stream);
}

// A stream this object created and destroys.
class OwnedStream {
 public:
  OwnedStream() = default;
  explicit OwnedStream(Device device);
  ~OwnedStream();
  OwnedStream(OwnedStream&& o) noexcept : stream_(o.stream_), owned_(o.owned_) { o.owned_ = false; }
  OwnedStream& operator=(OwnedStream&& o) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  const Stream& get() const { return stream_; }
  operator const Stream&() const { return stream_; }

 private:
  Stream stream_;
  bool owned_ = false;
};

}  // namespace cohort
