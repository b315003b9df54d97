// StopVote (internal): every rank agrees, at step boundaries, whether to stop for a stop signal
// (core/stop_signals.hpp) that reached any of them: a signal may reach one rank only (kill, a
// launcher that forwards it to some), yet every worker must leave the loop after the same step.
//
// After step s every rank casts a vote for s: a nonblocking all-reduce (MAX) of the stop signal
// it has received (0: none) on a duplicate of the world communicator. The votes travel while
// training goes on; a worker reads the verdict of step s before it starts step s + kLag, so the
// job ends after step s + kLag - 1, the same step on every worker. With kLag = 3 the verdict is
// always complete by then in both step kinds, and reading it costs nothing: in the sequential
// step, vote s was cast two steps earlier; with --overlap, where the exchange thread casts
// vote s once step s is pulled and reads the verdict of s - 1 then, step s + 3 starts after
// the exchange thread's push of step s + 2, which follows that read (worker_loop.cpp). The PS
// cast their votes after applying each step and only learn the outcome at the end (finish()).
// MPICH moves a nonblocking collective only while it is tested: each pending vote is on
// comm::progress()'s watch list, which every poll of every rank runs.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "drtrain/comm/comm.hpp"

namespace drt::train {

class StopVote {
 public:
  static constexpr int kLag = 3;

  // Collective over `world` (duplicates it).
  StopVote(const comm::Comm& world, double timeout_s, int max_nap_us);
  // Completes whatever is still pending (finish()); every rank casts the same votes.
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // This rank's vote for step `step` (every rank casts one per step, in step order). MPI.
  void cast(std::int64_t step);
  // The verdict on step `step` (cast already): the signal that stops the job, 0 to go on.
  // Waits for it if it is still travelling (HangError after the timeout). MPI.
  int verdict(std::int64_t step);
  // The verdict on `step` if a verdict() call has already received it; no MPI (any thread).
  std::optional<int> known_verdict(std::int64_t step) const;
  // Completes every pending vote; returns the largest signal any vote carried (0: none). MPI.
  int finish();

 private:
  struct Pending {
    std::int64_t step;
    int value;
    MPI_Request request;
  };
  void complete_front();

  comm::Comm comm_;
  double timeout_s_;
  int max_nap_us_;
  std::deque<Pending> pending_;  // cast, not yet completed; deque: elements never move
  mutable std::mutex mutex_;     // guards verdicts_ (read by the compute thread with --overlap)
  std::map<std::int64_t, int> verdicts_;
  int largest_ = 0;
};

}  // namespace drt::train
