// The input pipeline's worker loops: readers fetch the bytes of the samples the
// scheduler hands them (Pipeline::take_work), decode threads decode and augment them
// straight into their batch slot.
#include <algorithm>

#include "core/status.h"
#include "core/strings.h"
#include "data/pipeline.h"
#include "data/pipeline_ring.h"

namespace cohort::data {

void Pipeline::reader_loop() {
  int64_t cpu_mark = thread_cpu_ns();  // everything a reader does is the read stage
  while (Work* w = take_work()) {
    const int64_t t0 = now_ns();
    Error error(Code::kOk, "");
    const bool ok = read_sample(*w, error);
    counters_.read_ns += now_ns() - t0;
    if (ok) counters_.bytes_read += static_cast<int64_t>(w->sample.storage.size());
    // Counted before the sample is handed on, so that statistics taken once its batch is
    // out include its read.
    const int64_t cpu = thread_cpu_ns();
    counters_.read_cpu_ns += cpu - cpu_mark;
    cpu_mark = cpu;
    if (!ok) {
      Slot* slot = w->slot;
      const int64_t index = w->sample.index;
      release_work(w);
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

// Reads the sample's bytes (a padding position has none); false with `error` set when
// the source fails.
bool Pipeline::read_sample(Work& w, Error& error) {
  if (w.sample.index < 0) {
    w.sample.kind = Sample::Kind::kPad;
    return true;
  }
  try {
    source_->read(w.sample.index, w.sample);
    return true;
  } catch (const Error& e) {
    error = e;
  } catch (const std::bad_alloc&) {
    error = Error(Code::kOutOfMemory, cat(source_->origin(w.sample.index), ": out of memory"));
  }
  return false;
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
    counters_.decode_ns += work_ns;
    // Counted before the sample is finished, so that statistics taken once its batch is
    // out include it (the handing over below counts with the next sample).
    const int64_t cpu = thread_cpu_ns();
    add_decoder_cpu(cpu - cpu_mark, work_ns, wall);
    cpu_mark = cpu;
    Slot* slot = w->slot;
    const int64_t index = w->sample.index;
    const bool pad = w->sample.kind == Sample::Kind::kPad;
    release_work(w);
    if (pad) counters_.padded++;
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
  counters_.decode_cpu_ns += decode;
  counters_.augment_cpu_ns += augment;
  counters_.assemble_cpu_ns += cpu_ns - decode - augment;
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
    const SourceImage image{s.raw, s.raw_w, s.raw_h, static_cast<size_t>(s.raw_w) * s.raw_c, s.raw_c};
    const CropWindow crop{static_cast<float>(d.crop.x), static_cast<float>(d.crop.y), static_cast<float>(d.crop.w),
                          static_cast<float>(d.crop.h)};
    renderer.render(image, crop, d, o_.augment, dst);
    wall.augment += now_ns() - t0;
  } else {
    decode_encoded(w, decoder, renderer, dst, epoch, wall);
  }
  slot.labels[pos] = static_cast<int32_t>(s.label);
  slot.mask[pos] = 1;
  counters_.decoded++;
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
    renderer.render(win.image(), win.crop(), d, o_.augment, dst);
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

}  // namespace cohort::data
