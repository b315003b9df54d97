#include "stop_vote.hpp"

#include <exception>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {

StopVote::StopVote(const comm::Comm& world, double timeout_s, int max_nap_us)
    : comm_(world.split(0, world.rank())), timeout_s_(timeout_s), max_nap_us_(max_nap_us) {}

StopVote::~StopVote() {
  if (std::uncaught_exceptions() > 0) {  // a failure: the job is about to abort; just let go
    for (Pending& p : pending_) comm::unwatch_request(&p.request);
    return;
  }
  try {
    finish();
  } catch (const std::exception&) {
    for (Pending& p : pending_) comm::unwatch_request(&p.request);
  }
}

void StopVote::cast(std::int64_t step) {
  DRT_ASSERT(pending_.empty() || pending_.back().step + 1 == step, "stop votes must be cast in step order");
  // Votes already complete leave the list now: the PS read no verdict before finish(), and
  // without this their list, and comm::progress()'s watch list that every poll walks, would
  // grow by one entry per step for the whole run.
  while (!pending_.empty()) {
    int done = 0;
    DRT_MPI_CHECK(MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE));
    if (!done) break;
    complete_front();
  }
  pending_.push_back({step, stop_signal_received(), MPI_REQUEST_NULL});
  Pending& p = pending_.back();
  DRT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &p.value, 1, MPI_INT, MPI_MAX, comm_.get(), &p.request));
  comm::watch_request(&p.request);
}

void StopVote::complete_front() {
  Pending& p = pending_.front();
  comm::wait_request(p.request, timeout_s_, max_nap_us_,
                     [&] { return str("every rank's vote on stopping after step ", p.step + 1); });
  comm::unwatch_request(&p.request);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    verdicts_[p.step] = p.value;
    // Keep the last few: a reader asks for steps at most kLag behind the newest vote.
    while (verdicts_.size() > std::size_t{4} * kLag) verdicts_.erase(verdicts_.begin());
  }
  largest_ = std::max(largest_, p.value);
  pending_.pop_front();
}

int StopVote::verdict(std::int64_t step) {
  if (const auto known = known_verdict(step)) return *known;
  DRT_ASSERT(!pending_.empty() && pending_.front().step <= step && step <= pending_.back().step,
             "a stop verdict for a step without a pending vote");
  while (pending_.front().step <= step) complete_front();
  return *known_verdict(step);
}

std::optional<int> StopVote::known_verdict(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = verdicts_.find(step);
  if (it == verdicts_.end()) return std::nullopt;
  return it->second;
}

int StopVote::finish() {
  while (!pending_.empty()) complete_front();
  return largest_;
}

}  // namespace drt::train
