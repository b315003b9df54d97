#include "control_channel.hpp"

#include <algorithm>
#include <memory>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::ps {
namespace {

// An MPI call on PS `rank`'s control words failed: most likely the rank or its node is lost (UCX
// reports an endpoint whose peer stopped answering as an error). Says so, naming where it runs.
[[noreturn]] void rethrow_towards(int rank, const Error& e) {
  throw Error(str(e.what(), " The call was on the control words of ", comm::Watchdog::place_of(rank),
                  ": unless that rank printed an error of its own, it is dead or stopped, or its node or the network "
                  "to it is down."));
}

}  // namespace

ControlChannel::ControlChannel(const ShardWindow& window) : window_(window), epoch_(window.control()) {}

void ControlChannel::update(int ps, const std::vector<Update>& updates) {
  comm::Watchdog::beat("writing a PS's control words", window_.target(ps));
  values_.resize(updates.size());
  const MPI_Win win = window_.control().get();
  try {
    for (std::size_t i = 0; i < updates.size(); ++i) {
      values_[i] = updates[i].value;
      DRT_MPI_CHECK(MPI_Accumulate(&values_[i], 1, MPI_INT64_T, window_.target(ps), updates[i].word, 1, MPI_INT64_T,
                                   updates[i].op, win));
    }
    DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
  } catch (const Error& e) {
    rethrow_towards(window_.target(ps), e);
  }
}

void ControlChannel::write(int ps, const std::vector<MPI_Aint>& words, std::int64_t value) {
  std::vector<Update> updates;
  updates.reserve(words.size());
  for (MPI_Aint word : words) updates.push_back({word, MPI_REPLACE, value});
  update(ps, updates);
}

void ControlChannel::write_run(int ps, MPI_Aint first, const std::vector<std::int64_t>& values) {
  std::vector<Update> updates;
  updates.reserve(values.size());
  for (std::size_t k = 0; k < values.size(); ++k)
    updates.push_back({first + static_cast<MPI_Aint>(8 * k), MPI_REPLACE, values[k]});
  update(ps, updates);
}

void ControlChannel::read(int ps, MPI_Aint word, int count, std::int64_t* out) {
  comm::Watchdog::beat("reading a PS's control words", window_.target(ps));
  if (ignored_.size() < static_cast<std::size_t>(count)) ignored_.resize(static_cast<std::size_t>(count));
  const MPI_Win win = window_.control().get();
  try {
    DRT_MPI_CHECK(MPI_Get_accumulate(ignored_.data(), count, MPI_INT64_T, out, count, MPI_INT64_T, window_.target(ps),
                                     word, count, MPI_INT64_T, MPI_NO_OP, win));
    DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
  } catch (const Error& e) {
    rethrow_towards(window_.target(ps), e);
  }
}

std::vector<bool> ControlChannel::probe(const std::vector<int>& ps_list, MPI_Aint word, double timeout_s,
                                        int max_nap_us) {
  struct Reads {  // one word each way per PS
    std::vector<std::int64_t> origin, result;
    std::vector<MPI_Request> requests;
  };
  auto reads = std::make_unique<Reads>();
  reads->origin.assign(ps_list.size(), 0);
  reads->result.assign(ps_list.size(), 0);
  reads->requests.assign(ps_list.size(), MPI_REQUEST_NULL);
  const MPI_Win win = window_.control().get();
  // An error (UCX reports a peer that stopped answering as one) counts as no answer.
  std::vector<bool> failed(ps_list.size(), false);
  for (std::size_t i = 0; i < ps_list.size(); ++i) {
    comm::Watchdog::beat("probing a PS's control words", window_.target(ps_list[i]));
    failed[i] = MPI_Rget_accumulate(&reads->origin[i], 1, MPI_INT64_T, &reads->result[i], 1, MPI_INT64_T,
                                    window_.target(ps_list[i]), word, 1, MPI_INT64_T, MPI_NO_OP, win,
                                    &reads->requests[i]) != MPI_SUCCESS;
  }
  std::vector<bool> answered(ps_list.size(), false);
  comm::PollWaiter waiter(timeout_s, max_nap_us);
  for (;;) {
    bool all = true;
    for (std::size_t i = 0; i < ps_list.size(); ++i) {
      if (answered[i] || failed[i]) continue;
      int done = 0;
      failed[i] = MPI_Test(&reads->requests[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS;
      answered[i] = !failed[i] && done != 0;
      all = all && (answered[i] || failed[i]);
    }
    if (all) break;
    if (!waiter.pause()) break;
  }
  if (std::all_of(answered.begin(), answered.end(), [](bool a) { return a; })) return answered;
  static std::vector<std::unique_ptr<Reads>> abandoned;  // MPI may still write into them
  abandoned.push_back(std::move(reads));
  return answered;
}

}  // namespace drt::ps
