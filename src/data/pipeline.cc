#include "data/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/logging.h"
#include "core/status.h"
#include "core/strings.h"
#include "data/pipeline_ring.h"
#include "kernels/philox.h"

namespace cohort::data {

Pipeline::Pipeline(const PipelineOptions& options, std::shared_ptr<Source> source)
    : o_(options),
      source_(std::move(source)),
      sampler_(ShardOptions{source_->size(), options.rank, options.size, options.batch_size, options.augment.seed,
                            options.shuffle, options.drop_remainder}) {
  require(o_.decode_threads >= 1 && o_.reader_threads >= 1, "reader_threads and decode_threads must be at least 1");
  require(o_.prefetch_depth >= 1, "prefetch_depth must be at least 1");
  synthetic_ = source_->kind() == "synthetic";
  set_geometry();
  sample_bytes_ = sample_bytes(o_.augment, channels_);
  const int64_t steps = sampler_.steps_per_epoch();
  require(o_.start_step >= 0 && o_.start_step < steps, "resume step ", o_.start_step, " is outside [0, ", steps, ")");
  require(o_.start_epoch >= 0, "resume epoch must not be negative");
  require(o_.max_skipped_fraction >= 0 && o_.max_skipped_fraction <= 1, "max_skipped_fraction ",
          o_.max_skipped_fraction, " is outside [0, 1]");
  consumer_g_ = released_g_ = sched_g_ = o_.start_epoch * steps + o_.start_step;
  allocate_slots();
  if (synthetic_)
    fill_synthetic();
  else
    start_workers();
  if (!o_.feed_device.is_host())
    feed_ = std::make_unique<DeviceFeed>(*this, o_.feed_device, o_.device_memory, o_.feed_stream, synthetic_);
}

Pipeline::~Pipeline() { stop(); }

// The channels and output size of the images, and the augmentation preset (augment=auto
// resolved), which depends on both.
void Pipeline::set_geometry() {
  AugmentOptions& a = o_.augment;
  if (source_->encoded() || synthetic_) {
    channels_ = synthetic_ ? o_.synthetic_channels : 3;
    int size = o_.image_size > 0 ? o_.image_size : 224;
    a.out_h = a.out_w = size;
    a.eval_resize = static_cast<int>(std::lround(a.eval_resize * size / 224.0));
  } else {
    channels_ = source_->raw_channels();
    a.out_h = o_.image_size > 0 ? o_.image_size : source_->raw_height();
    a.out_w = o_.image_size > 0 ? o_.image_size : source_->raw_width();
    a.eval_whole = true;
    // Raw sources (MNIST) are normalised to [0, 1] unless mean/std are given.
    if (!o_.explicit_mean) std::fill(std::begin(a.mean), std::end(a.mean), 0.0f);
    if (!o_.explicit_std) std::fill(std::begin(a.stddev), std::end(a.stddev), 1.0f);
  }
  if (o_.preset == "auto") {
    std::string why;
    o_.preset = auto_preset(*source_, channels_, a.out_h, a.out_w, &why);
    if (o_.rank == 0) COHORT_LOG_INFO("augment=auto chose '", o_.preset, "': ", why);
  }
  apply_preset(o_.preset, o_.overrides, a);
}

// The ring: prefetch_depth + 1 batches, each with its buffers and the views next()
// hands out.
void Pipeline::allocate_slots() {
  const AugmentOptions& a = o_.augment;
  const size_t nslots = static_cast<size_t>(o_.prefetch_depth) + 1;
  const size_t B = static_cast<size_t>(o_.batch_size);
  // From the batch allocator when there is one (pinned memory, for a copy to a
  // device), else plain host memory; zeroed either way (padding rows stay zero).
  auto host_memory = [&](size_t bytes) {
    std::shared_ptr<Storage> s = o_.batch_memory ? o_.batch_memory->allocate(bytes) : allocate_host(bytes, false);
    require(s->device().is_host(), "the pipeline's batch memory must be host memory, got ", s->device().to_string());
    std::memset(s->data(), 0, bytes);
    return s;
  };
  for (size_t i = 0; i < nslots; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->images = host_memory(sample_bytes_ * B);
    slot->labels_storage = host_memory(sizeof(int32_t) * B);
    slot->labels = static_cast<int32_t*>(slot->labels_storage->data());
    slot->mask.assign(B, 0);
    const int64_t n = o_.batch_size;
    Shape shape = a.nhwc ? Shape{n, a.out_h, a.out_w, channels_} : Shape{n, channels_, a.out_h, a.out_w};
    slot->images_view = Tensor::wrap(slot->images->data(), shape, a.dtype, slot->images->device());
    slot->labels_view = Tensor::wrap(slot->labels, {n}, DType::kI32, slot->labels_storage->device());
    slot->mask_view = Tensor::wrap(slot->mask.data(), {n}, DType::kU8);
    slots_.push_back(std::move(slot));
  }
}

void Pipeline::fill_synthetic() {
  // Random pixels and labels, drawn once per slot: no decode cost, as the labs' "GPU
  // only" runs. The stream is keyed by rank, so ranks train on different batches.
  const AugmentOptions& a = o_.augment;
  const size_t B = static_cast<size_t>(o_.batch_size);
  const uint64_t rank = static_cast<uint64_t>(o_.rank) << 32;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    auto* bytes = static_cast<uint8_t*>(s.images->data());
    if (a.dtype == DType::kF32) {
      auto* f = reinterpret_cast<float*>(bytes);
      for (size_t k = 0; k < sample_bytes_ * B / 4; ++k)
        f[k] = kernels::uniform01(kernels::philox4x32(k, rank | i, a.seed).v[0]) * 2.0f - 1.0f;
    } else {
      for (size_t k = 0; k < sample_bytes_ * B; ++k)
        bytes[k] = static_cast<uint8_t>(kernels::philox4x32(k, rank | i, a.seed).v[0]);
      if (a.dtype == DType::kF16)
        for (size_t k = 1; k < sample_bytes_ * B; k += 2) bytes[k] &= 0x3b;  // finite halves in [0, 1)
    }
    for (size_t k = 0; k < B; ++k) {
      s.labels[k] = static_cast<int32_t>(kernels::philox4x32(k, rank | (i + 1000), a.seed).v[0] %
                                         static_cast<uint64_t>(o_.source.synthetic_classes));
      s.mask[k] = 1;
    }
  }
}

void Pipeline::start_workers() {
  if (source_->encoded()) {
    const size_t n = static_cast<size_t>(source_->size());
    verdicts_ = std::make_unique<std::atomic<uint8_t>[]>(n);
    for (size_t i = 0; i < n; ++i) verdicts_[i].store(kUnknown, std::memory_order_relaxed);
  }
  const size_t nworks = static_cast<size_t>(o_.decode_threads) * 4 + static_cast<size_t>(o_.reader_threads) * 2;
  for (size_t i = 0; i < nworks; ++i) {
    works_.push_back(std::make_unique<Work>());
    free_works_.push_back(works_.back().get());
  }
  try {
    for (int i = 0; i < o_.reader_threads; ++i) threads_.emplace_back([this] { reader_loop(); });
    for (int i = 0; i < o_.decode_threads; ++i) threads_.emplace_back([this] { decoder_loop(); });
  } catch (...) {
    stop();
    throw;
  }
}

void Pipeline::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_space_.notify_all();
  cv_work_.notify_all();
  cv_ready_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

// Waits for a free work item and a slot the next sample may go to, and binds the two:
// samples are read in order of (global step, position), at most slots batches ahead of
// the consumer.
Pipeline::Work* Pipeline::take_work() {
  const int64_t steps = sampler_.steps_per_epoch();
  const int64_t nslots = static_cast<int64_t>(slots_.size());
  std::unique_lock<std::mutex> lock(mu_);
  cv_space_.wait(lock, [&] { return stop_ || (sched_g_ < released_g_ + nslots && !free_works_.empty()); });
  if (stop_) return nullptr;
  Work* w = free_works_.back();
  free_works_.pop_back();
  Slot& slot = slot_of(sched_g_);
  if (sched_pos_ == 0) {
    sampler_.batch(sched_g_ / steps, sched_g_ % steps, slot.indices);
    slot.g = sched_g_;
    slot.ready = false;
    slot.had_errors = false;
    slot.fatal.clear();
    slot.remaining.store(o_.batch_size);
  }
  w->slot = &slot;
  w->g = sched_g_;
  w->pos = sched_pos_;
  w->sample.index = slot.indices[static_cast<size_t>(sched_pos_)];
  if (++sched_pos_ == o_.batch_size) {
    sched_pos_ = 0;
    ++sched_g_;
  }
  return w;
}

void Pipeline::release_work(Work* w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_works_.push_back(w);
  }
  cv_space_.notify_one();
}

void Pipeline::finish_sample(Slot& slot, bool ok, const Error* error, int64_t index) {
  bool fatal = false;
  if (!ok) {
    bool skippable = error->code() == Code::kCorruptData || error->code() == Code::kJpeg;
    if (o_.on_error == OnError::kSkip && skippable) {
      int64_t n = ++counters_.errors;
      if (n <= o_.error_log_limit)
        COHORT_LOG_WARN("skipping a bad sample (", n, n == o_.error_log_limit ? ", the last one logged" : "",
                        "): ", error->what());
    } else {
      fatal = true;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    if (!fatal && first_skip_.empty()) first_skip_ = error->what();
    slot.had_errors = true;
    for (size_t i = 0; i < slot.indices.size(); ++i)
      if (slot.indices[i] == index && index >= 0) slot.mask[i] = 0;
    if (fatal && slot.fatal.empty()) {
      slot.fatal = cat(error->what(), o_.on_error == OnError::kFail ? " (on_error=fail)" : "");
      slot.fatal_code = error->code();
    }
  }
  if (--slot.remaining == 0) {
    slot.ready = true;
    cv_ready_.notify_all();
  }
}

const BatchView& Pipeline::next() { return feed_ ? feed_->next() : next_host(); }

const BatchView& Pipeline::next_host() {
  const int64_t t0 = now_ns();
  int64_t g = 0;
  Slot& slot = synthetic_ ? next_synthetic(g) : next_decoded(g);
  return deliver(slot, g, t0);
}

Pipeline::Slot& Pipeline::next_synthetic(int64_t& g) {
  std::lock_guard<std::mutex> lock(mu_);
  g = consumer_g_++;
  counters_.ready_sum += static_cast<int64_t>(slots_.size()) - 1;
  return slot_of(g);
}

// Frees the batch handed out before, then waits for batch consumer_g_ to complete.
Pipeline::Slot& Pipeline::next_decoded(int64_t& g) {
  std::unique_lock<std::mutex> lock(mu_);
  if (holding_) {
    released_g_ = consumer_g_;
    holding_ = false;
    cv_space_.notify_all();
  }
  if (!fatal_.empty()) throw Error(fatal_code_, fatal_);
  g = consumer_g_;
  Slot& slot = slot_of(g);
  counters_.ready_sum += ready_ahead(g);
  counters_.queue_sum += static_cast<int64_t>(queue_.size());
  cv_ready_.wait(lock, [&] { return stop_ || (slot.g == g && slot.ready); });
  if (stop_) fail(Code::kCancelled, "the pipeline is shutting down");
  if (!slot.fatal.empty()) {
    // Batches before this one were fine; from here on the pipeline stays failed.
    fatal_ = slot.fatal;
    fatal_code_ = slot.fatal_code;
    throw Error(fatal_code_, fatal_);
  }
  ++consumer_g_;
  holding_ = true;
  if (slot.had_errors) {
    const int64_t cpu = thread_cpu_ns();
    compact(slot);
    counters_.assemble_cpu_ns += thread_cpu_ns() - cpu;
  }
  return slot;
}

PipelinePosition Pipeline::position() const {
  int64_t epoch = 0, step = 0;
  if (feed_ && feed_->prefetched(epoch, step)) return {epoch, step};  // taken ahead by the feed
  const int64_t steps = sampler_.steps_per_epoch();
  std::lock_guard<std::mutex> lock(mu_);
  return {consumer_g_ / steps, consumer_g_ % steps};
}

// Batches from global step g on that are complete (called under mu_).
int64_t Pipeline::ready_ahead(int64_t g) const {
  const int64_t nslots = static_cast<int64_t>(slots_.size());
  int64_t ready = 0;
  for (int64_t k = g; k < g + nslots; ++k) {
    const Slot& s = slot_of(k);
    if (s.g == k && s.ready) ++ready;
  }
  return ready;
}

const BatchView& Pipeline::deliver(Slot& slot, int64_t g, int64_t call_ns) {
  std::lock_guard<std::mutex> lock(mu_);  // stats() may read the counters from another thread
  const int64_t done_ns = now_ns();
  const int64_t steps = sampler_.steps_per_epoch();
  view_.images = slot.images_view;
  view_.labels = slot.labels_view;
  view_.valid_mask = slot.mask_view;
  int64_t valid = 0;
  for (uint8_t m : slot.mask) valid += m;
  view_.valid = valid;
  counters_.delivered_batch(call_ns, done_ns, valid);
  view_.epoch = g / steps;
  view_.step = g % steps;
  if (!synthetic_) count_skipped(slot, g, valid);
  return view_;
}

void Pipeline::compact(Slot& slot) {
  // Move valid samples forward so that the first `valid` are the real ones.
  auto* base = static_cast<uint8_t*>(slot.images->data());
  size_t B = slot.mask.size(), j = 0;
  for (size_t i = 0; i < B; ++i) {
    if (!slot.mask[i]) continue;
    if (i != j) {
      std::memcpy(base + j * sample_bytes_, base + i * sample_bytes_, sample_bytes_);
      slot.labels[j] = slot.labels[i];
      slot.mask[j] = 1;
      slot.mask[i] = 0;
      slot.labels[i] = 0;
    }
    ++j;
  }
  // What is left behind (skipped samples) reads as padding: zeros, label 0.
  for (size_t i = j; i < B; ++i) {
    std::memset(base + i * sample_bytes_, 0, sample_bytes_);
    slot.labels[i] = 0;
  }
}

void Pipeline::count_skipped(const Slot& slot, int64_t g, int64_t valid) {
  const int64_t steps = sampler_.steps_per_epoch(), step = g % steps;
  const int64_t per_epoch = sampler_.valid_per_epoch();
  if (step == 0 || counters_.batches == 1) {
    // Samples this rank reads from this step to the end of the epoch (padding, which
    // only the last batch holds, excluded).
    epoch_read_start_ = run_read_;
    epoch_samples_ = per_epoch - std::min(per_epoch, step * o_.batch_size);
    epoch_valid_ = 0;
  }
  int64_t read = 0;
  for (int64_t index : slot.indices) read += index >= 0;
  run_read_ += read;
  run_skipped_ += read - valid;
  epoch_valid_ += valid;
  const int64_t epoch_read = run_read_ - epoch_read_start_;
  const double bound = o_.max_skipped_fraction * static_cast<double>(epoch_read_start_ + epoch_samples_);
  const bool nothing = step == steps - 1 && epoch_valid_ == 0 && epoch_read > 0;
  if (!nothing && static_cast<double>(run_skipped_) <= bound) return;
  const std::string hint = cat(first_skip_.empty() ? "" : cat("; the first: ", first_skip_), ". Check the data",
                               o_.source.path.empty() ? "" : cat(" with 'cohort-data verify ", o_.source.path, "'"));
  const int64_t epoch = g / steps;
  if (nothing) {
    fatal_ = cat("epoch ", epoch, ": every one of the ", epoch_read,
                 " samples this rank read was bad and skipped (on_error=skip), nothing to train on", hint);
  } else {
    fatal_ = cat("epoch ", epoch, ": ", run_skipped_, " of the ", run_read_,
                 " samples read so far were bad and skipped (on_error=skip), more than max_skipped_fraction=",
                 o_.max_skipped_fraction, " of the ", epoch_read_start_ + epoch_samples_,
                 " this rank reads by the end of the epoch", hint, ", or raise max_skipped_fraction");
  }
  fatal_code_ = Code::kCorruptData;
  throw Error(fatal_code_, fatal_);
}

SeekablePipeline::SeekablePipeline(PipelineOptions options, std::shared_ptr<Source> source)
    : options_(std::move(options)), source_(source ? std::move(source) : open_source(options_.source)) {
  pipeline_ = std::make_unique<Pipeline>(options_, source_);
}

Pipeline& SeekablePipeline::pipeline() const {
  if (!pipeline_) fail(Code::kInvalidState, "the pipeline failed to restart; destroy it");
  return *pipeline_;
}

void SeekablePipeline::seek(int64_t epoch, int64_t step) {
  const int64_t steps = pipeline_ ? pipeline_->steps_per_epoch() : 0;
  require(epoch >= 0, "epoch ", epoch, " is negative");
  require(step >= 0 && step < steps, "step ", step, " is outside [0, ", steps, ")");
  pipeline_.reset();  // its threads stop before the new one's start
  options_.start_epoch = epoch;
  options_.start_step = step;
  pipeline_ = std::make_unique<Pipeline>(options_, source_);
}

}  // namespace cohort::data
