// Finds collectives that some ranks submitted and others did not (a diverged program,
// a rank stuck elsewhere). It warns, on rank 0, once per collective that has waited
// stall_warning_s, naming the ranks that submitted it and those missing, with every
// rank's count of submitted operations; and it decides when a collective pending for
// stall_shutdown_s fails with kStalled instead of waiting forever.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "comm/negotiation.h"
#include "core/status.h"

namespace cohort::comm {

class StallInspector {
 public:
  // Thresholds in seconds; 0 turns the warning or the shutdown off.
  StallInspector(int rank, double warning_s, double shutdown_s);

  // Whether an operation that has waited `age_s` on a cache bit must be announced in
  // full again: cache bits say nothing about who is missing, and the table (read by
  // check() and stalled()) is built from full announcements only.
  bool needs_full_announcement(double age_s) const;
  // The error for a collective this rank announced `age_s` ago, once that is longer
  // than stall_shutdown_s; names the ranks that never submitted it.
  std::optional<Status> stalled(const Meta& meta, double age_s, const AnnouncementTable& table) const;
  // Rank 0, at most every 200 ms: logs a warning listing every collective waiting
  // longer than stall_warning_s that it has not reported yet, and keeps it for
  // last_report(). Engine thread.
  void check(AnnouncementTable& table, Clock::time_point now);
  // The most recent warning text. Any thread.
  std::string last_report() const;

  static constexpr std::chrono::milliseconds kCheckInterval{200};

 private:
  int rank_;
  double warning_s_, shutdown_s_;
  double first_threshold_s_;  // the smaller positive threshold, 0 if both are off
  Clock::time_point last_check_;
  mutable std::mutex mu_;
  std::string last_report_;
};

}  // namespace cohort::comm
