// Window: an MPI RMA window made with MPI_Win_allocate (MPI owns the memory, so Open MPI can
// place it in shared memory between ranks of one node: osc/sm). Owns the window; move-only;
// MPI_ERRORS_RETURN is set on it. PassiveEpoch: MPI_Win_lock_all/unlock_all as a scope guard.
//
// Freeing a window (or unlocking) is collective or may wait for peers; both are skipped while
// an exception unwinds this rank alone (the process is about to MPI_Abort).
#pragma once

#include <mpi.h>

#include <cstddef>

#include "drtrain/comm/comm.hpp"

namespace drt::comm {

// Hints passed to MPI_Win_allocate (all optional for correctness).
struct WindowHints {
  bool accumulate_ordering_none = true;  // no ordering between accumulates: we flush instead
  bool same_op_no_op = true;             // each location uses one op (plus MPI_NO_OP)
  bool shared_noncontig = true;          // osc/sm: page-align each rank's segment
};

class Window {
 public:
  Window() = default;
  // Collective over `comm`; each rank exposes `bytes` (0 allowed). disp_unit is 1 byte.
  static Window allocate(std::size_t bytes, const Comm& comm, const WindowHints& hints = {});
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  Window(Window&& other) noexcept;
  Window& operator=(Window&& other) noexcept;

  MPI_Win get() const { return win_; }
  void* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  // True when MPI keeps one copy of window memory (MPI_WIN_UNIFIED), as osc/sm and osc/rdma do.
  bool unified() const;

 private:
  void reset() noexcept;

  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

class PassiveEpoch {
 public:
  explicit PassiveEpoch(const Window& window);  // MPI_Win_lock_all(MPI_MODE_NOCHECK)
  ~PassiveEpoch();                              // MPI_Win_unlock_all
  PassiveEpoch(const PassiveEpoch&) = delete;
  PassiveEpoch& operator=(const PassiveEpoch&) = delete;

 private:
  MPI_Win win_;
};

}  // namespace drt::comm
