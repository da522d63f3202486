// Logging to stderr with a rank prefix. The level and the rank tag are process-wide
// (like MPI itself): the runtime sets them when it is created.
#pragma once

#include <string_view>

#include "core/status.h"

namespace cohort {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
LogLevel parse_log_level(std::string_view text);  // "error|warn|info|debug"
void set_log_rank(int rank);                      // -1: no rank in the prefix
bool log_enabled(LogLevel level);
void log_message(LogLevel level, std::string_view message);

}  // namespace cohort

#define COHORT_LOG(level, ...)                                                                  \
  do {                                                                                          \
    if (::cohort::log_enabled(level)) ::cohort::log_message(level, ::cohort::cat(__VA_ARGS__)); \
  } while (0)
#define COHORT_LOG_ERROR(...) COHORT_LOG(::cohort::LogLevel::kError, __VA_ARGS__)
#define COHORT_LOG_WARN(...) COHORT_LOG(::cohort::LogLevel::kWarn, __VA_ARGS__)
#define COHORT_LOG_INFO(...) COHORT_LOG(::cohort::LogLevel::kInfo, __VA_ARGS__)
#define COHORT_LOG_DEBUG(...) COHORT_LOG(::cohort::LogLevel::kDebug, __VA_ARGS__)
