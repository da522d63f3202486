#include "failure.h"

#include <csignal>
#include <cstring>
#include <regex>

namespace cohortrun {

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal);
  }
}

std::optional<RankFailure> find_rank_failure(std::string_view text_view) {
  // mpirun wraps its messages at fixed widths: match across line breaks.
  std::string text(text_view);
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  std::smatch m;
  RankFailure f;
  static const std::regex signal_re(
      R"(process rank (\d+) with PID \d+ on\s+node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
  static const std::regex exit_re(R"(The first process to do so was:\s+Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(-?\d+))");
  static const std::regex abort_re(R"(MPI_ABORT was invoked on rank (\d+) in communicator (\S+)\s+with errorcode (-?\d+))");
  static const std::regex improper_re(R"(process rank (\d+) with PID \d+ on\s+node (\S+) exiting improperly)");
  if (std::regex_search(text, m, signal_re)) {
    f.rank = std::stoi(m[1]);
    f.node = m[2];
    f.signal = std::stoi(m[3]);
    std::string what = m[4].matched ? std::string(m[4]) : std::string(strsignal(f.signal));
    f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node + ") was killed by " + signal_name(f.signal) +
               " (" + what + ")";
  } else if (std::regex_search(text, m, abort_re)) {
    f.rank = std::stoi(m[1]);
    f.abort_code = std::stoi(m[3]);
    f.reason = "rank " + std::to_string(f.rank) + " called MPI_Abort on " + std::string(m[2]) + " with error code " +
               std::to_string(f.abort_code);
  } else if (std::regex_search(text, m, exit_re)) {
    f.rank = std::stoi(m[1]);
    f.exit_code = std::stoi(m[2]);
    f.reason = "rank " + std::to_string(f.rank) + " exited with status " + std::to_string(f.exit_code);
  } else if (std::regex_search(text, m, improper_re)) {
    f.rank = std::stoi(m[1]);
    f.node = m[2];
    f.reason = "rank " + std::to_string(f.rank) + " (on " + f.node +
               ") exited without finalizing MPI while the other ranks went on";
  } else {
    return std::nullopt;
  }
  return f;
}

}  // namespace cohortrun
