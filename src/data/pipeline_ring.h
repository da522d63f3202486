// Inside the input pipeline (its .cc files only): the batch slots of the prefetch ring,
// the work items the readers hand to the decode threads, and the clocks the stages are
// timed with.
#pragma once

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "data/pipeline.h"

namespace cohort::data {

// One batch in the ring: its buffers are allocated once, at construction, and reused
// for global steps g, g + slots, g + 2 * slots, …
struct Pipeline::Slot {
  // Images and labels come from the batch allocator (pinned memory when the batches go
  // on to a device), the rest is the pipeline's own.
  std::shared_ptr<Storage> images, labels_storage;
  int32_t* labels = nullptr;
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

// One sample on its way from a reader to a decode thread, bound for position `pos` of
// the batch of global step `g` in `slot`.
struct Pipeline::Work {
  Sample sample;
  Slot* slot = nullptr;
  int64_t g = 0, pos = 0;
};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of the calling thread. A system call (about a microsecond), so the stage
// loops read it once per sample and split it by wall time within the sample.
inline int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace cohort::data
