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
#include <optional>
#include <string>
#include <unordered_map>
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

// Augmentation steps set explicitly (API, command line or environment): they win over
// the preset, augment=auto included.
struct AugmentOverrides {
  std::optional<bool> random_crop, color_jitter;
  std::optional<float> flip_lr_prob, flip_ud_prob;
};

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
  // Under on_error=skip: the most samples that may be skipped, as a fraction of those
  // read; an epoch in which every sample is bad fails whatever its value.
  double max_skipped_fraction = 0.01;
  int error_log_limit = 5;
  bool exif_apply = false;  // exif_orientation=apply
  int64_t start_epoch = 0, start_step = 0;
  int image_size = 0;  // 0: 224 for JPEG sources, the native size for raw ones
  int synthetic_channels = 3;
  // auto|none|simple|standard|complex|padcrop; the pipeline resolves auto and applies
  // the preset, then the overrides, to `augment`.
  std::string preset = "auto";
  AugmentOverrides overrides;
  bool explicit_mean = false, explicit_std = false;
};

// What augment=auto picks for a source whose batches hold channels x out_h x out_w
// images: none for synthetic data (never augmented) and for grayscale raw images (MNIST
// and its kin, where a flip or a crop changes the class or loses the digit), padcrop for
// images of at most 64 pixels a side (CIFAR-sized), standard for larger ones
// (ImageNet-sized). *reason (optional) receives why.
std::string auto_preset(const Source& source, int channels, int out_h, int out_w, std::string* reason = nullptr);

// Sets the augmentation steps of a preset (not auto), then the overrides. padcrop pads
// by 1/8 of the output size.
void apply_preset(const std::string& preset, const AugmentOverrides& overrides, AugmentOptions& a);

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
  int64_t skipped = 0;  // bad samples left out of the batches delivered (errors also counts prefetched ones)
  double read_busy_s = 0, decode_busy_s = 0;  // summed over the stage's threads
  // CPU seconds of each stage, summed over its threads (the threads' own CPU clocks):
  // read = the readers (fetching sample bytes), decode = JPEG decoding, augment =
  // cropping, resizing, flips, colour and normalisation into the batch, assemble = the
  // rest of batch assembly (padding, labels, compaction, hand-over). They sum to the
  // pipeline's CPU; per image, divide by `decoded`.
  double read_cpu_s = 0, decode_cpu_s = 0, augment_cpu_s = 0, assemble_cpu_s = 0;
  int64_t bytes_read = 0;      // bytes the readers took from storage (0 for data held in memory)
  std::string limiting_stage;  // read|decode|augment|assemble: the one that bounds throughput ("" unknown)
  // The consumer's wait in next() and the time it covers, both from the end of the
  // first next() (filling the pipeline is start-up, not steady state).
  double wait_s = 0, elapsed_s = 0;
  double images_per_sec = 0, wait_fraction = 0;
  double mean_ready_batches = 0;  // prefetched batches ready when next() was called
  double mean_decode_queue = 0;   // samples waiting for a decoder at those times
  int reader_threads = 0, decode_threads = 0, prefetch_depth = 0;
  std::string verdict;
};

// The stage that bounds the pipeline's rate ("" before any image): read when the readers
// are busier per thread than the decode threads, else the decode pool's largest stage.
std::string limiting_stage(const PipelineStats& s);
// "CPU per image: read 0.010 ms (2%), decode …, augment …, assemble …, total … ms".
std::string stage_shares(const PipelineStats& s);

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
  // held to the bound of that whole epoch.
  const BatchView& next();

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
  struct Slot;
  struct Work;
  void reader_loop();
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
  void finish_sample(Slot& slot, bool ok, const Error* error, int64_t index);
  void compact(Slot& slot);
  void count_skipped(const Slot& slot, int64_t g, int64_t valid);
  void fill_synthetic();
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

  std::atomic<int64_t> read_ns_{0}, decode_ns_{0}, images_{0}, errors_{0}, padded_{0};
  std::atomic<int64_t> read_cpu_ns_{0}, decode_cpu_ns_{0}, augment_cpu_ns_{0}, assemble_cpu_ns_{0}, bytes_read_{0};
  int64_t batches_ = 0, delivered_ = 0, first_batch_valid_ = 0, wait_ns_ = 0, ready_sum_ = 0, queue_sum_ = 0;
  int64_t first_ns_ = 0, last_ns_ = 0;
  BatchView view_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::data
