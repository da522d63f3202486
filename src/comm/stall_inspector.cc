#include "comm/stall_inspector.h"

#include <algorithm>

#include "core/logging.h"

namespace cohort::comm {

StallInspector::StallInspector(int rank, double warning_s, double shutdown_s)
    : rank_(rank), warning_s_(warning_s), shutdown_s_(shutdown_s), first_threshold_s_(0), last_check_(Clock::now()) {
  for (double t : {warning_s_, shutdown_s_})
    if (t > 0) first_threshold_s_ = first_threshold_s_ > 0 ? std::min(first_threshold_s_, t) : t;
}

bool StallInspector::needs_full_announcement(double age_s) const {
  return first_threshold_s_ > 0 && age_s > 0.5 * first_threshold_s_;
}

std::optional<Status> StallInspector::stalled(const Meta& meta, double age_s, const AnnouncementTable& table) const {
  if (shutdown_s_ <= 0 || age_s <= shutdown_s_ || meta.type == OpType::kJoin) return std::nullopt;
  std::string missing;
  auto it = table.entries.find(meta.name);
  if (it != table.entries.end()) missing = cat(": ranks ", rank_list(table.missing(it->second)), " never submitted it");
  return Status(Code::kStalled,
                cat("collective '", meta.name, "' (", meta.describe(), ") stalled for ", shutdown_s_,
                    " s (stall_shutdown_s)", missing, "; operations submitted per rank: ", table.submitted_per_rank()));
}

void StallInspector::check(AnnouncementTable& table, Clock::time_point now) {
  if (warning_s_ <= 0 || rank_ != 0) return;
  if (now - last_check_ < kCheckInterval) return;
  last_check_ = now;
  std::string report;
  for (const std::string& name : table.order) {
    AnnouncementTable::Entry& e = table.entries.at(name);
    double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (e.warned || age < warning_s_) continue;
    e.warned = true;
    std::vector<int> have;
    const Meta* some = nullptr;
    for (size_t r = 0; r < e.metas.size(); ++r) {
      if (!e.metas[r]) continue;
      have.push_back(static_cast<int>(r));
      some = &*e.metas[r];
    }
    report +=
        cat("\n  '", name, "' (", some ? some->describe() : std::string("?"), "): waiting ", static_cast<int>(age),
            " s; submitted by ranks ", rank_list(have), ", missing on ranks ", rank_list(table.missing(e)));
  }
  if (report.empty()) return;
  report = cat("stall: collectives have waited more than ", warning_s_, " s (stall_warning_s) for some ranks:", report,
               "\n  operations submitted per rank: ", table.submitted_per_rank(),
               " (the first rank with a lower count diverged first)");
  COHORT_LOG_WARN(report);
  std::lock_guard lock(mu_);
  last_report_ = report;
}

std::string StallInspector::last_report() const {
  std::lock_guard lock(mu_);
  return last_report_;
}

}  // namespace cohort::comm
