// The input pipeline: a source sharded and shuffled by the sampler, reader threads
// fetching sample bytes, decode threads decoding and augmenting straight into the
// batch buffers of a ring of prefetch_depth + 1 slots, and a consumer that takes
// whole batches in order. Nothing is allocated per batch once the ring is warm.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "data/augment.h"
#include "data/jpeg.h"
#include "data/sampler.h"
#include "data/source.h"
#include "tensor/tensor.h"

namespace cohort {
class Config;
}

namespace cohort::data {

struct PipelineOptions {
  SourceOptions source;
  AugmentOptions augment;
  int64_t batch_size = 64;
  int rank = 0, size = 1;
  bool shuffle = true;
  bool drop_remainder = false;
  int reader_threads = 1, decode_threads = 1, prefetch_depth = 2;
  JpegDct dct = JpegDct::kFast;
  uint64_t max_pixels = 100000000;
  OnError on_error = OnError::kSkip;
  int error_log_limit = 5;
  int64_t start_epoch = 0, start_step = 0;
  int image_size = 0;  // 0: 224 for JPEG sources, the native size for raw ones
  int synthetic_channels = 3;
  std::string preset = "standard";
  bool explicit_mean = false, explicit_std = false;
};

// Options from the registry (data group, plus seed, image_size, data_format and
// num_classes). Thread counts of 0 take their defaults from thread_budget.
PipelineOptions pipeline_options(const Config& config, int rank, int size, int thread_budget);

// One batch as the consumer sees it. Views stay valid until the next next() or the
// pipeline's destruction.
struct BatchView {
  Tensor images;      // [N, C, H, W] or [N, H, W, C]
  Tensor labels;      // int32 [N]
  Tensor valid_mask;  // u8 [N]: 1 = a real sample; the valid ones come first
  int64_t valid = 0;  // samples that are real (padding and skipped ones excluded)
  int64_t epoch = 0, step = 0;
};

struct PipelineStats {
  int64_t batches = 0, images = 0, decoded = 0, errors = 0, padded = 0;  // images: valid ones delivered
  double read_busy_s = 0, decode_busy_s = 0;                             // summed over the stage's threads
  // The consumer's wait in next() and the time it covers, both from the end of the
  // first next() (filling the pipeline is start-up, not steady state).
  double wait_s = 0, elapsed_s = 0;
  double images_per_sec = 0, wait_fraction = 0;
  double mean_ready_batches = 0;  // prefetched batches ready when next() was called
  double mean_decode_queue = 0;   // samples waiting for a decoder at those times
  int reader_threads = 0, decode_threads = 0, prefetch_depth = 0;
  std::string verdict;
};

class Pipeline {
 public:
  // Starts the threads. Throws kInvalidArgument for bad options.
  Pipeline(const PipelineOptions& options, std::shared_ptr<Source> source);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The next batch in order; blocks. Throws the error that failed the pipeline (a bad
  // sample under on_error=fail, an I/O error) on this and every later call.
  const BatchView& next();

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t dataset_size() const { return source_->size(); }
  int64_t valid_per_epoch() const { return sampler_.valid_per_epoch(); }
  int channels() const { return channels_; }
  const Source& source() const { return *source_; }
  const PipelineOptions& options() const { return o_; }
  PipelineStats stats() const;

 private:
  struct Slot;
  struct Work;
  void reader_loop();
  void decoder_loop();
  void process(Work& w, JpegDecoder& decoder, Renderer& renderer);
  void finish_sample(Slot& slot, bool ok, const Error* error, int64_t index);
  void compact(Slot& slot);
  void stop();

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
  std::vector<int64_t> batch_indices_;
  std::vector<Work*> free_works_;
  std::deque<Work*> queue_;
  std::string fatal_;
  Code fatal_code_ = Code::kOk;

  std::atomic<int64_t> read_ns_{0}, decode_ns_{0}, images_{0}, errors_{0}, padded_{0};
  int64_t batches_ = 0, delivered_ = 0, first_batch_valid_ = 0, wait_ns_ = 0, ready_sum_ = 0, queue_sum_ = 0;
  int64_t first_ns_ = 0, last_ns_ = 0;
  BatchView view_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::data
