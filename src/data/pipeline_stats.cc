#include "data/pipeline_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/strings.h"
#include "data/pipeline.h"

namespace cohort::data {
namespace {

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

void PipelineCounters::delivered_batch(int64_t call_ns, int64_t done_ns, int64_t valid) {
  if (batches == 0) {
    first_ns = done_ns;
    first_batch_valid = valid;
  } else {
    wait_ns += done_ns - call_ns;
  }
  last_ns = done_ns;
  ++batches;
  delivered += valid;
}

PipelineStats PipelineCounters::snapshot() const {
  PipelineStats s;
  s.batches = batches;
  s.images = delivered;
  s.decoded = decoded.load();
  s.errors = errors.load();
  s.padded = padded.load();
  s.read_busy_s = seconds(read_ns.load());
  s.decode_busy_s = seconds(decode_ns.load());
  s.read_cpu_s = seconds(read_cpu_ns.load());
  s.decode_cpu_s = seconds(decode_cpu_ns.load());
  s.augment_cpu_s = seconds(augment_cpu_ns.load());
  s.assemble_cpu_s = seconds(assemble_cpu_ns.load());
  s.bytes_read = bytes_read.load();
  s.wait_s = seconds(wait_ns);
  s.elapsed_s = first_ns ? seconds(last_ns - first_ns) : 0.0;
  s.images_per_sec = s.elapsed_s > 0 ? static_cast<double>(s.images - first_batch_valid) / s.elapsed_s : 0.0;
  s.wait_fraction = s.elapsed_s > 0 ? std::min(1.0, s.wait_s / s.elapsed_s) : 0.0;
  s.mean_ready_batches = batches ? static_cast<double>(ready_sum) / static_cast<double>(batches) : 0.0;
  s.mean_decode_queue = batches ? static_cast<double>(queue_sum) / static_cast<double>(batches) : 0.0;
  return s;
}

PipelineStats Pipeline::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PipelineStats s = counters_.snapshot();
  s.skipped = run_skipped_;
  s.reader_threads = synthetic_ ? 0 : o_.reader_threads;
  s.decode_threads = synthetic_ ? 0 : o_.decode_threads;
  s.prefetch_depth = o_.prefetch_depth;
  s.limiting_stage = synthetic_ ? "" : limiting_stage(s);
  if (feed_) feed_->add_stats(s);
  s.verdict = pipeline_verdict(s);
  return s;
}

namespace {

// What the copies of the batches to a device take: a verdict of its own when they bound
// the rate, else a note ("" without a feed device).
std::string copy_verdict(const PipelineStats& s, bool* bound) {
  *bound = false;
  if (s.copy_s <= 0 || s.elapsed_s <= 0) return "";
  const double share = s.copy_s / s.elapsed_s;
  const double ms = s.copy_s * 1e3 / std::max<double>(1, static_cast<double>(s.batches));
  const double gbs = static_cast<double>(s.copy_bytes) / s.copy_s / 1e9;
  const std::string what =
      cat("copying the batches to the device takes ", std::lround(ms * 100) / 100.0, " ms per batch (",
          std::lround(gbs * 10) / 10.0, " GB/s), ", std::lround(share * 100), "% of the time");
  if (share < 0.9) return cat(what, ", overlapped with compute");
  *bound = true;
  return cat("input-bound: ", what,
             ", so the copy bounds the rate: check that the batches are pinned (the log says so at the start; "
             "cohort-bandwidth shows the link's rate), or use smaller images");
}

}  // namespace

std::string pipeline_verdict(const PipelineStats& s) {
  const int pct = static_cast<int>(std::lround(s.wait_fraction * 100));
  if (s.batches < 2) return "not enough batches yet to judge the input pipeline";
  bool copy_bound = false;
  const std::string copy = copy_verdict(s, &copy_bound);
  if (copy_bound) return copy;
  if (!copy.empty() && s.wait_fraction <= 0.05)
    return cat("not input-bound: the step waited for data ", pct, "% of the time; ", copy);
  if (s.wait_fraction <= 0.05) return cat("not input-bound: the step waited for data ", pct, "% of the time");
  const long decode_busy =
      std::min(100L, std::lround(s.decode_busy_s / std::max(1e-9, s.elapsed_s * std::max(1, s.decode_threads)) * 100));
  const char* advice = s.limiting_stage == "read" ? "raise reader_threads, or read from faster storage"
                       : s.limiting_stage == "decode"
                           ? "raise decode_threads or prefetch_depth, or use jpeg_dct=fast or smaller images"
                       : s.limiting_stage == "augment" ? "raise decode_threads, or use a lighter augment preset"
                                                       : "raise decode_threads or prefetch_depth";
  return cat("input-bound: the step waited for data ", pct, "% of the time; ",
             s.limiting_stage.empty() ? std::string("the pipeline") : s.limiting_stage, " limits it (", stage_shares(s),
             "; decode threads busy ", decode_busy, "%): ", advice);
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
