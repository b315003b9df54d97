#include "drtrain/comm/watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"

namespace drt::comm {
namespace {

std::atomic<double> g_limit{0.0};  // seconds without a beat before firing; 0: disarmed
std::atomic<double> g_last{0.0};   // now_seconds() of the last beat
std::atomic<const char*> g_phase{"start-up"};
std::atomic<int> g_peer{-1};
std::once_flag g_thread_started;

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double limit = g_limit.load();
    if (limit <= 0.0) continue;
    const double quiet = now_seconds() - g_last.load();
    if (quiet <= limit) continue;
    const int peer = g_peer.load();
    char towards[64] = "";
    if (peer >= 0) std::snprintf(towards, sizeof towards, "; the call waits on world rank %d", peer);
    std::fprintf(stderr,
                 "drtrain: fatal error on %s: no progress for %.0f s (last phase: %s%s); a call into MPI has not "
                 "returned, so a peer rank is probably dead or stopped (the other ranks' messages may name it). "
                 "Ending this process so that the launcher ends the job (raise --hang-timeout if the job is only "
                 "slow).\n",
                 rank_tag().c_str(), quiet, g_phase.load(), towards);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace

void Watchdog::arm(double limit_s) {
  g_last.store(now_seconds());
  g_limit.store(limit_s > 0.0 ? limit_s : 0.0);
  if (limit_s > 0.0) std::call_once(g_thread_started, [] { std::thread(watch).detach(); });
}

void Watchdog::disarm() { g_limit.store(0.0); }

void Watchdog::beat(const char* phase, int peer) noexcept {
  g_phase.store(phase, std::memory_order_relaxed);
  g_peer.store(peer, std::memory_order_relaxed);
  g_last.store(now_seconds(), std::memory_order_relaxed);
}

}  // namespace drt::comm
