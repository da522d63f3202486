#include "data/device_feed.h"

#include <cstring>
#include <vector>

#include "core/status.h"
#include "data/pipeline.h"

namespace cohort::data {

// A batch on the device: its copy's events, where it lies in the pipeline's order,
// and the view handed out.
struct DeviceFeed::Buffer {
  Tensor images, labels;  // on the device
  std::vector<uint8_t> mask;
  BatchView view;
  Event start, copied;  // the copy on the copy stream (timed)
  Event consumed;       // the consumer's work up to the call after this batch's
  bool full = false;    // holds a batch not handed out yet
  bool counted = true;  // its copy's time is in the statistics
  int64_t bytes = 0;
};

DeviceFeed::DeviceFeed(Pipeline& pipeline, Device device, std::shared_ptr<Allocator> memory, const Stream& consumer,
                       bool synthetic)
    : pipeline_(pipeline),
      device_(device),
      memory_(std::move(memory)),
      consumer_(consumer),
      synthetic_(synthetic),
      copy_(device) {
  require(!device.is_host(), "a device feed copies to a device, not to ", device.to_string());
  require(memory_ && memory_->device() == device, "the device feed needs an allocator of ", device.to_string(),
          " memory");
  for (auto& b : buffers_) b = std::make_unique<Buffer>();
}

DeviceFeed::~DeviceFeed() {
  try {
    synchronize(copy_);  // no copy may still write into memory that goes now
  } catch (const Error&) {
    // A failed device: nothing more to wait for.
  }
}

void DeviceFeed::start_copy(Buffer& b, const BatchView& host) {
  if (!b.images.defined() || b.images.shape() != host.images.shape() || b.images.dtype() != host.images.dtype()) {
    b.images = Tensor::empty(host.images.shape(), host.images.dtype(), *memory_, copy_);
    b.labels = Tensor::empty(host.labels.shape(), host.labels.dtype(), *memory_, copy_);
  }
  DeviceApi& api = device_api(device_.kind);
  b.consumed.block(copy_);  // the consumer is done with what this buffer held
  b.start = api.record_timed(copy_);
  copy(b.images, host.images, copy_);
  copy(b.labels, host.labels, copy_);
  b.copied = api.record_timed(copy_);
  b.counted = false;
  b.bytes = static_cast<int64_t>(host.images.nbytes() + host.labels.nbytes());
  const uint8_t* m = host.valid_mask.data_as<uint8_t>();
  b.mask.assign(m, m + host.valid_mask.numel());
  b.view.images = b.images;
  b.view.labels = b.labels;
  b.view.valid_mask = Tensor::wrap(b.mask.data(), host.valid_mask.shape(), DType::kU8);
  b.view.valid = host.valid;
  b.view.epoch = host.epoch;
  b.view.step = host.step;
  b.full = true;
}

void DeviceFeed::finish(Buffer& b) {
  if (b.counted || !b.copied.recorded()) return;
  b.copied.synchronize();
  copy_s_.store(copy_s_.load() + device_api(device_.kind).elapsed(b.start, b.copied));
  copy_bytes_ += b.bytes;
  b.counted = true;
}

void DeviceFeed::fetch_into(Buffer& b) {
  try {
    start_copy(b, pipeline_.next_host());
  } catch (...) {
    // Reported when the consumer reaches this batch: the one before it is good.
    pending_error_ = std::current_exception();
    b.full = false;
  }
}

const BatchView& DeviceFeed::next() {
  if (synthetic_) {  // the same few slots over and over: each is copied once
    const BatchView& host = pipeline_.next_host();
    std::unique_ptr<Buffer>& b = synthetic_copies_[host.images.data()];
    if (!b) {
      b = std::make_unique<Buffer>();
      start_copy(*b, host);
      finish(*b);
    }
    b->view.epoch = host.epoch;
    b->view.step = host.step;
    b->view.valid = host.valid;
    b->copied.block(consumer_);
    return b->view;
  }
  if (calls_ == 0) fetch_into(*buffers_[0]);
  Buffer& cur = *buffers_[calls_ % 2];
  Buffer& ahead = *buffers_[(calls_ + 1) % 2];
  if (!cur.full) {
    if (pending_error_) std::rethrow_exception(pending_error_);
    fail(Code::kInternal, "the device feed has no batch to hand out");
  }
  // The host slot of `cur` goes back to the pipeline with the next fetch: its copy must
  // be done (it ran while the consumer computed the step before).
  finish(cur);
  ahead.consumed = record_event(consumer_);  // the steps that read `ahead` are enqueued
  ahead.full = false;
  fetch_into(ahead);
  cur.copied.block(consumer_);
  cur.full = false;
  ++calls_;
  return cur.view;
}

bool DeviceFeed::prefetched(int64_t& epoch, int64_t& step) const {
  if (synthetic_ || calls_ == 0) return false;
  const Buffer& b = *buffers_[calls_ % 2];
  if (!b.full) return false;
  epoch = b.view.epoch;
  step = b.view.step;
  return true;
}

void DeviceFeed::add_stats(PipelineStats& s) const {
  s.copy_s = copy_s_;
  s.copy_bytes = copy_bytes_;
}

}  // namespace cohort::data
