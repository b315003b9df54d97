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
      window_(Window::allocate(2 * sizeof(std::int64_t), world)),
      interval_s_(interval_s),
      seen_(static_cast<std::size_t>(world.size()), 0),
      reading_(static_cast<std::size_t>(world.size()), 0),
      reading_word_(static_cast<std::size_t>(world.size()), 0),
      requests_(static_cast<std::size_t>(world.size()), MPI_REQUEST_NULL) {
  // MPI_Win_sync belongs inside a passive-target epoch (osc/ucx refuses it outside one).
  epoch_ = new PassiveEpoch(window_);
  static_cast<std::int64_t*>(window_.base())[0] = 0;  // the progress counter
  static_cast<std::int64_t*>(window_.base())[1] = 0;  // finished
  DRT_MPI_CHECK(MPI_Win_sync(window_.get()));
  DRT_MPI_CHECK(MPI_Barrier(world.get()));  // every counter is zero before anyone reads or bumps one
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

std::vector<bool> Liveness::read_all(int word) {
  const int me = world_.rank();
  const auto disp = static_cast<MPI_Aint>(word * sizeof(std::int64_t));
  for (int r = 0; r < world_.size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r == me || requests_[i] != MPI_REQUEST_NULL) continue;  // a read still pending is not repeated
    DRT_MPI_CHECK(MPI_Rget_accumulate(&ignored_, 0, MPI_INT64_T, &reading_[i], 1, MPI_INT64_T, r, disp, 1, MPI_INT64_T,
                                      MPI_NO_OP, window_.get(), &requests_[i]));
    reading_word_[i] = word;
  }
  std::vector<bool> done(static_cast<std::size_t>(world_.size()), false);
  const double start = now_seconds();
  for (;;) {
    bool pending = false;
    for (int r = 0; r < world_.size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      int complete = 0;
      DRT_MPI_CHECK(MPI_Test(&requests_[i], &complete, MPI_STATUS_IGNORE));
      if (!complete) pending = true;
      else done[i] = reading_word_[i] == word;  // a late read of the other word says nothing of this one
    }
    if (!pending || now_seconds() - start > kReadPatience) return done;
    progress();
    timespec nap{0, 1000000L};  // 1 ms
    nanosleep(&nap, nullptr);
  }
}

bool Liveness::read_peers() {
  const std::vector<bool> done = read_all(0);
  bool changed = false;
  for (std::size_t i = 0; i < done.size(); ++i) {
    if (!done[i]) continue;
    if (reading_[i] != seen_[i]) changed = true;
    seen_[i] = reading_[i];
  }
  return changed;
}

void Liveness::note_finished() {
  if (!g_instance) return;
  const int me = g_instance->world_.rank();
  DRT_MPI_CHECK(MPI_Accumulate(&g_instance->one_, 1, MPI_INT64_T, me, sizeof(std::int64_t), 1, MPI_INT64_T, MPI_REPLACE,
                               g_instance->window_.get()));
  DRT_MPI_CHECK(MPI_Win_flush(me, g_instance->window_.get()));
}

std::vector<int> Liveness::unfinished() {
  std::vector<int> out;
  if (!g_instance) return out;
  const std::vector<bool> done = g_instance->read_all(1);
  for (std::size_t i = 0; i < done.size(); ++i)
    if (static_cast<int>(i) != g_instance->world_.rank() && (!done[i] || g_instance->reading_[i] == 0))
      out.push_back(static_cast<int>(i));
  return out;
}

}  // namespace drt::comm
