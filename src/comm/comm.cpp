#include "drtrain/comm/comm.hpp"

#include <exception>
#include <utility>

#include "drtrain/comm/mpi_check.hpp"

namespace drt::comm {

Comm::Comm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  if (comm_ == MPI_COMM_NULL) return;
  if (owned_) DRT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  DRT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DRT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Comm Comm::world() { return Comm(MPI_COMM_WORLD, false); }

Comm::~Comm() { reset(); }

Comm::Comm(Comm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      owned_(std::exchange(other.owned_, false)),
      rank_(std::exchange(other.rank_, -1)),
      size_(std::exchange(other.size_, 0)) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    reset();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    owned_ = std::exchange(other.owned_, false);
    rank_ = std::exchange(other.rank_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Comm::reset() noexcept {
  // MPI_Comm_free is collective. While an exception unwinds this rank alone, freeing could
  // wait for peers that never come; the process is about to abort, so leave it to MPI_Abort.
  if (owned_ && comm_ != MPI_COMM_NULL && std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
  owned_ = false;
}

Comm Comm::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  DRT_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
  return Comm(out, true);
}

Comm Comm::split_shared() const {
  MPI_Comm out = MPI_COMM_NULL;
  DRT_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out));
  return Comm(out, true);
}

void Comm::barrier() const { DRT_MPI_CHECK(MPI_Barrier(comm_)); }

}  // namespace drt::comm
