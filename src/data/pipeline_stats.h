// What the input pipeline reports about itself: per-stage busy and CPU time, the
// consumer's wait, the stage that limits the rate and a verdict saying what to change.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace cohort::data {

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
  // Batches copied on to a device (a feed device): the copies' seconds on their stream
  // and their bytes (0 when the batches stay in host memory).
  double copy_s = 0;
  int64_t copy_bytes = 0;
  std::string verdict;
};

// The stage that bounds the pipeline's rate ("" before any image): read when the readers
// are busier per thread than the decode threads, else the decode pool's largest stage.
std::string limiting_stage(const PipelineStats& s);
// "CPU per image: read 0.010 ms (2%), decode …, augment …, assemble …, total … ms".
std::string stage_shares(const PipelineStats& s);
// Whether the consumer waited for data more than 5% of the time, and if so which stage
// limits and what to change.
std::string pipeline_verdict(const PipelineStats& s);

// The counters behind PipelineStats. The reader and decode threads add to the stage
// counters without a lock; next() updates the delivery counters under the pipeline's
// lock, which stats() also holds.
struct PipelineCounters {
  std::atomic<int64_t> read_ns{0}, decode_ns{0}, decoded{0}, errors{0}, padded{0};
  std::atomic<int64_t> read_cpu_ns{0}, decode_cpu_ns{0}, augment_cpu_ns{0}, assemble_cpu_ns{0}, bytes_read{0};

  int64_t batches = 0, delivered = 0, first_batch_valid = 0;
  int64_t wait_ns = 0, ready_sum = 0, queue_sum = 0;  // summed over the calls of next()
  int64_t first_ns = 0, last_ns = 0;                  // steady clock at the first and last delivery

  // A batch of `valid` samples handed out at `done_ns` after a call of next() that began
  // at `call_ns`: the first one only marks the start (filling the pipeline is start-up).
  void delivered_batch(int64_t call_ns, int64_t done_ns, int64_t valid);
  // The counts, times, rates and means of these counters (limiting_stage, verdict and
  // the pipeline's own settings left to the caller).
  PipelineStats snapshot() const;
};

}  // namespace cohort::data
