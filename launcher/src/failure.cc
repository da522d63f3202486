#include "failure.h"

#include <charconv>
#include <climits>
#include <csignal>
#include <cstring>
#include <regex>

namespace cohortrun {

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signal);
  }
}

int signal_number(const std::string& name) {
  for (int s = 1; s < 32; ++s)
    if (signal_name(s) == name) return s;
  return 0;
}

namespace {

// A number the patterns below matched (-?\d+), clamped to int: ranks print anything.
int to_int(const std::string& digits) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range || v > INT_MAX || v < INT_MIN)
    return digits.starts_with('-') ? INT_MIN : INT_MAX;
  return static_cast<int>(v);
}

}  // namespace

std::optional<RankFailure> find_rank_failure(std::string_view text_view) {
  // mpirun wraps its messages at fixed widths: match across line breaks. Only short
  // lines (theirs are < 100 characters) with whitespace runs collapsed are searched,
  // which keeps libstdc++'s recursive regex matcher shallow whatever the ranks print.
  std::string text;
  size_t start = 0;
  while (start < text_view.size()) {
    size_t end = text_view.find('\n', start);
    if (end == std::string_view::npos) end = text_view.size();
    const std::string_view line = text_view.substr(start, end - start);
    start = end + 1;
    if (line.size() > 400) continue;
    for (char c : line) {
      if (c == ' ' || c == '\t' || c == '\r') c = ' ';
      if (c != ' ' || (!text.empty() && text.back() != ' ')) text += c;
    }
    if (!text.empty() && text.back() != ' ') text += ' ';
  }
  std::smatch m;
  RankFailure f;
  static const std::regex signal_re(
      R"(process rank (\d+) with PID \d+ on\s+node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
  static const std::regex exit_re(
      R"(The first process to do so was:\s+Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(-?\d+))");
  static const std::regex abort_re(
      R"(MPI_ABORT was invoked on rank (\d+) in communicator (\S+)\s+with errorcode (-?\d+))");
  // The line of cohortrun's rank monitor (rank_monitor.h), possibly after a --tag-output prefix.
  static const std::regex monitor_re(
      R"(cohortrun: rank (\d+) \(pid \d+ on (\S+)\) (?:exited with status (\d+)|was killed by (\S+) \(([^)]*)\)))");
  static const std::regex improper_re(R"(process rank (\d+) with PID \d+ on\s+node (\S+) exiting improperly)");
  static const std::regex lost_re(
      R"(lost communication with a remote daemon\.\s+HNP daemon\s*: \S+ on node \S+\s+Remote daemon\s*: \[\[\d+,\d+\],(\d+)\] on node (\S+))");
  // MPI_Abort is mpirun's to tell; then the rank monitor's line (always there when a
  // rank failed by itself); then mpirun's own reports, which it sometimes drops. A lost
  // host comes first: the ranks that then fail on the other hosts are its consequence.
  if (std::regex_search(text, m, lost_re)) {
    f.daemon = to_int(m[1]);
    f.node = m[2];
    f.reason = "mpirun lost its connection to host " + f.node + " (a link down or the host gone)";
  } else if (std::regex_search(text, m, abort_re)) {
    f.rank = to_int(m[1]);
    f.abort_code = to_int(m[3]);
    f.reason = "rank " + std::to_string(f.rank) + " called MPI_Abort on " + std::string(m[2]) + " with error code " +
               std::to_string(f.abort_code);
  } else if (std::regex_search(text, m, monitor_re)) {
    f.rank = to_int(m[1]);
    f.node = m[2];
    if (m[3].matched) {
      f.exit_code = to_int(m[3]);
      f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node + ") exited with status " + std::string(m[3]);
    } else {
      f.signal = signal_number(m[4]);
      f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node + ") was killed by " + std::string(m[4]) + " (" +
                 std::string(m[5]) + ")";
    }
  } else if (std::regex_search(text, m, signal_re)) {
    f.rank = to_int(m[1]);
    f.node = m[2];
    f.signal = to_int(m[3]);
    std::string what = m[4].matched ? std::string(m[4]) : std::string(strsignal(f.signal));
    f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node + ") was killed by " + signal_name(f.signal) + " (" +
               what + ")";
  } else if (std::regex_search(text, m, exit_re)) {
    f.rank = to_int(m[1]);
    f.exit_code = to_int(m[2]);
    f.reason = "rank " + std::to_string(f.rank) + " exited with status " + std::to_string(f.exit_code);
  } else if (std::regex_search(text, m, improper_re)) {
    f.rank = to_int(m[1]);
    f.node = m[2];
    f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node +
               ") exited without finalizing MPI while the other ranks went on";
  } else {
    return std::nullopt;
  }
  return f;
}

}  // namespace cohortrun
