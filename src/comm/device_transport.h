// Where collectives of CUDA tensors run. Every collective whose tensors live on a CUDA
// device (DLPack kDLCUDA) runs on a second transport, NCCL in a runtime; host tensors
// stay on the engine's own transport. The device transport is created once, on the
// engine thread, when the first device collective is ready (all ranks agree first
// that each of them can create it; otherwise that collective fails on every rank
// naming the ranks that cannot and why). Device collectives are not fused: each runs
// as its own call, in place in the caller's tensors (no fusion buffer on the device);
// scales and averages run on the device through the kernels/ functors.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/transport.h"

namespace cohort::comm {

struct DeviceTransportFactory {
  Device device;  // the CUDA device this rank's device tensors must live on
  // Empty when this rank cannot move device tensors; `unavailable` then says why and
  // what would work, and submitting a device tensor fails with kUnsupported.
  std::function<std::unique_ptr<Transport>()> create;
  std::string unavailable;
};

// The device transport of one engine, created on first use.
class LazyDeviceTransport {
 public:
  explicit LazyDeviceTransport(DeviceTransportFactory factory) : factory_(std::move(factory)) {}
  const DeviceTransportFactory& factory() const { return factory_; }

  // Engine thread. The transport, created at the first call once every rank of
  // `control` agrees it can create its own; null when some rank cannot, with *error
  // set to the same reason on every rank (and on every later call).
  Transport* get(Transport& control, std::string* error);
  // Any thread: stops the device transport's waits (now, or as soon as it exists).
  void abort();
  // Any thread: whether the transport was created (device collectives have run).
  bool created();

 private:
  DeviceTransportFactory factory_;
  std::string error_;  // engine thread
  std::mutex mu_;      // guards the publication of transport_ and aborted_
  std::unique_ptr<Transport> transport_;
  bool aborted_ = false;
};

}  // namespace cohort::comm
