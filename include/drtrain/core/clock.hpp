// Monotonic wall-clock time and process CPU time in seconds, for phase timings, timeouts and
// measuring how busy a rank is.
#pragma once

#include <time.h>

#include <chrono>

namespace drt {

inline double now_seconds() {
#if DRT_SMPI
  // smpicxx redirects clock_gettime to the simulated clock; std::chrono would read the host's
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
#else
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
#endif
}

// CPU time of the whole process (all threads) so far.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace drt
