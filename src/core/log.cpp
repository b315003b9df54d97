#include "drtrain/core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "drtrain/core/error.hpp"

namespace drt {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("DRT_LOG_LEVEL");
  if (env && std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (env && std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  return LogLevel::kInfo;
}

LogLevel g_level = initial_level();

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log_line(LogLevel level, const std::string& message) {
  if (level < g_level) return;
  const std::string line = str("[drtrain ", rank_tag(), " ", level_name(level), "] ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace drt
