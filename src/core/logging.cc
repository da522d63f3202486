#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace cohort {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_rank{-1};
std::mutex g_write_mutex;
const char* const kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_rank(int rank) { g_rank = rank; }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

LogLevel parse_log_level(std::string_view text) {
  for (int i = 0; i < 4; ++i)
    if (text == kNames[i]) return static_cast<LogLevel>(i);
  if (text == "warning") return LogLevel::kWarn;
  fail(Code::kInvalidArgument, "invalid log level '", text, "': expected error, warn, info or debug");
}

void log_message(LogLevel level, std::string_view message) {
  std::string line = "[cohort";
  int rank = g_rank.load();
  if (rank >= 0) line += " " + std::to_string(rank);
  line += cat(" ", kNames[static_cast<int>(level)], "] ", message, "\n");
  std::lock_guard lock(g_write_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace cohort
