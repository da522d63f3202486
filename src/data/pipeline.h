// The input pipeline: a source sharded and shuffled by the sampler, reader threads
// fetching sample bytes, decode threads decoding and augmenting straight into the
// batch buffers of a ring of prefetch_depth + 1 slots, and a consumer that takes
// whole batches in order. Nothing is allocated per batch once the ring is warm.
// pipeline.cc schedules (the ring, the order of samples, next()), pipeline_workers.cc
// holds the reader and decode loops, pipeline_options.cc and pipeline_stats.cc what
// their names say.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <thread>
#include <vector>

#include "core/status.h"
#include "data/augment.h"
#include "data/device_feed.h"
#include "data/jpeg.h"
#include "data/pipeline_options.h"
#include "data/pipeline_stats.h"
#include "data/sampler.h"
#include "data/source.h"
#include "tensor/tensor.h"

namespace cohort::data {

// One batch as the consumer sees it. Views stay valid until the next next() or the
// pipeline's destruction. Images and labels are in host memory, or on the feed's
// device (PipelineOptions::feed_device); the mask is always in host memory.
struct BatchView {
  Tensor images;      // [N, C, H, W] or [N, H, W, C]
  Tensor labels;      // int32 [N]
  Tensor valid_mask;  // u8 [N]: 1 = a real sample; the valid ones come first
  int64_t valid = 0;  // samples that are real (padding and skipped ones excluded)
  int64_t epoch = 0, step = 0;
};

// A batch's place in the pipeline's order.
struct PipelinePosition {
  int64_t epoch = 0, step = 0;
};

class Pipeline {
 public:
  // Starts the threads. Throws kInvalidArgument for bad options.
  Pipeline(const PipelineOptions& options, std::shared_ptr<Source> source);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The next batch in order; blocks. Throws the error that failed the pipeline (a bad
  // sample under on_error=fail, an I/O error; under on_error=skip, an epoch in which
  // every sample was bad, or more skipped samples than max_skipped_fraction allows) on
  // this and every later call. The skipped fraction is checked at every batch against
  // the samples this rank will have read at the end of the current epoch: it fails as
  // soon as the epoch can no longer stay within it, and a run that ends mid-epoch is
  // held to the bound of that whole epoch. With a feed device the batch is on that
  // device, and the next one is already being copied there (device_feed.h).
  const BatchView& next();

  // Where the batch the next next() returns lies: what a checkpoint saved now records
  // as the pipeline's position, and what a pipeline started there resumes from.
  PipelinePosition position() const;

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t dataset_size() const { return source_->size(); }
  int64_t valid_per_epoch() const { return sampler_.valid_per_epoch(); }
  int channels() const { return channels_; }
  const Source& source() const { return *source_; }
  const PipelineOptions& options() const { return o_; }
  // The augmentation preset in use (augment=auto resolved).
  const std::string& preset() const { return o_.preset; }
  PipelineStats stats() const;

 private:
  friend class DeviceFeed;
  struct Slot;
  struct Work;
  // The next batch in host memory (what next() returns without a feed).
  const BatchView& next_host();
  // Construction and the ring (pipeline.cc).
  void set_geometry();
  void allocate_slots();
  void fill_synthetic();
  void start_workers();
  void stop();
  Slot& slot_of(int64_t g) const { return *slots_[static_cast<size_t>(g % static_cast<int64_t>(slots_.size()))]; }

  // Scheduling (pipeline.cc): the next sample a reader reads (nullptr once stopping),
  // a sample's end, and the batches next() hands out.
  Work* take_work();
  void release_work(Work* w);
  void finish_sample(Slot& slot, bool ok, const Error* error, int64_t index);
  Slot& next_synthetic(int64_t& g);
  Slot& next_decoded(int64_t& g);
  int64_t ready_ahead(int64_t g) const;
  const BatchView& deliver(Slot& slot, int64_t g, int64_t call_ns);
  void compact(Slot& slot);
  void count_skipped(const Slot& slot, int64_t g, int64_t valid);

  // The worker loops (pipeline_workers.cc).
  void reader_loop();
  bool read_sample(Work& w, Error& error);
  void decoder_loop();
  // Nanoseconds of one sample's decode and augment steps, to split its CPU time: on the
  // thread's CPU clock (cpu, JPEGs) or wall time (raw samples, too quick to clock apart).
  struct StageWall {
    int64_t decode = 0, augment = 0;
    bool cpu = false;
  };
  void process(Work& w, JpegDecoder& decoder, Renderer& renderer, StageWall& wall);
  void decode_encoded(Work& w, JpegDecoder& decoder, Renderer& renderer, uint8_t* dst, int64_t epoch, StageWall& wall);
  void add_decoder_cpu(int64_t cpu_ns, int64_t work_ns, const StageWall& wall);

  PipelineOptions o_;
  std::shared_ptr<Source> source_;
  Sampler sampler_;
  int channels_ = 3;
  size_t sample_bytes_ = 0;
  bool synthetic_ = false;

  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<Work>> works_;

  mutable std::mutex mu_;
  std::condition_variable cv_space_;  // readers: a slot or a work item became free
  std::condition_variable cv_work_;   // decoders: work queued
  std::condition_variable cv_ready_;  // consumer: a batch completed
  bool stop_ = false;
  int64_t sched_g_ = 0, sched_pos_ = 0;  // next (global step, position) to read
  int64_t released_g_ = 0;               // slots before this global step are free
  int64_t consumer_g_ = 0;               // next global step next() returns
  bool holding_ = false;
  std::vector<Work*> free_works_;
  std::deque<Work*> queue_;
  std::string fatal_;
  Code fatal_code_ = Code::kOk;

  // Each JPEG's verdict, found once by a decode that reads all its entropy-coded data
  // (whatever the crop), so a file is used in every epoch or in none.
  enum Verdict : uint8_t { kUnknown, kGood, kBad };
  std::unique_ptr<std::atomic<uint8_t>[]> verdicts_;
  std::mutex bad_mu_;
  std::unordered_map<int64_t, Error> bad_;

  // Skipped samples of the delivered batches (guarded by mu_).
  int64_t run_read_ = 0, run_skipped_ = 0;
  int64_t epoch_read_start_ = 0, epoch_samples_ = 0, epoch_valid_ = 0;
  std::string first_skip_;

  PipelineCounters counters_;  // stage counters: any thread; delivery counters: under mu_
  BatchView view_;
  std::vector<std::thread> threads_;
  std::unique_ptr<DeviceFeed> feed_;  // consumer's thread only; goes first
};

// A pipeline that can move to another position of its order, as the C API's pipeline
// handle does: it keeps the options and the source, and seek() starts a new Pipeline
// there (what was prefetched is dropped; the source is not opened again).
class SeekablePipeline {
 public:
  // Starts at the options' start position, on `source`, or without one on the source
  // the options name (open_source). Throws what either throws.
  explicit SeekablePipeline(PipelineOptions options, std::shared_ptr<Source> source = nullptr);

  // The running pipeline; throws kInvalidState once a restart failed.
  Pipeline& pipeline() const;
  const PipelineOptions& options() const { return options_; }
  const Source& source() const { return *source_; }

  // Restarts at step `step` of epoch `epoch`. A negative epoch or a step outside [0,
  // steps per epoch) is kInvalidArgument and changes nothing; when the restart itself
  // fails, the error propagates and the pipeline is gone (pipeline() throws).
  void seek(int64_t epoch, int64_t step);

 private:
  PipelineOptions options_;
  std::shared_ptr<Source> source_;
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace cohort::data
