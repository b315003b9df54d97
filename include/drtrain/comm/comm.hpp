// Comm: an MPI communicator handle. A communicator made by split() is owned and freed by its
// Comm; Comm::world() is a non-owning view of MPI_COMM_WORLD. Every owned communicator has
// MPI_ERRORS_RETURN set. Move-only.
#pragma once

#include <mpi.h>

namespace drt::comm {

class Comm {
 public:
  Comm() = default;  // MPI_COMM_NULL
  static Comm world();
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;

  MPI_Comm get() const { return comm_; }
  bool is_null() const { return comm_ == MPI_COMM_NULL; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Collective over this communicator. color < 0 gives a null Comm (MPI_UNDEFINED).
  Comm split(int color, int key) const;
  // Ranks that share memory with this one (one node), ordered by rank here.
  Comm split_shared() const;
  void barrier() const;

 private:
  Comm(MPI_Comm comm, bool owned);
  void reset() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace drt::comm
