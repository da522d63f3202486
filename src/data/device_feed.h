// The pipeline's last stage when its consumer computes on a device: batch k + 1 is
// copied host → device on a copy stream of its own while the consumer's stream
// computes step k. The host batches come from pinned memory (PipelineOptions::
// batch_memory), so the copies are asynchronous; the consumer's stream waits for a
// batch's copy (an event, no host wait), and a device buffer is overwritten only once
// the consumer's work enqueued before the next call is done. A synthetic pipeline's
// batches are copied once (they never change). The copies' time is measured with
// events and counted in the pipeline's statistics and verdict.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>

#include "data/pipeline_stats.h"
#include "tensor/allocator.h"
#include "tensor/device.h"
#include "tensor/device_api.h"
#include "tensor/tensor.h"

namespace cohort::data {

struct BatchView;
class Pipeline;

class DeviceFeed {
 public:
  // Copies `pipeline`'s batches to `device` with memory from `memory`; `consumer` is the
  // stream that computes on them. The pipeline must outlive the feed.
  DeviceFeed(Pipeline& pipeline, Device device, std::shared_ptr<Allocator> memory, const Stream& consumer,
             bool synthetic);
  ~DeviceFeed();
  DeviceFeed(const DeviceFeed&) = delete;
  DeviceFeed& operator=(const DeviceFeed&) = delete;

  // The next batch: images and labels on the device, the valid mask on the host.
  const BatchView& next();
  // Whether a batch was taken from the pipeline ahead of the consumer, and where it lies.
  bool prefetched(int64_t& epoch, int64_t& step) const;
  // Seconds and bytes of the copies so far (copies still in flight are not counted).
  void add_stats(PipelineStats& s) const;

 private:
  struct Buffer;
  void fetch_into(Buffer& b);
  void start_copy(Buffer& b, const BatchView& host);
  void finish(Buffer& b);

  Pipeline& pipeline_;
  Device device_;
  std::shared_ptr<Allocator> memory_;
  Stream consumer_;
  bool synthetic_;
  OwnedStream copy_;
  std::unique_ptr<Buffer> buffers_[2];
  int64_t calls_ = 0;
  std::exception_ptr pending_error_;                                 // the pipeline failed while prefetching
  std::map<const void*, std::unique_ptr<Buffer>> synthetic_copies_;  // by host slot
  std::atomic<double> copy_s_{0};                                    // read by stats() from any thread
  std::atomic<int64_t> copy_bytes_{0};
};

}  // namespace cohort::data
