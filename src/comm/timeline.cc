#include "comm/timeline.h"

#include <fstream>

#include "core/json.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort::comm {

int64_t Timeline::to_us(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

int64_t Timeline::now_us() { return to_us(Clock::now()); }

void Timeline::span(const std::string& name, const char* phase, int64_t start_us, int64_t end_us) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  events_.push_back({name, phase, start_us, end_us, false});
}

void Timeline::instant(const std::string& name) {
  if (!enabled_) return;
  int64_t t = now_us();
  std::lock_guard lock(mu_);
  events_.push_back({name, "STEP", t, t, true});
}

std::string Timeline::events_json(int rank, int64_t offset_us) const {
  std::lock_guard lock(mu_);
  std::string out =
      cat(R"({"name": "process_name", "ph": "M", "pid": )", rank, R"(, "args": {"name": "rank )", rank, R"("}})");
  out +=
      cat(R"(, {"name": "process_sort_index", "ph": "M", "pid": )", rank, R"(, "args": {"sort_index": )", rank, "}}");
  for (const Event& e : events_) {
    int64_t ts = e.start_us - offset_us;
    if (e.instant) {
      out += cat(R"(, {"name": )", json_string(e.name), R"(, "cat": "STEP", "ph": "i", "s": "p", "ts": )", ts,
                 ", \"pid\": ", rank, ", \"tid\": 0}");
    } else {
      out += cat(R"(, {"name": ")", e.phase, R"(", "cat": ")", e.phase, R"(", "ph": "X", "ts": )", ts,
                 ", \"dur\": ", e.end_us - e.start_us, ", \"pid\": ", rank, R"(, "tid": 0, "args": {"tensor": )",
                 json_string(e.name), "}}");
    }
  }
  return out;
}

void Timeline::write(const std::string& path, const std::vector<std::string>& per_rank_events) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) fail(Code::kIo, "cannot open timeline_file '", path, "' for writing");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string& events : per_rank_events) {
    if (events.empty()) continue;
    out << (first ? "" : ",\n") << events;
    first = false;
  }
  out << "\n]}\n";
  if (!out) fail(Code::kIo, "writing timeline_file '", path, "' failed");
}

}  // namespace cohort::comm
