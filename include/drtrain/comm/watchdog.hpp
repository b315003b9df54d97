// Watchdog: the last line of the hang watchdog. Cooperative waits (PollWaiter) give up after
// --hang-timeout with a message naming the peer; but an MPI call can itself block for ever on a
// dead or stopped peer (seen with MPICH/UCX: MPI_Win_flush towards a stopped target never
// returns), and then nothing on that thread can time out. While armed, a thread checks that the
// main thread beats (every poll, step and phase calls beat()); after `limit` seconds without a
// beat it prints the rank, the last phase, the rank the call waits on and the likely cause, and
// ends the job: MPI_Abort with status 3 (from its own thread; MPICH's Hydra, told only that a rank
// exited, would wait for ever for a node that is cut off), and _Exit(3) should that not return
// within 10 s. Its message is the vaguer one (with MPICH/UCX a flush towards one rank may wait on
// another), so its limit leaves the cooperative waits, which survey the peers before they name
// one, time to go first (train/trainer.cpp). Process-wide; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace drt::comm {

class Watchdog {
 public:
  // Starts watching (the thread starts on the first call). `limit_s` <= 0 disarms.
  static void arm(double limit_s);
  static void disarm();
  // Progress. `phase` must be a string literal (it is read from the watchdog thread); `peer` is
  // the world rank the next MPI call waits on, when there is one (named if the watchdog fires).
  static void beat(const char* phase, int peer = -1) noexcept;
  // How the message names world rank r: places[r] (Topology::rank_place, e.g. "world rank 2 on
  // node2"); without them, "world rank r". Call before arm().
  static void name_ranks(std::vector<std::string> places);
  // That name of world rank `rank` (also for other messages about a peer).
  static std::string place_of(int rank);
};

}  // namespace drt::comm
