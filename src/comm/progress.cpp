#include "drtrain/comm/progress.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"

namespace drt::comm {
namespace {

std::atomic<std::size_t> g_calls{0};
std::mutex g_watched_mutex;  // MPI has one owner at a time; the lock only guards the list
std::vector<MPI_Request*> g_watched;

// A duplicate of MPI_COMM_SELF that nobody sends on: probing it can never steal a message meant
// for someone else, yet it enters the progress engine. Made on first use (local: a one-rank
// communicator), freed by MPI_Finalize.
MPI_Comm probe_comm() {
  static MPI_Comm comm = [] {
    MPI_Comm dup = MPI_COMM_NULL;
    DRT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &dup));
    DRT_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    return dup;
  }();
  return comm;
}

}  // namespace

void progress() {
  int flag = 0;
  DRT_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm(), &flag, MPI_STATUS_IGNORE));
  {
    std::lock_guard<std::mutex> lock(g_watched_mutex);
    for (MPI_Request* r : g_watched)
      if (*r != MPI_REQUEST_NULL) DRT_MPI_CHECK(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
  }
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

void watch_request(MPI_Request* request) {
  std::lock_guard<std::mutex> lock(g_watched_mutex);
  g_watched.push_back(request);
}

void unwatch_request(MPI_Request* request) {
  std::lock_guard<std::mutex> lock(g_watched_mutex);
  g_watched.erase(std::remove(g_watched.begin(), g_watched.end(), request), g_watched.end());
}

std::size_t progress_calls() { return g_calls.load(std::memory_order_relaxed); }

}  // namespace drt::comm
