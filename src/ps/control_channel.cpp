#include "control_channel.hpp"

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/watchdog.hpp"

namespace drt::ps {

ControlChannel::ControlChannel(const ShardWindow& window)
    : window_(window), epoch_(window.control()) {}

void ControlChannel::write(int ps, const std::vector<MPI_Aint>& words, std::int64_t value) {
  comm::Watchdog::beat("writing a PS's control words", window_.target(ps));
  value_ = value;
  const MPI_Win win = window_.control().get();
  for (MPI_Aint word : words)
    DRT_MPI_CHECK(MPI_Accumulate(&value_, 1, MPI_INT64_T, window_.target(ps), word, 1, MPI_INT64_T,
                                 MPI_REPLACE, win));
  DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
}

void ControlChannel::read(int ps, MPI_Aint word, int count, std::int64_t* out) {
  comm::Watchdog::beat("reading a PS's control words", window_.target(ps));
  if (ignored_.size() < static_cast<std::size_t>(count)) ignored_.resize(static_cast<std::size_t>(count));
  const MPI_Win win = window_.control().get();
  DRT_MPI_CHECK(MPI_Get_accumulate(ignored_.data(), count, MPI_INT64_T, out, count, MPI_INT64_T,
                                   window_.target(ps), word, count, MPI_INT64_T, MPI_NO_OP, win));
  DRT_MPI_CHECK(MPI_Win_flush(window_.target(ps), win));
}

}  // namespace drt::ps
