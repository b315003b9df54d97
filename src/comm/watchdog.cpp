#include "drtrain/comm/watchdog.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"

namespace drt::comm {
namespace {

std::atomic<double> g_limit{0.0};  // seconds without a beat before firing; 0: disarmed
std::atomic<double> g_last{0.0};   // now_seconds() of the last beat
std::atomic<const char*> g_phase{"start-up"};
std::atomic<int> g_peer{-1};
std::once_flag g_thread_started;
std::mutex g_places_mutex;
std::vector<std::string> g_places;  // name_ranks()

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double limit = g_limit.load();
    if (limit <= 0.0) continue;
    const double quiet = now_seconds() - g_last.load();
    if (quiet <= limit) continue;
    const int peer = g_peer.load();
    const std::string towards = peer >= 0 ? "; the call waits on " + Watchdog::place_of(peer) : std::string();
    std::fprintf(stderr,
                 "drtrain: fatal error on %s: no progress for %.0f s (last phase: %s%s); a call into MPI has not "
                 "returned, so a peer rank is probably dead or stopped, or its node or the network to it is down "
                 "(the other ranks' messages may name it). Ending this process so that the launcher ends the job "
                 "(raise --hang-timeout if the job is only slow).\n",
                 rank_tag().c_str(), quiet, g_phase.load(), towards.c_str());
    std::fflush(stderr);
    // End the job as run_mpi_main does after a failure, with MPI_Abort: told only that a rank
    // exited, MPICH's Hydra waits for ever for the proxy of a node that is cut off. This thread
    // calls MPI while the main thread sits in an MPI call, which MPI_THREAD_SERIALIZED does not
    // allow (both libraries' abort paths take no lock then); should the abort not end the process,
    // another thread does, 10 s on.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::_Exit(3);
    }).detach();
    int initialised = 0, finalized = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalized);
    if (initialised && !finalized) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the launcher forward the message
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
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

std::string Watchdog::place_of(int rank) {
  std::lock_guard<std::mutex> lock(g_places_mutex);
  if (rank >= 0 && static_cast<std::size_t>(rank) < g_places.size()) return g_places[static_cast<std::size_t>(rank)];
  return "world rank " + std::to_string(rank);
}

void Watchdog::name_ranks(std::vector<std::string> places) {
  std::lock_guard<std::mutex> lock(g_places_mutex);
  g_places = std::move(places);
}

void Watchdog::beat(const char* phase, int peer) noexcept {
  g_phase.store(phase, std::memory_order_relaxed);
  g_peer.store(peer, std::memory_order_relaxed);
  g_last.store(now_seconds(), std::memory_order_relaxed);
}

}  // namespace drt::comm
