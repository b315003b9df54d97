#include "control_channel.hpp"

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/watchdog.hpp"

namespace drt::ps {

ControlChannel::ControlChannel(const ShardWindow& window) : window_(window), epoch_(window.control()) {}

void ControlChannel::update(int ps, const std::vector<Update>& updates) {
  comm::Watchdog::beat("writing a PS's control words", window_.target(ps));
  values_.resize(updates.size());
  const MPI_Win win = window_.control().get();
  for (std::size_t i = 0; i < updates.size(); ++i) {
    values_[i] = updates[i].value;
    DRT_MPI_CHECK(MPI_Accumulate(&values_[i], 1, MPI_INT64_T, window_.target(ps), updates[i].word, 1, MPI_INT64_T,
                                 updates[i].op, win));
  }
  DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
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
  DRT_MPI_CHECK(MPI_Get_accumulate(ignored_.data(), count, MPI_INT64_T, out, count, MPI_INT64_T, window_.target(ps),
                                   word, count, MPI_INT64_T, MPI_NO_OP, win));
  DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
}

}  // namespace drt::ps
