// Liveness: a progress counter per rank that every rank can read, so that a rank waiting for its
// peers gives up (--hang-timeout) only when none of them has made progress for that long, not
// when one of them is busy with long work of its own: a PS writing a large checkpoint while
// training waits, the chief of a relaxed --sync-mode evaluating the whole test set, the other
// workers still training while a fast worker has finished and waits for the end of the run.
//   note_progress()      a rank doing real work (a training step, a PS apply, a piece of a
//                        checkpoint or of an evaluation) adds 1 to its own counter, at most
//                        once per interval: one MPI_Accumulate to itself and a flush
//   peers_progressed()   PollWaiter asks at its deadline: one read of every other rank's
//                        counter; a change since the last read renews the wait
// The reads are request-based (MPI_Rget_accumulate with MPI_NO_OP: atomic against the owner's
// accumulates) and waited on for a bounded time, so a stopped or unreachable peer cannot block
// the reader: its counter just does not change (a read left pending is tested again next time).
// One instance per process at a time (run_training makes it for the run); without one both
// calls do nothing and waits time out as before. Call only from the thread that owns MPI.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/comm/window.hpp"

namespace drt::comm {

class Liveness {
 public:
  // Collective over `world`. `interval_s`: the least time between two bumps of this rank's counter.
  Liveness(const Comm& world, double interval_s);
  ~Liveness();  // collective (the window is freed); uninstalls
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  static void note_progress();
  // True when another rank's counter changed since the previous call in this process (the first
  // call compares with zero: every counter starts there).
  static bool peers_progressed();
  // The end of a run: this rank says it has done its part (a second word of its own); a rank
  // that gave up waiting for the others reads who has not (ranks of the world communicator,
  // ascending; a rank whose word could not be read counts as not finished). Without a Liveness:
  // nothing, and an empty list.
  static void note_finished();
  static std::vector<int> unfinished();

 private:
  void bump();
  bool read_peers();
  // Reads word `word` (0: the counter, 1: finished) of every other rank into reading_, waiting at
  // most kReadPatience; done[r] tells whose read completed.
  std::vector<bool> read_all(int word);

  const Comm& world_;
  Window window_;
  PassiveEpoch* epoch_ = nullptr;
  double interval_s_;
  double last_bump_ = -1.0;
  std::int64_t one_ = 1, ignored_ = 0;
  std::vector<std::int64_t> seen_, reading_;  // per rank: the last counter read, the buffer of a read
  std::vector<int> reading_word_;             // per rank: which word the read in reading_ is of
  std::vector<MPI_Request> requests_;         // per rank: a read still pending (MPI_REQUEST_NULL: none)
};

}  // namespace drt::comm
