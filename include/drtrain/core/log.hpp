// Rank-tagged logging to stderr. Lines are written with one call so ranks do not interleave
// within a line.
#pragma once

#include <string>

#include "drtrain/core/strings.hpp"

namespace drt {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Messages below this level are dropped (default kInfo; DRT_LOG_LEVEL=debug lowers it).
void set_log_level(LogLevel level);
LogLevel log_level();

void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, str(args...));
}
template <typename... Args>
void log_warning(const Args&... args) {
  log_line(LogLevel::kWarning, str(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, str(args...));
}

}  // namespace drt
