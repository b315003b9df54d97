#include "drtrain/comm/liveness.hpp"

#include <time.h>

#include <exception>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"

namespace drt::comm {
namespace {

Liveness* g_instance = nullptr;
// How long a read of the peers' counters may take before the reader goes on without the ones
// still pending (a stopped peer on a path whose RMA needs the target: osc/pt2pt, osc/ucx over TCP).
constexpr double kReadPatience = 0.5;

}  // namespace

Liveness::Liveness(const Comm& world, double interval_s)
    : world_(world),
      window_(Window::allocate(sizeof(std::int64_t), world)),
      interval_s_(interval_s),
      seen_(static_cast<std::size_t>(world.size()), 0),
      reading_(static_cast<std::size_t>(world.size()), 0),
      requests_(static_cast<std::size_t>(world.size()), MPI_REQUEST_NULL) {
  *static_cast<std::int64_t*>(window_.base()) = 0;
  DRT_MPI_CHECK(MPI_Win_sync(window_.get()));
  DRT_MPI_CHECK(MPI_Barrier(world.get()));  // every counter is zero before anyone reads or bumps one
  epoch_ = new PassiveEpoch(window_);
  DRT_ASSERT(g_instance == nullptr, "one Liveness at a time");
  g_instance = this;
}

Liveness::~Liveness() {
  g_instance = nullptr;
  // MPI_Win_unlock_all completes the reads still pending (every peer is alive on a normal end);
  // while an exception unwinds, neither the epoch nor the window is touched (the job aborts).
  delete epoch_;
  if (std::uncaught_exceptions() > 0) return;
  for (MPI_Request& r : requests_)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
}

void Liveness::note_progress() {
  if (g_instance) g_instance->bump();
}

bool Liveness::peers_progressed() { return g_instance && g_instance->read_peers(); }

void Liveness::bump() {
  const double now = now_seconds();
  if (last_bump_ >= 0.0 && now - last_bump_ < interval_s_) return;
  last_bump_ = now;
  const int me = world_.rank();
  DRT_MPI_CHECK(MPI_Accumulate(&one_, 1, MPI_INT64_T, me, 0, 1, MPI_INT64_T, MPI_SUM, window_.get()));
  DRT_MPI_CHECK(MPI_Win_flush(me, window_.get()));
}

bool Liveness::read_peers() {
  const int me = world_.rank();
  for (int r = 0; r < world_.size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == me || requests_[i] != MPI_REQUEST_NULL) continue;  // a read still pending is not repeated
    DRT_MPI_CHECK(MPI_Rget_accumulate(&ignored_, 0, MPI_INT64_T, &reading_[i], 1, MPI_INT64_T, r, 0, 1, MPI_INT64_T,
                                      MPI_NO_OP, window_.get(), &requests_[i]));
  }
  const double start = now_seconds();
  bool changed = false;
  for (;;) {
    bool pending = false;
    for (int r = 0; r < world_.size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      DRT_MPI_CHECK(MPI_Test(&requests_[i], &done, MPI_STATUS_IGNORE));
      if (!done) {
        pending = true;
        continue;
      }
      if (reading_[i] != seen_[i]) changed = true;
      seen_[i] = reading_[i];
    }
    if (!pending || now_seconds() - start > kReadPatience) return changed;
    progress();
    timespec nap{0, 1000000L};  // 1 ms
    nanosleep(&nap, nullptr);
  }
}

}  // namespace drt::comm
