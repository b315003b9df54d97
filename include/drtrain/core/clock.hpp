// Monotonic wall-clock time in seconds, for phase timings and timeouts.
#pragma once

#include <chrono>

namespace drt {

inline double now_seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace drt
