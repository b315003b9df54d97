// Waiting without burning a core. A rank that waits for a peer (a PS for pushes, a worker for
// fresh parameters) polls; on an oversubscribed node a spinning poller steals the core that
// the peer needs. PollWaiter spins for the first few polls (short waits stay fast), then naps
// with exponentially growing sleeps capped at `max_nap_us`, and reports a timeout: once
// `timeout_s` has passed without progress of any peer (comm/liveness.hpp: a peer busy with long
// work of its own renews the wait; without a Liveness, after `timeout_s`).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"

namespace drt::comm {

class PollWaiter {
 public:
  PollWaiter(double timeout_s, int max_nap_us);
  // Call after each unsuccessful poll. Returns false once the timeout has passed with no peer
  // making progress meanwhile.
  bool pause();
  double waited_seconds() const;  // since the wait began (renewals included)

 private:
  double start_;
  double since_;         // the start of the current timeout period
  bool marked_ = false;  // the peers' progress was read in the middle of this period
  double timeout_s_;
  int max_nap_us_;
  int polls_ = 0;
  int nap_us_ = 1;
};

// The hang survey: whichever rank gives up waiting first may be waiting on a healthy peer that
// itself waits on one that cannot be reached (a worker whose push to the PS of a lost node never
// completes; a collective whose messages cross a cut link). A survey, when set, looks for such
// ranks and returns a clause naming them ("PS 1 (world rank 2 on node2) does not answer ..."), or
// "" when it finds none; every wait that gives up (wait_request, gather_bytes, the exchange's
// waits) puts it into its message. The PS exchange sets it for its lifetime (ps/passive_base.hpp:
// the PS whose control words cannot be read within a few seconds). May take that long; MPI; call it
// from the thread that calls MPI (at most one at a time: MPI_THREAD_SERIALIZED).
void set_hang_survey(std::function<std::string()> survey);
std::string hang_survey();

// Waits for a nonblocking MPI request with MPI_Test and naps. On timeout throws HangError whose
// message is "<rank>: waited N s for <what()>: ...", with the hang survey's findings.
void wait_request(MPI_Request& request, double timeout_s, int max_nap_us, const std::function<std::string()>& what);

// MPI_Ibarrier + wait_request: a barrier that does not spin.
void sleepy_barrier(const Comm& comm, double timeout_s, int max_nap_us, const std::string& what);

// Collectives that nap while they wait and give up after timeout_s with a HangError naming
// `what` (e.g. "the training statistics of step 500"): a stopped or dead peer ends the job
// instead of hanging it. In place (MPI_IN_PLACE) for the reduction.
void allreduce_in_place(const Comm& comm, void* data, int count, MPI_Datatype type, MPI_Op op, double timeout_s,
                        int max_nap_us, const std::string& what);
void gather(const Comm& comm, const void* send, int bytes_per_rank, void* receive, int root, double timeout_s,
            int max_nap_us, const std::string& what);

// Patience of the waits in code that has no configuration at hand (the checkpoint writer's
// collectives among the PS, which wait for each other's file writes): run_training sets the
// run's --hang-timeout; until then (tests, tools) these calls block like their MPI counterparts.
void set_patience(double timeout_s, int max_nap_us);
// MPI_Allreduce (in place), MPI_Bcast and MPI_Barrier that wait with naps and give up with a
// HangError naming `what` after the patience without progress of any peer (PollWaiter).
void patient_allreduce(const Comm& comm, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what);
void patient_bcast(const Comm& comm, void* data, int count, MPI_Datatype type, int root, const char* what);
void patient_barrier(const Comm& comm, const char* what);

// The largest piece gather_bytes() sends in one message by default. MPI counts are int, so one
// message carries at most 2^31 - 1 bytes; 1 GiB pieces stay well inside that.
constexpr std::size_t kMaxPieceBytes = std::size_t{1} << 30;

// Gathers every rank's `send` bytes, of any length (the total may exceed 2^31 bytes), to `root`.
// Returns, on the root, each rank's bytes in rank order; elsewhere an empty vector. The lengths
// travel as int64 (gather() above), the bytes as point-to-point messages of at most `piece_bytes`
// (1 .. 2^31 - 1) each, on tag kGatherBytesTag of `comm`. The waits nap; after timeout_s without
// progress a HangError names `what` and the ranks (of `comm`) whose bytes are missing, and the
// root first withdraws the receives it still has posted.
constexpr int kGatherBytesTag = 7302;
std::vector<std::string> gather_bytes(const Comm& comm, std::string send, int root, double timeout_s, int max_nap_us,
                                      const std::string& what, std::size_t piece_bytes = kMaxPieceBytes);

}  // namespace drt::comm
