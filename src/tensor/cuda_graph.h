// CUDA events and graphs as DeviceApi::capture_graph and the compute plans'
// (backend/cuda/step_graphs.h) captures both use them (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "tensor/device.h"

namespace cohort {

// A CUDA event (without timing) as an Event: complete, waited for on the host, or waited
// for by another stream on the device.
class CudaEventImpl : public Event::Impl {
 public:
  CudaEventImpl();  // created, not recorded (complete until it is); throws kCuda
  ~CudaEventImpl() override;
  CudaEventImpl(const CudaEventImpl&) = delete;
  CudaEventImpl& operator=(const CudaEventImpl&) = delete;

  bool query() override;
  void synchronize() override;
  void block(const Stream& stream) override;  // a host stream waits on the host
  cudaEvent_t get() const { return event_; }

 protected:
  explicit CudaEventImpl(bool timed);
  cudaEvent_t event_ = nullptr;
};

// An event recorded inside a graph being captured on `stream` (an external event node):
// each launch of the graph records it again, and other streams and the host may wait
// for it after the launch.
void record_in_capture(CudaEventImpl& event, cudaStream_t stream);

// The executable graph of a finished capture, or null where it holds no work; destroys
// `graph` either way. Throws kCuda when instantiating fails.
std::shared_ptr<void> instantiate_graph(cudaGraph_t graph);

}  // namespace cohort
