// Per-rank record of what the engine did to each tensor (negotiation, fusion copies,
// the collective) plus step markers, merged by rank 0 into one Chrome trace with one
// process row per rank. Recording is cheap and off unless a file is configured.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/types.h"

namespace cohort::comm {

class Timeline {
 public:
  void enable(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }

  static int64_t now_us();
  static int64_t to_us(Clock::time_point t);
  // A complete event on this rank. Thread-safe.
  void span(const std::string& name, const char* phase, int64_t start_us, int64_t end_us);
  // An instant event (step markers). Thread-safe.
  void instant(const std::string& name);

  // This rank's events as JSON objects joined by commas, times shifted by -offset_us,
  // with pid = rank.
  std::string events_json(int rank, int64_t offset_us) const;
  // Writes the merged trace; throws kIo naming the file.
  static void write(const std::string& path, const std::vector<std::string>& per_rank_events);

 private:
  struct Event {
    std::string name;
    const char* phase;
    int64_t start_us, end_us;
    bool instant;
  };
  bool enabled_ = false;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace cohort::comm
