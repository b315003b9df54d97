#include "drtrain/comm/poll.hpp"

#include <time.h>

#include <algorithm>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {
constexpr int kSpinPolls = 64;  // a poll costs well under a microsecond on one node
}

PollWaiter::PollWaiter(double timeout_s, int max_nap_us)
    : start_(now_seconds()), timeout_s_(timeout_s), max_nap_us_(std::max(1, max_nap_us)) {}

bool PollWaiter::pause() {
  Watchdog::beat("waiting for a peer");
  if (++polls_ <= kSpinPolls) return true;
  if ((polls_ & 15) == 0 && waited_seconds() > timeout_s_) return false;
  timespec nap{0, static_cast<long>(nap_us_) * 1000L};
  nanosleep(&nap, nullptr);
  nap_us_ = std::min(nap_us_ * 2, max_nap_us_);
  return true;
}

double PollWaiter::waited_seconds() const { return now_seconds() - start_; }

void wait_request(MPI_Request& request, double timeout_s, int max_nap_us,
                  const std::function<std::string()>& what) {
  PollWaiter waiter(timeout_s, max_nap_us);
  for (;;) {
    int done = 0;
    DRT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (!waiter.pause())
      throw HangError(str(rank_tag(), ": waited ", static_cast<int>(waiter.waited_seconds()),
                          " s for ", what(),
                          "; a peer rank is dead, stopped or stuck (raise --hang-timeout if it "
                          "is only slow)"));
  }
}

void sleepy_barrier(const Comm& comm, double timeout_s, int max_nap_us, const std::string& what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Ibarrier(comm.get(), &request));
  wait_request(request, timeout_s, max_nap_us, [&] { return what; });
}

void allreduce_in_place(const Comm& comm, void* data, int count, MPI_Datatype type, MPI_Op op, double timeout_s,
                        int max_nap_us, const std::string& what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm.get(), &request));
  wait_request(request, timeout_s, max_nap_us, [&] { return what + " (an all-reduce over every rank of it)"; });
}

void gather(const Comm& comm, const void* send, int bytes_per_rank, void* receive, int root, double timeout_s,
            int max_nap_us, const std::string& what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Igather(send, bytes_per_rank, MPI_BYTE, receive, bytes_per_rank, MPI_BYTE, root, comm.get(),
                            &request));
  wait_request(request, timeout_s, max_nap_us, [&] { return what; });
}

}  // namespace drt::comm
