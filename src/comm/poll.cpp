#include "drtrain/comm/poll.hpp"

#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>

#include "drtrain/comm/liveness.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {
constexpr int kSpinPolls = 64;  // a poll costs well under a microsecond on one node

std::mutex g_survey_mutex;
std::function<std::string()> g_survey;

// The end of a message of a wait that gave up: the survey's culprit, or the generic one.
std::string culprit_clause() {
  const std::string found = hang_survey();
  return found.empty() ? std::string("a peer rank is dead, stopped or stuck") : found;
}
}  // namespace

void set_hang_survey(std::function<std::string()> survey) {
  std::lock_guard<std::mutex> lock(g_survey_mutex);
  g_survey = std::move(survey);
}

std::string hang_survey() {
  std::function<std::string()> survey;
  {
    std::lock_guard<std::mutex> lock(g_survey_mutex);
    survey = g_survey;
  }
  return survey ? survey() : std::string();
}

PollWaiter::PollWaiter(double timeout_s, int max_nap_us)
    : start_(now_seconds()), since_(start_), timeout_s_(timeout_s), max_nap_us_(std::max(1, max_nap_us)) {}

bool PollWaiter::pause() {
  Watchdog::beat("waiting for a peer");
  progress();  // a waiting rank may be the target its peers' RMA needs (comm/progress.hpp)
  if (++polls_ <= kSpinPolls) return true;
  if ((polls_ & 15) == 0) {
    // A peer busy with long work of its own (a large checkpoint, an evaluation, training on while
    // this rank waits for the end) is not a hang: a change of the peers' progress counters
    // between the middle of the period and its end renews the wait (comm/liveness.hpp).
    const double in_period = now_seconds() - since_;
    if (!marked_ && in_period > 0.5 * timeout_s_) {
      Liveness::peers_progressed();  // the reference the end of the period compares with
      marked_ = true;
    } else if (in_period > timeout_s_) {
      if (!marked_ || !Liveness::peers_progressed()) return false;
      since_ = now_seconds();
      marked_ = false;
    }
  }
  timespec nap{0, static_cast<long>(nap_us_) * 1000L};
  nanosleep(&nap, nullptr);
  nap_us_ = std::min(nap_us_ * 2, max_nap_us_);
  return true;
}

double PollWaiter::waited_seconds() const { return now_seconds() - start_; }

void wait_request(MPI_Request& request, double timeout_s, int max_nap_us, const std::function<std::string()>& what) {
  PollWaiter waiter(timeout_s, max_nap_us);
  for (;;) {
    int done = 0;
    DRT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (!waiter.pause())
      throw HangError(str(rank_tag(), ": waited ", static_cast<int>(waiter.waited_seconds()), " s for ", what(), "; ",
                          culprit_clause(), " (raise --hang-timeout if it is only slow)"));
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
  DRT_MPI_CHECK(
      MPI_Igather(send, bytes_per_rank, MPI_BYTE, receive, bytes_per_rank, MPI_BYTE, root, comm.get(), &request));
  wait_request(request, timeout_s, max_nap_us, [&] { return what; });
}

namespace {
double g_patience_s = 0.0;  // 0: block
int g_patience_nap_us = 1000;

void wait_patiently(MPI_Request& request, const char* what) {
  if (g_patience_s <= 0.0) {
    DRT_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
    return;
  }
  wait_request(request, g_patience_s, g_patience_nap_us, [what] { return std::string(what); });
}
}  // namespace

void set_patience(double timeout_s, int max_nap_us) {
  g_patience_s = timeout_s;
  g_patience_nap_us = max_nap_us;
}

void patient_allreduce(const Comm& comm, void* data, int count, MPI_Datatype type, MPI_Op op, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm.get(), &request));
  wait_patiently(request, what);
}

void patient_bcast(const Comm& comm, void* data, int count, MPI_Datatype type, int root, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Ibcast(data, count, type, root, comm.get(), &request));
  wait_patiently(request, what);
}

void patient_barrier(const Comm& comm, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Ibarrier(comm.get(), &request));
  wait_patiently(request, what);
}

namespace {

// Calls post(address, count) for each piece of at most `piece` bytes of [data, data + bytes).
template <typename Post>
void for_each_piece(char* data, std::size_t bytes, std::size_t piece, const Post& post) {
  for (std::size_t at = 0; at < bytes; at += piece) post(data + at, static_cast<int>(std::min(piece, bytes - at)));
}

// After a timeout on the root: withdraws the receives still posted (MPI_Cancel). A receive that
// had already begun to match may complete anyway, into its buffer, so when the receives are not
// all finished within a second the buffers are kept for the rest of the process (the job is
// about to abort) instead of being freed under MPI's feet.
void withdraw_receives(std::vector<MPI_Request>& requests, std::vector<std::string>& parts) {
  for (MPI_Request& r : requests)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  const double give_up = now_seconds() + 1.0;
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (now_seconds() > give_up) break;
    timespec nap{0, 1000000L};
    nanosleep(&nap, nullptr);
  }
  for (MPI_Request& r : requests)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  static std::vector<std::vector<std::string>> kept;  // moving the vector leaves each string in place
  kept.push_back(std::move(parts));
}

}  // namespace

std::vector<std::string> gather_bytes(const Comm& comm, std::string send, int root, double timeout_s, int max_nap_us,
                                      const std::string& what, std::size_t piece_bytes) {
  if (piece_bytes < 1 || piece_bytes > static_cast<std::size_t>(INT_MAX))
    throw Error(str(rank_tag(), ": gather_bytes: pieces of ", piece_bytes, " bytes do not fit one MPI message"));
  const bool is_root = comm.rank() == root;
  const std::int64_t length = static_cast<std::int64_t>(send.size());
  std::vector<std::int64_t> lengths(is_root ? static_cast<std::size_t>(comm.size()) : 0);
  gather(comm, &length, sizeof length, lengths.data(), root, timeout_s, max_nap_us, what + " (their sizes)");
  std::vector<std::string> parts(lengths.size());
  std::vector<MPI_Request> requests;
  std::vector<int> peer;  // the rank at the other end of each request, ascending
  const auto post = [&](int rank) {
    requests.push_back(MPI_REQUEST_NULL);
    peer.push_back(rank);
    return &requests.back();
  };
  if (is_root) {
    parts[static_cast<std::size_t>(root)] = std::move(send);
    for (int r = 0; r < comm.size(); ++r) {
      if (r == root) continue;
      std::string& part = parts[static_cast<std::size_t>(r)];
      part.resize(static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
      for_each_piece(part.data(), part.size(), piece_bytes, [&](char* at, int count) {
        DRT_MPI_CHECK(MPI_Irecv(at, count, MPI_CHAR, r, kGatherBytesTag, comm.get(), post(r)));
      });
    }
  } else {
    for_each_piece(send.data(), send.size(), piece_bytes, [&](char* at, int count) {
      DRT_MPI_CHECK(MPI_Isend(at, count, MPI_CHAR, root, kGatherBytesTag, comm.get(), post(root)));
    });
  }
  DRT_ASSERT(requests.size() <= static_cast<std::size_t>(INT_MAX), "too many pieces; pass larger ones");
  std::vector<int> indices(requests.size());
  std::size_t remaining = requests.size();
  PollWaiter waiter(timeout_s, max_nap_us);
  while (remaining > 0) {
    int completed = 0;
    DRT_MPI_CHECK(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, indices.data(),
                               MPI_STATUSES_IGNORE));
    if (completed == MPI_UNDEFINED) break;
    if (completed > 0) {  // progress: the timeout counts from here
      remaining -= static_cast<std::size_t>(completed);
      waiter = PollWaiter(timeout_s, max_nap_us);
      continue;
    }
    if (waiter.pause()) continue;
    std::string missing;
    int count = 0, last = -1;
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (requests[i] != MPI_REQUEST_NULL && peer[i] != last) {
        missing += str(count++ ? ", " : "", peer[i]);
        last = peer[i];
      }
    const int waited = static_cast<int>(waiter.waited_seconds());
    if (is_root) withdraw_receives(requests, parts);
    throw HangError(str(rank_tag(), ": waited ", waited, " s for ", what, is_root ? " from rank" : " to reach rank",
                        count > 1 ? "s " : " ", missing, "; ", culprit_clause(),
                        " (raise --hang-timeout if it is only slow)"));
  }
  return parts;
}

}  // namespace drt::comm
