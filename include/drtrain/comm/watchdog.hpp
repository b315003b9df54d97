// Watchdog: the last line of the hang watchdog. Cooperative waits (PollWaiter) give up after
// --hang-timeout with a message naming the peer; but an MPI call can itself block for ever on a
// dead or stopped peer (seen with MPICH/UCX: MPI_Win_flush towards a stopped target never
// returns), and then nothing on that thread can time out. While armed, a thread checks that the
// main thread beats (every poll, step and phase calls beat()); after `limit` seconds without a
// beat it prints the rank, the last phase and the likely cause, and ends the process with
// status 3, so that the launcher ends the job. Process-wide; thread-safe.
#pragma once

namespace drt::comm {

class Watchdog {
 public:
  // Starts watching (the thread starts on the first call). `limit_s` <= 0 disarms.
  static void arm(double limit_s);
  static void disarm();
  // Progress. `phase` must be a string literal (it is read from the watchdog thread); `peer` is
  // the world rank the next MPI call waits on, when there is one (named if the watchdog fires).
  static void beat(const char* phase, int peer = -1) noexcept;
};

}  // namespace drt::comm
