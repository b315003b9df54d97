// Target-side progress. Some RMA paths complete a peer's one-sided operation only while the
// target rank is inside the MPI library: Open MPI's osc/pt2pt (RMA over point-to-point
// messages), osc/ucx over TCP (UCX emulates remote memory access with active messages and
// atomics with a lock word), MPICH's ch4:ucx without hardware RDMA. A PS that only computes,
// sleeps, or touches its own window memory would stall every worker's MPI_Win_flush towards it
// (this is how drtrain hung at step 0 with osc/ucx across nodes). progress() gives the library
// a turn: MPI_Iprobe on a private communicator runs the progress engine (Open MPI's
// opal_progress, which drives osc/ucx's and osc/pt2pt's callbacks; MPICH's MPID_Progress_test)
// and never matches a message, since nothing is ever sent on that communicator.
//
// Who calls it: PollWaiter::pause() (every wait), the PS between apply chunks
// (ProgressPacer), and the checkpoint writer between HDF5 writes. It is cheap (well under a
// microsecond when there is nothing to do), and harmless on paths that need no help (osc/sm,
// osc/rdma, osc/ucx over RDMA hardware).
#pragma once

#include <mpi.h>

#include <cstddef>

namespace drt::comm {

// Gives the MPI library a turn to progress incoming one-sided operations. Call only from the
// thread that owns MPI, after MPI_Init.
void progress();

// Calls progress() every `every` units of work (bytes applied, bytes written), so that a long
// local computation still lets peers' RMA through at a bounded interval.
class ProgressPacer {
 public:
  explicit ProgressPacer(std::size_t every) : every_(every) {}
  void advance(std::size_t work) {
    done_ += work;
    if (done_ >= every_) {
      done_ = 0;
      progress();
    }
  }

 private:
  std::size_t every_;
  std::size_t done_ = 0;
};

// Nonblocking collectives that must move while their rank waits for something else: MPICH
// advances a collective's schedule only while one of its requests is tested, so a PS polling for
// pushes would hold up the peers waiting on that collective. progress() MPI_Tests every watched
// request. One that completes there becomes MPI_REQUEST_NULL, which the owner's own MPI_Test or
// MPI_Wait sees as complete (the result is in its buffer). The owner unwatches the request
// before the variable goes away. Call from the thread that owns MPI.
void watch_request(MPI_Request* request);
void unwatch_request(MPI_Request* request);

// Times progress() was called in this process (tests check that a path calls it).
std::size_t progress_calls();

}  // namespace drt::comm
