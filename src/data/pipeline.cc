#include "data/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/config.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/strings.h"
#include "kernels/philox.h"

namespace cohort::data {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// CPU time of the calling thread. A system call (about a microsecond), so the stage
// loops read it once per sample and split it by wall time within the sample.
int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::vector<float> parse_floats(const std::string& key, const std::string& text) {
  std::vector<float> out;
  for (const auto& part : split(text, ',')) {
    auto v = parse_double(trim(part));
    require(v.has_value(), "option '", key, "': '", text, "' is not a comma-separated list of numbers");
    out.push_back(static_cast<float>(*v));
  }
  require(!out.empty() && out.size() <= 4, "option '", key, "': expected 1 to 4 values, got '", text, "'");
  return out;
}

bool is_set(const Config& c, const char* key) { return c.source(key) != OptionSource::kDefault; }

}  // namespace

PipelineOptions pipeline_options(const Config& c, int rank, int size, int thread_budget) {
  PipelineOptions o;
  o.rank = rank;
  o.size = size;
  o.source.path = c.get_string("data_dir");
  o.source.kind = c.get_string("data_source");
  o.source.split = c.get_string("data_split");
  o.source.crc_check = c.get_bool("crc_check");
  o.source.write_index = c.get_bool("write_index");
  o.source.label_offset = c.get_int("label_offset");
  o.source.num_classes = c.get_int("num_classes");
  o.source.on_error = c.get_string("on_error") == "fail" ? OnError::kFail : OnError::kSkip;
  o.source.synthetic_samples = c.get_int("synthetic_samples");
  o.synthetic_channels = static_cast<int>(c.get_int("synthetic_channels"));
  o.source.synthetic_classes = o.source.num_classes > 0 ? o.source.num_classes : c.get_int("synthetic_classes");
  o.on_error = o.source.on_error;
  o.batch_size = c.get_int("batch_size");
  o.shuffle = c.get_bool("shuffle");
  o.drop_remainder = c.get_string("remainder") == "drop";
  int budget = std::max(1, thread_budget);
  o.decode_threads = static_cast<int>(c.get_int("decode_threads"));
  if (o.decode_threads == 0) o.decode_threads = budget;
  o.reader_threads = static_cast<int>(c.get_int("reader_threads"));
  if (o.reader_threads == 0) o.reader_threads = budget >= 8 ? 2 : 1;
  o.prefetch_depth = static_cast<int>(c.get_int("prefetch_depth"));
  o.dct = c.get_string("jpeg_dct") == "accurate" ? JpegDct::kAccurate : JpegDct::kFast;
  o.max_pixels = static_cast<uint64_t>(c.get_int("max_image_pixels"));
  o.error_log_limit = static_cast<int>(c.get_int("error_log_limit"));
  o.source.check_labels = c.get_string("check_labels") == "create";
  o.source.error_log_limit = o.error_log_limit;
  // The label scan at create runs before any reader or decoder starts: it may use both.
  o.source.scan_threads = std::max(o.reader_threads, o.decode_threads);
  o.image_size = static_cast<int>(c.get_int("image_size"));

  o.max_skipped_fraction = c.get_float("max_skipped_fraction");
  o.source.max_skipped_fraction = o.max_skipped_fraction;
  o.source.rebuild_stale_index = c.get_string("stale_index") == "rebuild";
  o.exif_apply = c.get_string("exif_orientation") == "apply";

  AugmentOptions& a = o.augment;
  a.seed = static_cast<uint64_t>(c.get_int("seed"));
  a.dtype = parse_dtype(c.get_string("image_dtype"));
  a.nhwc = c.get_string("data_format") == "NHWC";
  // The preset is applied when the pipeline knows its source and image size (auto
  // depends on both); an option set explicitly (API, command line or environment)
  // overrides it.
  o.preset = c.get_string("augment");
  if (is_set(c, "random_crop")) o.overrides.random_crop = c.get_bool("random_crop");
  if (is_set(c, "color_jitter")) o.overrides.color_jitter = c.get_bool("color_jitter");
  if (is_set(c, "flip_lr_prob")) o.overrides.flip_lr_prob = static_cast<float>(c.get_float("flip_lr_prob"));
  if (is_set(c, "flip_ud_prob")) o.overrides.flip_ud_prob = static_cast<float>(c.get_float("flip_ud_prob"));
  a.area_min = static_cast<float>(c.get_float("crop_area_min"));
  a.area_max = static_cast<float>(c.get_float("crop_area_max"));
  require(a.area_min <= a.area_max, "crop_area_min (", a.area_min, ") is above crop_area_max (", a.area_max, ")");
  a.aspect_min = static_cast<float>(c.get_float("crop_aspect_min"));
  a.aspect_max = static_cast<float>(c.get_float("crop_aspect_max"));
  require(a.aspect_min <= a.aspect_max, "crop_aspect_min is above crop_aspect_max");
  a.attempts = static_cast<int>(c.get_int("crop_attempts"));
  a.min_object_covered = static_cast<float>(c.get_float("min_object_covered"));
  a.brightness_delta = static_cast<float>(c.get_float("brightness_delta"));
  a.contrast_min = static_cast<float>(c.get_float("contrast_min"));
  a.contrast_max = static_cast<float>(c.get_float("contrast_max"));
  require(a.contrast_min <= a.contrast_max, "contrast_min is above contrast_max");
  a.saturation_min = static_cast<float>(c.get_float("saturation_min"));
  a.saturation_max = static_cast<float>(c.get_float("saturation_max"));
  require(a.saturation_min <= a.saturation_max, "saturation_min is above saturation_max");
  a.hue_delta = static_cast<float>(c.get_float("hue_delta"));
  a.eval_resize = static_cast<int>(c.get_int("eval_resize"));
  o.explicit_mean = is_set(c, "mean");
  o.explicit_std = is_set(c, "std");
  auto mean = parse_floats("mean", c.get_string("mean"));
  auto stddev = parse_floats("std", c.get_string("std"));
  for (int i = 0; i < 4; ++i) {
    a.mean[i] = mean[std::min<size_t>(static_cast<size_t>(i), mean.size() - 1)];
    a.stddev[i] = stddev[std::min<size_t>(static_cast<size_t>(i), stddev.size() - 1)];
    require(a.stddev[i] > 0, "option 'std': values must be positive, got '", c.get_string("std"), "'");
  }
  return o;
}

std::string auto_preset(const Source& source, int channels, int out_h, int out_w, std::string* reason) {
  auto why = [&](std::string text) {
    if (reason) *reason = std::move(text);
  };
  const std::string size = cat(out_h, "x", out_w, "x", channels);
  if (source.kind() == "synthetic") {
    why("synthetic data is never augmented");
    return "none";
  }
  if (!source.encoded() && channels == 1) {
    why(cat(size, " grayscale images (MNIST-like), which a crop or a flip would change into another class"));
    return "none";
  }
  if (std::max(out_h, out_w) <= 64) {
    why(cat(size, " images (CIFAR-sized): pad, random crop back to size, left-right flip"));
    return "padcrop";
  }
  why(cat(size, " images (ImageNet-sized): random-resized crop, colour jitter, left-right flip"));
  return "standard";
}

void apply_preset(const std::string& preset, const AugmentOverrides& v, AugmentOptions& a) {
  // As the labs define them: standard = distorted-bounding-box crop + colour distortion
  // + left-right flip; complex = standard + up-down flip; simple = standard without the
  // left-right flip; none = evaluation preprocessing. padcrop is CIFAR's recipe: pad by
  // 1/8 of the size with zeros, crop back at random, left-right flip.
  require(preset == "none" || preset == "simple" || preset == "standard" || preset == "complex" || preset == "padcrop",
          "augment preset '", preset, "' is not one of none|simple|standard|complex|padcrop");
  const bool distort = preset == "simple" || preset == "standard" || preset == "complex";
  a.random_crop = distort;
  a.color_jitter = distort;
  a.flip_lr_prob = (preset == "standard" || preset == "complex" || preset == "padcrop") ? 0.5f : 0.0f;
  a.flip_ud_prob = preset == "complex" ? 0.5f : 0.0f;
  a.crop_pad = preset == "padcrop" ? std::max(1, static_cast<int>(std::lround(std::min(a.out_h, a.out_w) / 8.0))) : 0;
  if (v.random_crop) a.random_crop = *v.random_crop;
  if (v.color_jitter) a.color_jitter = *v.color_jitter;
  if (v.flip_lr_prob) a.flip_lr_prob = *v.flip_lr_prob;
  if (v.flip_ud_prob) a.flip_ud_prob = *v.flip_ud_prob;
}

struct Pipeline::Slot {
  std::shared_ptr<Storage> images;
  std::vector<int32_t> labels;
  std::vector<uint8_t> mask;
  std::vector<int64_t> indices;
  Tensor images_view, labels_view, mask_view;  // made once: next() allocates nothing
  int64_t g = -1;
  std::atomic<int64_t> remaining{0};
  bool ready = false;
  bool had_errors = false;
  std::string fatal;  // a sample error that fails the pipeline when this batch is reached
  Code fatal_code = Code::kOk;
};

struct Pipeline::Work {
  Sample sample;
  Slot* slot = nullptr;
  int64_t g = 0, pos = 0;
};

Pipeline::Pipeline(const PipelineOptions& options, std::shared_ptr<Source> source)
    : o_(options),
      source_(std::move(source)),
      sampler_(ShardOptions{source_->size(), options.rank, options.size, options.batch_size, options.augment.seed,
                            options.shuffle, options.drop_remainder}) {
  require(o_.decode_threads >= 1 && o_.reader_threads >= 1, "reader_threads and decode_threads must be at least 1");
  require(o_.prefetch_depth >= 1, "prefetch_depth must be at least 1");
  synthetic_ = source_->kind() == "synthetic";
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
  sample_bytes_ = sample_bytes(a, channels_);
  const int64_t steps = sampler_.steps_per_epoch();
  require(o_.start_step >= 0 && o_.start_step < steps, "resume step ", o_.start_step, " is outside [0, ", steps, ")");
  require(o_.start_epoch >= 0, "resume epoch must not be negative");
  require(o_.max_skipped_fraction >= 0 && o_.max_skipped_fraction <= 1, "max_skipped_fraction ",
          o_.max_skipped_fraction, " is outside [0, 1]");
  consumer_g_ = released_g_ = sched_g_ = o_.start_epoch * steps + o_.start_step;

  const size_t nslots = static_cast<size_t>(o_.prefetch_depth) + 1;
  const size_t B = static_cast<size_t>(o_.batch_size);
  for (size_t i = 0; i < nslots; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->images = allocate_host(sample_bytes_ * B, true);
    slot->labels.assign(B, 0);
    slot->mask.assign(B, 0);
    const int64_t n = o_.batch_size;
    Shape shape = a.nhwc ? Shape{n, a.out_h, a.out_w, channels_} : Shape{n, channels_, a.out_h, a.out_w};
    slot->images_view = Tensor::wrap(slot->images->data(), shape, a.dtype);
    slot->labels_view = Tensor::wrap(slot->labels.data(), {n}, DType::kI32);
    slot->mask_view = Tensor::wrap(slot->mask.data(), {n}, DType::kU8);
    slots_.push_back(std::move(slot));
  }
  if (synthetic_) {
    fill_synthetic();
    return;
  }
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

Pipeline::~Pipeline() { stop(); }

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

void Pipeline::reader_loop() {
  const int64_t steps = sampler_.steps_per_epoch();
  const int64_t nslots = static_cast<int64_t>(slots_.size());
  int64_t cpu_mark = thread_cpu_ns();  // everything a reader does is the read stage
  for (;;) {
    Work* w = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_space_.wait(lock, [&] { return stop_ || (sched_g_ < released_g_ + nslots && !free_works_.empty()); });
      if (stop_) return;
      w = free_works_.back();
      free_works_.pop_back();
      Slot& slot = *slots_[static_cast<size_t>(sched_g_ % nslots)];
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
    }
    int64_t t0 = now_ns();
    bool ok = true;
    Error error(Code::kOk, "");
    if (w->sample.index < 0) {
      w->sample.kind = Sample::Kind::kPad;
    } else {
      try {
        source_->read(w->sample.index, w->sample);
      } catch (const Error& e) {
        ok = false;
        error = e;
      } catch (const std::bad_alloc&) {
        ok = false;
        error = Error(Code::kOutOfMemory, cat(source_->origin(w->sample.index), ": out of memory"));
      }
    }
    read_ns_ += now_ns() - t0;
    if (ok) bytes_read_ += static_cast<int64_t>(w->sample.storage.size());
    // Counted before the sample is handed on, so that statistics taken once its batch is
    // out include its read.
    const int64_t cpu = thread_cpu_ns();
    read_cpu_ns_ += cpu - cpu_mark;
    cpu_mark = cpu;
    if (!ok) {
      Slot* slot = w->slot;
      int64_t index = w->sample.index;
      {
        std::lock_guard<std::mutex> lock(mu_);
        free_works_.push_back(w);
      }
      cv_space_.notify_one();
      finish_sample(*slot, false, &error, index);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(w);
    }
    cv_work_.notify_one();
  }
}

void Pipeline::decoder_loop() {
  JpegDecoder decoder(o_.dct, o_.max_pixels, o_.exif_apply);
  Renderer renderer;
  int64_t cpu_mark = thread_cpu_ns();
  for (;;) {
    Work* w = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      w = queue_.front();
      queue_.pop_front();
    }
    int64_t t0 = now_ns();
    bool ok = true;
    Error error(Code::kOk, "");
    StageWall wall;
    try {
      process(*w, decoder, renderer, wall);
    } catch (const Error& e) {
      ok = false;
      error = Error(e.code(), cat(source_->origin(w->sample.index), ": ", e.what()));
    } catch (const std::bad_alloc&) {
      ok = false;
      error = Error(Code::kOutOfMemory, cat(source_->origin(w->sample.index), ": out of memory"));
    }
    const int64_t work_ns = now_ns() - t0;
    decode_ns_ += work_ns;
    // Counted before the sample is finished, so that statistics taken once its batch is
    // out include it (the handing over below counts with the next sample).
    const int64_t cpu = thread_cpu_ns();
    add_decoder_cpu(cpu - cpu_mark, work_ns, wall);
    cpu_mark = cpu;
    Slot* slot = w->slot;
    int64_t index = w->sample.index;
    bool pad = w->sample.kind == Sample::Kind::kPad;
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_works_.push_back(w);
    }
    cv_space_.notify_one();
    if (pad) padded_++;
    finish_sample(*slot, ok, ok ? nullptr : &error, pad ? -1 : index);
  }
}

void Pipeline::add_decoder_cpu(int64_t cpu_ns, int64_t work_ns, const StageWall& wall) {
  // The sample's CPU time (with the queue handling before it): decoding and augmenting
  // as measured, the rest is assembly. A raw sample's few microseconds are split in the
  // proportions of their wall time instead.
  const double scale =
      wall.cpu ? 1.0 : static_cast<double>(cpu_ns) / static_cast<double>(std::max<int64_t>(1, work_ns));
  const int64_t decode = std::min(cpu_ns, static_cast<int64_t>(scale * static_cast<double>(wall.decode)));
  const int64_t augment = std::min(cpu_ns - decode, static_cast<int64_t>(scale * static_cast<double>(wall.augment)));
  decode_cpu_ns_ += decode;
  augment_cpu_ns_ += augment;
  assemble_cpu_ns_ += cpu_ns - decode - augment;
}

void Pipeline::process(Work& w, JpegDecoder& decoder, Renderer& renderer, StageWall& wall) {
  Slot& slot = *w.slot;
  auto* dst = static_cast<uint8_t*>(slot.images->data()) + sample_bytes_ * static_cast<size_t>(w.pos);
  const Sample& s = w.sample;
  const int64_t steps = sampler_.steps_per_epoch();
  const int64_t epoch = w.g / steps;
  const size_t pos = static_cast<size_t>(w.pos);
  if (s.kind == Sample::Kind::kPad) {
    zero_sample(o_.augment, channels_, dst);
    slot.labels[pos] = 0;
    slot.mask[pos] = 0;
    return;
  }
  if (s.kind == Sample::Kind::kRaw) {
    const int64_t t0 = now_ns();
    Draws d = draw_sample(s.raw_w, s.raw_h, s.boxes, o_.augment, epoch, s.index, static_cast<int>(w.pos));
    renderer.render(s.raw, s.raw_w, s.raw_h, static_cast<size_t>(s.raw_w) * s.raw_c, s.raw_c,
                    static_cast<float>(d.crop.x), static_cast<float>(d.crop.y), static_cast<float>(d.crop.w),
                    static_cast<float>(d.crop.h), d, o_.augment, dst);
    wall.augment += now_ns() - t0;
  } else {
    decode_encoded(w, decoder, renderer, dst, epoch, wall);
  }
  slot.labels[pos] = static_cast<int32_t>(s.label);
  slot.mask[pos] = 1;
  images_++;
}

void Pipeline::decode_encoded(Work& w, JpegDecoder& decoder, Renderer& renderer, uint8_t* dst, int64_t epoch,
                              StageWall& wall) {
  const Sample& s = w.sample;
  std::atomic<uint8_t>& verdict = verdicts_[static_cast<size_t>(s.index)];
  const uint8_t known = verdict.load(std::memory_order_acquire);
  if (known == kBad) {
    std::lock_guard<std::mutex> lock(bad_mu_);
    throw bad_.at(s.index);
  }
  // JPEG work takes milliseconds: its stages are timed on the thread's CPU clock.
  wall.cpu = true;
  const int64_t t0 = thread_cpu_ns();
  int64_t t1 = t0;
  try {
    JpegHeader h = decoder.read_header(s.encoded);
    const std::vector<BBox>* boxes = &s.boxes;
    std::vector<BBox> turned;
    if (h.orientation != 1 && !s.boxes.empty()) {
      for (const auto& b : s.boxes) turned.push_back(orient_box(b, h.orientation));
      boxes = &turned;
    }
    Draws d = draw_sample(h.width, h.height, *boxes, o_.augment, epoch, s.index, static_cast<int>(w.pos));
    DecodedWindow win = decoder.decode_window(s.encoded, d.crop.x, d.crop.y, d.crop.w, d.crop.h, o_.augment.out_w,
                                              o_.augment.out_h, known == kUnknown);
    t1 = thread_cpu_ns();
    wall.decode += t1 - t0;
    renderer.render(win.pixels, win.width, win.height, win.stride, 3, win.crop_x, win.crop_y, win.crop_w, win.crop_h, d,
                    o_.augment, dst);
    wall.augment += thread_cpu_ns() - t1;
  } catch (const Error& e) {
    if (t1 == t0) wall.decode += thread_cpu_ns() - t0;  // a bad image fails while decoding
    if (e.code() == Code::kJpeg || e.code() == Code::kCorruptData) {
      std::lock_guard<std::mutex> lock(bad_mu_);
      bad_.emplace(s.index, e);
      verdict.store(kBad, std::memory_order_release);
    }
    throw;
  }
  if (known == kUnknown) verdict.store(kGood, std::memory_order_release);
}

void Pipeline::finish_sample(Slot& slot, bool ok, const Error* error, int64_t index) {
  bool fatal = false;
  if (!ok) {
    bool skippable = error->code() == Code::kCorruptData || error->code() == Code::kJpeg;
    if (o_.on_error == OnError::kSkip && skippable) {
      int64_t n = ++errors_;
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

const BatchView& Pipeline::next() {
  const int64_t steps = sampler_.steps_per_epoch();
  const int64_t nslots = static_cast<int64_t>(slots_.size());
  int64_t t0 = now_ns();
  Slot* slot = nullptr;
  int64_t g = 0;
  if (synthetic_) {
    std::lock_guard<std::mutex> lock(mu_);
    g = consumer_g_++;
    slot = slots_[static_cast<size_t>(g % nslots)].get();
    ready_sum_ += nslots - 1;
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    if (holding_) {
      released_g_ = consumer_g_;
      holding_ = false;
      cv_space_.notify_all();
    }
    if (!fatal_.empty()) throw Error(fatal_code_, fatal_);
    g = consumer_g_;
    slot = slots_[static_cast<size_t>(g % nslots)].get();
    int64_t ready_ahead = 0;
    for (int64_t k = g; k < g + nslots; ++k) {
      const Slot& s = *slots_[static_cast<size_t>(k % nslots)];
      if (s.g == k && s.ready) ++ready_ahead;
    }
    ready_sum_ += ready_ahead;
    queue_sum_ += static_cast<int64_t>(queue_.size());
    cv_ready_.wait(lock, [&] { return stop_ || (slot->g == g && slot->ready); });
    if (stop_) fail(Code::kCancelled, "the pipeline is shutting down");
    if (!slot->fatal.empty()) {
      // Batches before this one were fine; from here on the pipeline stays failed.
      fatal_ = slot->fatal;
      fatal_code_ = slot->fatal_code;
      throw Error(fatal_code_, fatal_);
    }
    ++consumer_g_;
    holding_ = true;
    if (slot->had_errors) {
      const int64_t cpu = thread_cpu_ns();
      compact(*slot);
      assemble_cpu_ns_ += thread_cpu_ns() - cpu;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);  // stats() may read these from another thread
  int64_t t1 = now_ns();
  // The first batch waits for the pipeline to fill: start-up, not steady state.
  if (batches_ == 0) {
    first_ns_ = t1;
  } else {
    wait_ns_ += t1 - t0;
  }
  last_ns_ = t1;
  ++batches_;

  view_.images = slot->images_view;
  view_.labels = slot->labels_view;
  view_.valid_mask = slot->mask_view;
  int64_t valid = 0;
  for (uint8_t m : slot->mask) valid += m;
  view_.valid = valid;
  if (batches_ == 1) first_batch_valid_ = valid;
  delivered_ += valid;
  view_.epoch = g / steps;
  view_.step = g % steps;
  if (!synthetic_) count_skipped(*slot, g, valid);
  return view_;
}

void Pipeline::count_skipped(const Slot& slot, int64_t g, int64_t valid) {
  const int64_t steps = sampler_.steps_per_epoch(), step = g % steps;
  const int64_t per_epoch = sampler_.valid_per_epoch();
  if (step == 0 || batches_ == 1) {
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

PipelineStats Pipeline::stats() const {
  PipelineStats s;
  std::lock_guard<std::mutex> lock(mu_);
  s.batches = batches_;
  s.images = delivered_;
  s.decoded = images_.load();
  s.errors = errors_.load();
  s.skipped = run_skipped_;
  s.padded = padded_.load();
  s.read_busy_s = static_cast<double>(read_ns_.load()) * 1e-9;
  s.decode_busy_s = static_cast<double>(decode_ns_.load()) * 1e-9;
  s.read_cpu_s = static_cast<double>(read_cpu_ns_.load()) * 1e-9;
  s.decode_cpu_s = static_cast<double>(decode_cpu_ns_.load()) * 1e-9;
  s.augment_cpu_s = static_cast<double>(augment_cpu_ns_.load()) * 1e-9;
  s.assemble_cpu_s = static_cast<double>(assemble_cpu_ns_.load()) * 1e-9;
  s.bytes_read = bytes_read_.load();
  s.wait_s = static_cast<double>(wait_ns_) * 1e-9;
  s.elapsed_s = first_ns_ ? static_cast<double>(last_ns_ - first_ns_) * 1e-9 : 0.0;
  s.images_per_sec = s.elapsed_s > 0 ? static_cast<double>(s.images - first_batch_valid_) / s.elapsed_s : 0.0;
  s.wait_fraction = s.elapsed_s > 0 ? std::min(1.0, s.wait_s / s.elapsed_s) : 0.0;
  s.mean_ready_batches = batches_ ? static_cast<double>(ready_sum_) / static_cast<double>(batches_) : 0.0;
  s.mean_decode_queue = batches_ ? static_cast<double>(queue_sum_) / static_cast<double>(batches_) : 0.0;
  s.reader_threads = synthetic_ ? 0 : o_.reader_threads;
  s.decode_threads = synthetic_ ? 0 : o_.decode_threads;
  s.prefetch_depth = o_.prefetch_depth;
  s.limiting_stage = synthetic_ ? "" : limiting_stage(s);
  int pct = static_cast<int>(std::lround(s.wait_fraction * 100));
  if (s.batches < 2) {
    s.verdict = "not enough batches yet to judge the input pipeline";
  } else if (s.wait_fraction > 0.05) {
    s.verdict = cat("input-bound: the step waited for data ", pct, "% of the time; ",
                    s.limiting_stage.empty() ? std::string("the pipeline") : s.limiting_stage, " limits it (",
                    stage_shares(s), "; decode threads busy ",
                    std::min(100L, std::lround(s.decode_busy_s /
                                               std::max(1e-9, s.elapsed_s * std::max(1, s.decode_threads)) * 100)),
                    "%): ",
                    s.limiting_stage == "read" ? "raise reader_threads, or read from faster storage"
                    : s.limiting_stage == "decode"
                        ? "raise decode_threads or prefetch_depth, or use jpeg_dct=fast or smaller images"
                    : s.limiting_stage == "augment" ? "raise decode_threads, or use a lighter augment preset"
                                                    : "raise decode_threads or prefetch_depth");
  } else {
    s.verdict = cat("not input-bound: the step waited for data ", pct, "% of the time");
  }
  return s;
}

std::string limiting_stage(const PipelineStats& s) {
  if (s.decoded == 0) return "";
  // The readers and the decode threads are two pools in a row: the one whose busy time
  // per thread is larger bounds the rate; within the decode pool, its largest stage.
  const double readers = s.read_busy_s / std::max(1, s.reader_threads);
  const double decoders = s.decode_busy_s / std::max(1, s.decode_threads);
  if (readers > decoders) return "read";
  if (s.decode_cpu_s >= s.augment_cpu_s && s.decode_cpu_s >= s.assemble_cpu_s) return "decode";
  return s.augment_cpu_s >= s.assemble_cpu_s ? "augment" : "assemble";
}

std::string stage_shares(const PipelineStats& s) {
  const double total = s.read_cpu_s + s.decode_cpu_s + s.augment_cpu_s + s.assemble_cpu_s;
  const double per = 1e3 / std::max<double>(1, static_cast<double>(s.decoded));
  auto part = [&](const char* name, double v) {
    return cat(name, " ", fixed3(v * per), " ms (", std::lround(total > 0 ? 100 * v / total : 0), "%)");
  };
  return cat("CPU per image: ", part("read", s.read_cpu_s), ", ", part("decode", s.decode_cpu_s), ", ",
             part("augment", s.augment_cpu_s), ", ", part("assemble", s.assemble_cpu_s), ", total ",
             fixed3(total * per), " ms");
}

}  // namespace cohort::data
